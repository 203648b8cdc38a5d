"""Composition root: the one place that wires core, (later) server and ui together."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from app.core.errors import HearthError
from app.core.logs import configure_logging
from app.core.paths import AppPaths, app_paths
from app.core.settings import Settings, SettingsStore

if TYPE_CHECKING:  # imported where used: the window shows before the services and their imports load
    from app.core.hardware import HardwareProfile
    from app.core.models.devices import Machine
    from app.core.runtime.chat_templates import TemplatePrefs
    from app.core.services import Services

logger = logging.getLogger(__name__)

QUIT_AFTER_ENV = "HEARTH_QUIT_AFTER_MS"  # quit this long after the window is filled: how bundle-check runs the GUI
QUANT_PROBE_DELAY_S = 30.0  # let start-up (the window, resumed downloads, the API) settle before measuring
API_STOP_S = 5.0  # the API server's stop: open requests cancelled, then a second's grace (runner.GRACEFUL_S)


@dataclass
class Shell:
    """What `build_shell` wires: kept together so `main` and the tests shut it down the same way."""

    window: MainWindow  # noqa: F821 (Qt type, imported lazily)
    tasks: TaskRunner  # noqa: F821
    pool: ThreadPoolExecutor
    services: Services
    api: ApiService  # noqa: F821 (imported lazily: FastAPI must not slow the start)
    tray: ServerTray | None = None  # noqa: F821 (None where the desktop has no system tray)

    def shutdown(self) -> None:
        """Stop the API server (its open requests are cancelled) on a thread of its own while the reply being
        written stops (saved as stopped), the widgets stop receiving, and the core services close (downloads
        pause with their partials kept, the engine and the MCP servers stop): quitting takes the slowest of
        these, not their sum."""
        from app.ui.bridge import EventBridge

        api = threading.Thread(target=self._stop_api, name="hearth-close-api", daemon=True)
        api.start()
        self.window.page("chat").shutdown()
        self.tasks.close()
        # Core events already queued for a widget must not run after the services they read are closed.
        owners = [self.window] + ([self.tray] if self.tray is not None else [])
        for bridge in [b for owner in owners for b in owner.findChildren(EventBridge)]:
            bridge.close()
        self.services.close()
        api.join(API_STOP_S + 1)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _stop_api(self) -> None:
        try:
            self.api.stop(API_STOP_S)
        except Exception:  # the rest of the shutdown goes on
            logger.exception("stopping the API server failed")


def make_api(services: Services, store: SettingsStore) -> ApiService:  # noqa: F821
    """The API server over the app's one engine host; a key it makes for LAN mode is saved to Settings.
    (FastAPI and uvicorn are imported here, not at startup: the window must not wait for them.)"""
    from app.server.service import ApiService

    def save_key(key: str) -> None:
        current = services.settings
        store.save(current.model_copy(update={"server": current.server.model_copy(update={"api_key": key})}))

    return ApiService(
        services.pool,
        services.library,
        services.resolver,
        lambda: services.settings.server,
        save_key,
        services.paths.responses_file,
        hub=services.hub,
        downloads=lambda: services.downloads,  # pulls over the API show in Downloads and land in My Models
        documents=services.documents,  # a vector store over the API is a collection on the Documents page
        uploads=services.paths.uploads,
    )


def make_probe(paths: AppPaths, settings: Settings) -> Callable[[bool], HardwareProfile]:
    from app.core.hardware import probe_hardware

    def probe(refresh_bandwidth: bool = False) -> HardwareProfile:
        """Runs on the background pool."""
        return probe_hardware(
            cache_dir=paths.cache,
            measure_bandwidth=settings.measure_bandwidth_on_start or refresh_bandwidth,
            refresh_bandwidth=refresh_bandwidth,
        )

    return probe


@dataclass
class LatestHardware:
    """The latest hardware probe, as the pages read it (main thread): the chat's load defaults plan with its
    machine, and a benchmark's report records the profile."""

    profile: HardwareProfile | None = None
    machine: Machine | None = None

    def update(self, profile: HardwareProfile) -> None:
        from app.core.models.devices import machine_from_profile

        self.profile, self.machine = profile, machine_from_profile(profile)


@dataclass
class PageParts:
    """What the pages are built from: the services, the settings and the few things pages share. Each page's
    factory (PAGES) takes what it needs of it."""

    paths: AppPaths
    store: SettingsStore
    services: Services
    api: ApiService  # noqa: F821
    tasks: TaskRunner  # noqa: F821
    probe: Callable[[bool], HardwareProfile]
    templates: TemplatePrefs  # the chat template picked per model: on My Models and in the chat's model bar
    hardware: LatestHardware = field(default_factory=LatestHardware)
    # The pages built so far, by key (each its own type, as MainWindow.page gives them), and the window once built.
    pages: dict[str, Any] = field(default_factory=dict)
    window: MainWindow | None = None  # noqa: F821

    def add_remote(self, url: str) -> None:
        """A plan on Discover said "add it as a remote": My Models opens its remotes panel on that address."""
        library = self.pages.get("models")
        if self.window is not None and library is not None and library.remotes_panel is not None:
            self.window.show_page("models")
            library.remotes_panel.add_clicked(url)


def _discover(p: PageParts) -> QWidget:  # noqa: F821
    from app.ui.discover.discover_page import DiscoverPage

    return DiscoverPage(p.tasks, hub=p.services.hub, add_remote=p.add_remote)


def _models(p: PageParts) -> QWidget:  # noqa: F821
    from app.ui.library_page import LibraryPage

    s = p.services
    return LibraryPage(s.library, p.tasks, remotes=s.remotes, host=s.pool, templates=p.templates)


def _downloads(p: PageParts) -> QWidget:  # noqa: F821
    from app.ui.downloads_panel import DownloadsPanel

    return DownloadsPanel(p.services.downloads, p.tasks, hub=p.services.hub)


def _chat(p: PageParts) -> QWidget:  # noqa: F821
    from app.core.runtime.drafts import DraftFinder, DraftPrefs
    from app.ui.chat.chat_page import ChatPage
    from app.ui.remotes_panel import remote_models

    s = p.services
    chat = ChatPage(
        s.pool,
        s.chats,
        s.library,
        p.tasks,
        machine_source=lambda: p.hardware.machine,
        remote_models=remote_models(s.remotes),
        parallel=lambda: s.settings.parallel_requests,
        serving=lambda: p.api.status.running,
        drafts=DraftPrefs(s.resolver.drafts or DraftFinder(s.library), lambda: s.settings, p.store.save),
        tools=s.tools,
        tool_steps=lambda: s.settings.tool_steps,
        templates=p.templates,
        documents=s.documents,
    )
    if s.crash_notes:  # a native crash last time: say so once, in the chat where it would be felt
        chat.show_notice(" ".join(s.crash_notes), "error")
    return chat


def _documents(p: PageParts) -> QWidget:  # noqa: F821
    from app.ui.documents.page import DocumentsPage
    from app.ui.download_button import DownloadFeed

    s, downloads = p.services, p.pages["downloads"]  # built before: a suggested model downloads through its queue
    assert s.documents is not None
    return DocumentsPage(
        s.documents,
        s.library,
        p.tasks,
        role_of=s.resolver.role,
        machine=lambda: p.hardware.machine,
        settings=lambda: s.settings,
        save_settings=p.store.save,
        feed=DownloadFeed(downloads, s.library, p.tasks),
        request_download=downloads.request_download,
    )


def _server(p: PageParts) -> QWidget:  # noqa: F821
    from app.server.keys import new_api_key
    from app.ui.server_page import ServerPage

    s = p.services
    return ServerPage(p.api, p.store, lambda: s.settings, s.library, s.pool, p.tasks, new_key=new_api_key)


def _bench(p: PageParts) -> QWidget:  # noqa: F821
    from app.core.bench.store import BenchStore
    from app.ui.bench.bench_page import BenchPage

    s = p.services
    store = BenchStore.for_paths(p.paths)
    return BenchPage(s.pool, s.library, store, p.tasks, calibration=s.calibration, hardware=lambda: p.hardware.profile)


def _hardware(p: PageParts) -> QWidget:  # noqa: F821
    from app.core.runtime.doctor import diagnose_this_machine
    from app.ui.hardware_page import HardwarePage

    return HardwarePage(p.probe, p.tasks, diagnose=diagnose_this_machine)


@dataclass(frozen=True)
class PageSpec:
    """A page of the window: its key, its sidebar label, and how it is built (main thread)."""

    key: str
    title: str
    build: Callable[[PageParts], QWidget]  # noqa: F821


# The sidebar, top to bottom; pages are built in this order. The window can show them before they are built.
PAGES = (
    PageSpec("discover", "Discover", _discover),
    PageSpec("models", "My Models", _models),
    PageSpec("downloads", "Downloads", _downloads),
    PageSpec("chat", "Chat", _chat),
    PageSpec("documents", "Documents", _documents),
    PageSpec("server", "Server", _server),
    PageSpec("bench", "Benchmark", _bench),
    PageSpec("hardware", "Hardware", _hardware),
)


def build_shell(
    paths: AppPaths,
    store: SettingsStore,
    settings: Settings,
    probe: Callable[[bool], HardwareProfile] | None = None,
    services: Services | None = None,
    themes: ThemeManager | None = None,  # noqa: F821 (Qt type, imported lazily)
    window: MainWindow | None = None,  # noqa: F821
) -> Shell:
    """Build every page (PAGES) and wire them to the services and to each other. Into `window` when given (the
    app shows it first, with its sidebar and empty pages, and fills it here), else into a new one."""
    from PySide6.QtWidgets import QSystemTrayIcon

    from app.core.runtime.chat_templates import TemplatePrefs
    from app.ui.main_window import MainWindow
    from app.ui.server_tray import ServerTray
    from app.ui.tasks import TaskRunner

    if services is None:
        from app.core.services import Services

        services = Services.open(paths, settings)
    store.changed.connect(services.apply_settings)
    api = make_api(services, store)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hearth-bg")
    tasks = TaskRunner(pool)
    templates = TemplatePrefs(lambda: services.settings, store.save)
    parts = PageParts(paths, store, services, api, tasks, probe or make_probe(paths, settings), templates)
    for spec in PAGES:
        parts.pages[spec.key] = spec.build(parts)
    if window is None:
        window = MainWindow(store, settings, paths, [(spec.key, spec.title, parts.pages[spec.key]) for spec in PAGES])
    else:
        for key, page in parts.pages.items():
            window.set_page(key, page)
    parts.window = window
    wire_pages(parts, window)
    follow_settings(window, store, services, parts.pages, themes)
    tray = None
    if QSystemTrayIcon.isSystemTrayAvailable():
        tray = ServerTray(api, window, lambda: services.settings.server.keep_serving_in_tray)
        window.close_to_tray = tray.take_window
    return Shell(window=window, tasks=tasks, pool=pool, services=services, api=api, tray=tray)


def wire_pages(parts: PageParts, window: MainWindow) -> None:  # noqa: F821
    """Main thread: what one page tells another, and the core's events the pages follow."""
    from app.ui.bridge import EventBridge
    from app.ui.chat_launch import ChatLauncher
    from app.ui.download_button import DownloadFeed

    pages, services, tasks = parts.pages, parts.services, parts.tasks
    discover, library, downloads, chat = pages["discover"], pages["models"], pages["downloads"], pages["chat"]
    hardware, bench = pages["hardware"], pages["bench"]
    hardware.profile_ready.connect(discover.set_profile)
    hardware.profile_ready.connect(parts.hardware.update)
    hardware.profile_ready.connect(lambda _p: chat.model_bar.replan())  # after the machine is updated above
    discover.download_requested.connect(downloads.request_download)
    feed = DownloadFeed(downloads, services.library, tasks, parent=discover)
    discover.set_feed(feed)
    if library.remotes_panel is not None:  # a server added or removed on My Models: the picker lists it
        library.remotes_panel.changed.connect(chat.model_bar.refresh_models)
    library_changed = EventBridge(services.library.changed, chat)
    library_changed.fired.connect(lambda _id: chat.model_bar.refresh_models())
    library_changed.fired.connect(lambda _id: bench.refresh_models())
    launcher = ChatLauncher(chat, tasks, lambda: window.show_page("chat"))
    library.chat_requested.connect(launcher.chat_with)
    library.discover_requested.connect(lambda: window.show_page("discover"))  # "Find a model" on an empty My Models
    feed.chat_requested.connect(launcher.chat_with)  # "Downloaded — Chat" / "In My Models — Chat" on Discover
    # The panel's count arrives on the UI thread (its EventBridges re-post the manager's events).
    downloads.active_count_changed.connect(lambda _n: window.set_page_label("downloads", downloads.sidebar_label()))
    window.set_page_label("downloads", downloads.sidebar_label())  # unfinished downloads from the last run


def follow_settings(
    window: MainWindow,  # noqa: F821
    store: SettingsStore,
    services: Services,
    pages: dict[str, Any],
    themes: ThemeManager | None,  # noqa: F821
) -> None:
    """Main thread: settings saved anywhere reach the window's copy, the chat's next load and the theme."""
    from app.ui.bridge import EventBridge

    chat, bench = pages["chat"], pages["bench"]
    # The window saves its copy of Settings when it closes: keep it current with saves made elsewhere
    # (the Server page, the key the server makes for LAN mode), or closing would write them back stale.
    saved = EventBridge(store.changed, window)
    saved.fired.connect(lambda s: setattr(window, "settings", s.model_copy(update={"window": window.settings.window})))
    parallel = {"now": services.settings.parallel_requests}

    speculative = {"now": services.settings.speculative}

    def parallel_changed(s: Settings) -> None:
        """Main thread: a new Parallel requests setting re-plans the chat's next load (its slots while the
        server serves); a new Speculative decoding setting re-plans the chat's next load."""
        if s.parallel_requests != parallel["now"]:
            parallel["now"] = s.parallel_requests
            chat.model_bar.replan()
        elif s.speculative != speculative["now"]:
            chat.model_bar.replan()
        speculative["now"] = s.speculative

    saved.fired.connect(parallel_changed)
    if themes is not None:
        saved.fired.connect(lambda s: themes.apply(s.theme))  # a new Appearance applies at once

        def recolour(_theme: str = "") -> None:
            window.apply_icons(themes.palette["text"], themes.palette["accent_text"])
            chat.restyle(themes.palette.colours, themes.theme == "dark")
            bench.restyle()

        themes.changed.connect(recolour)
        recolour()


def start_quant_probe_if_wanted(paths: AppPaths, settings: Settings) -> threading.Thread | None:
    """Measure this CPU's decode rate per weight type once per CPU and llama.cpp build, in the background
    and only on a quiet machine (bench/quant_probe.py); the speed model uses the table until then."""
    if not settings.measure_bandwidth_on_start:
        return None
    from app.core.bench.quant_probe import start_quant_probe

    return start_quant_probe(paths.cache, delay_s=QUANT_PROBE_DELAY_S)


def _quit_on_signals(app) -> None:
    """SIGTERM/SIGINT (logout, `kill`, Ctrl-C in a terminal) close Hearth like Quit does, so a reply
    being written is saved as stopped and downloads keep their partials. Python only runs its signal
    handlers between bytecodes, so a light timer lets it look in while Qt's loop runs."""
    import signal

    from PySide6.QtCore import QTimer

    for sig in (signal.SIGTERM, signal.SIGINT):
        # Posted, not called: a signal that arrives before the loop starts still quits once it runs.
        signal.signal(sig, lambda *_: QTimer.singleShot(0, app.quit))
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)
    timer.start(250)


def _quit_after(app) -> None:
    """With HEARTH_QUIT_AFTER_MS=N, quit N ms after the window's pages are built, the way Quit does (the same
    shutdown path), so a packaged build can prove headless that its window opens and closes cleanly."""
    raw = os.environ.get(QUIT_AFTER_ENV, "").strip()
    if not raw:
        return
    try:
        ms = int(raw)
    except ValueError:
        logger.warning("%s=%r is not a whole number of milliseconds; ignored", QUIT_AFTER_ENV, raw)
        return
    from PySide6.QtCore import QTimer

    logger.info("quitting after %d ms (%s)", ms, QUIT_AFTER_ENV)
    QTimer.singleShot(max(0, ms), app.quit)


def exit_now(code: int) -> NoReturn:
    """End the process once Hearth has shut down, without the interpreter's teardown. By then every store is
    closed, the engine has stopped (its in-flight markers cleared), the MCP servers have ended and the logs
    are flushed here; what the teardown would add is seconds of freeing (a full garbage collection of Qt's,
    llama.cpp's and numpy's objects, module by module) and of joining pool threads still busy with work that
    holds nothing of the user's (a hardware probe)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or none (a windowed build has no console)
            pass
    os._exit(code)


def main(argv: list[str] | None = None, *, exit_process: bool = False) -> int:
    """The app, until it quits; its exit code. `exit_process`: end the process right after the shutdown
    (exit_now) rather than return, as `python -m app` and `hearth` do (a caller in the same process, a test,
    leaves it False)."""
    started = time.monotonic()
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load()
    log_file = configure_logging(paths.logs, settings.log_level)
    logger.info("Hearth starting; log at %s", log_file)

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.ui.main_thread_gc import MainThreadGC
    from app.ui.main_window import MainWindow
    from app.ui.theme import ThemeManager
    from app.ui.wheel_guard import WheelGuard

    app = QApplication.instance() or QApplication(list(argv) if argv is not None else sys.argv)
    app.setApplicationName("Hearth")
    collector = MainThreadGC(app)
    _quit_on_signals(app)
    WheelGuard.install(app)
    themes = ThemeManager(app, settings.theme)
    themes.apply()
    # The window first, with its sidebar and empty pages; the services and pages fill it a moment later.
    window = MainWindow(store, settings, paths, [(spec.key, spec.title, None) for spec in PAGES])
    window.apply_icons(themes.palette["text"], themes.palette["accent_text"])
    window.show()
    shells: list[Shell] = []

    def fill() -> None:
        """Main thread, once the window is on screen: open the services, build the pages, start work."""
        from app.core.services import Services

        try:
            services = Services.open(paths, settings)
        except HearthError as exc:  # e.g. a damaged chat database: say what happened and how to recover
            from PySide6.QtWidgets import QMessageBox

            logger.error("cannot start: %s", exc)
            QMessageBox.critical(window, "Hearth cannot start", str(exc))
            app.exit(1)
            return
        shell = build_shell(paths, store, settings, services=services, themes=themes, window=window)
        shells.append(shell)
        from app.core.hardware.engines import prewarm_engines

        # Importing llama_cpp takes ~0.3 s of the GIL: begun only once the window is up, so it cannot delay it.
        prewarm_engines()
        window.page("hardware").refresh()
        window.page("discover").check_hub()  # offline at start: Discover says so before any Download is tried
        start_quant_probe_if_wanted(paths, settings)
        shell.tasks.run(shell.services.start)  # resume unfinished downloads once the window is up
        if settings.server.start_with_app:
            shell.tasks.run(shell.api.start)  # binding and starting uvicorn stay off the UI thread
        _quit_after(app)

    def shown() -> None:
        """Main thread: the loop has run the show and its first paint; the next turn fills the window."""
        logger.info("window shown %.2f s after main() began", time.monotonic() - started)
        QTimer.singleShot(0, fill)

    QTimer.singleShot(0, shown)
    quitting: dict[str, float] = {}

    def quit_asked() -> None:
        """Main thread: the loop is ending (Quit, a signal, the last window closed); bench/app_lifecycle.py
        times the exit from this line."""
        quitting.setdefault("at", time.monotonic())
        logger.info("quit asked")

    app.aboutToQuit.connect(quit_asked)
    code = 1
    try:
        code = app.exec()
    finally:
        for shell in shells:
            shell.shutdown()
        took = time.monotonic() - quitting.get("at", time.monotonic())
        logger.info("Hearth stopped, %.2f s after quit was asked", took)
        if not exit_process:  # a caller in this process gets its garbage collector back (a full collection)
            collector.stop()
            # and its application without this window (a process that exits leaves that to the OS)
            window.hide()
            window.deleteLater()
    if exit_process:
        exit_now(code)
    return code
