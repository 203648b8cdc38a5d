import itertools
import threading
import time

import psutil
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QSystemTrayIcon
from shiboken6 import isValid

from app.core.hardware import probe_hardware
from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.core.units import fmt_bytes
from app.main import build_shell
from app.ui.server_model import keep_serving_in_tray
from app.ui.server_page import ServerPage
from app.ui.server_tray import ServerTray


@pytest.fixture
def shell_factory(qtbot):
    shells = []

    def make(probe=None, settings=None, themes=None):
        paths = app_paths().ensure()
        store = SettingsStore(paths.settings_file)
        settings = settings or store.load().model_copy(update={"measure_bandwidth_on_start": False})
        shell = build_shell(paths, store, settings, probe=probe, themes=themes)
        qtbot.addWidget(shell.window)
        shells.append(shell)
        return shell, store

    yield make
    for s in shells:
        s.shutdown()


def test_window_opens_with_all_pages(shell_factory, qtbot):
    shell, _ = shell_factory()
    w = shell.window
    w.show()
    qtbot.waitExposed(w)
    labels = [w.sidebar.item(i).text() for i in range(w.sidebar.count())]
    assert labels == ["Discover", "My Models", "Downloads", "Chat", "Documents", "Server", "Benchmark", "Hardware"]
    assert w.current_page_key == "discover"  # a first start opens on Discover (issue 13), no longer Hardware
    w.show_page("server")
    assert isinstance(w.page("server"), ServerPage) and w.page("server").status_card.state_label.text() == "Stopped"


def test_a_download_count_in_the_sidebar_never_brings_a_scroll_bar(shell_factory, qtbot, themed):
    shell, _ = shell_factory(themes=themed)  # the themed window: icons and the style sheet's padding
    w = shell.window
    w.resize(900, 600)
    w.show()
    qtbot.waitExposed(w)
    w.set_page_label("downloads", "Downloads (12)")
    qtbot.wait(50)
    assert not w.sidebar.item(0).icon().isNull()
    assert not w.sidebar.horizontalScrollBar().isVisible()
    rect = w.sidebar.visualItemRect(w.sidebar.item(2))
    assert rect.right() <= w.sidebar.viewport().width()


def test_first_start_opens_on_discover_with_a_hint_and_no_empty_results(shell_factory, qtbot):
    shell, store = shell_factory()
    assert not store.path.exists()  # fresh settings: nothing saved by an earlier run
    w = shell.window
    w.show()
    qtbot.waitExposed(w)
    assert w.current_page_key == "discover" and w.sidebar.currentItem().text() == "Discover"
    search = w.page("discover").search
    assert search.hint.isVisible() and "Search the Hugging Face Hub" in search.hint.text()
    assert not search.view.isVisible() and not search.more.isVisible()


def test_a_page_saved_by_an_earlier_run_still_wins_over_discover(shell_factory, qtbot):
    base = SettingsStore(app_paths().ensure().settings_file).load()
    saved = base.model_copy(update={"window": base.window.model_copy(update={"page": "chat"})})
    shell, _ = shell_factory(settings=saved)
    assert shell.window.current_page_key == "chat"


def test_ctrl_number_opens_each_sidebar_page_in_order(shell_factory, qtbot):
    shell, _ = shell_factory()
    w = shell.window
    w.show()
    qtbot.waitExposed(w)
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow)
    keys = [w.sidebar.item(i).data(Qt.ItemDataRole.UserRole) for i in range(w.sidebar.count())]
    assert keys == ["discover", "models", "downloads", "chat", "documents", "server", "bench", "hardware"]
    for number in (2, 7, 4, 1, 6, 5, 3):  # out of order: each lands on its own page, not the next one
        target = w.focusWidget() or w  # whatever holds the focus on that page: the shortcut is window-wide
        qtbot.keyClick(target, getattr(Qt.Key, f"Key_{number}"), Qt.KeyboardModifier.ControlModifier)
        assert w.current_page_key == keys[number - 1]
        assert w.sidebar.currentRow() == number - 1


def test_double_clicking_a_model_opens_chat_with_it_loaded_and_the_message_box_focused(qtbot, tmp_path):
    from app.core.library import ModelFile
    from app.core.runtime.engine_host import EngineHost
    from app.core.services import Services
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.ui.chat_harness import no_preflight
    from tests.ui.test_library_page import double_click_row

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False})
    services = Services.open(paths, settings)
    services.pool.shutdown()
    engines: list = []
    services.pool = EngineHost(registry_with_fake(engines), preflight=no_preflight, name="test-chat-launch")
    for name in ("alpha", "beta"):
        path = tmp_path / f"{name}.fake"
        path.write_bytes(b"fake")
        services.library.add(name=name, format="fake", path=path, files=[ModelFile(path, 4)])
    shell = build_shell(paths, store, settings, services=services)
    try:
        w = shell.window
        qtbot.addWidget(w)
        w.show()
        qtbot.waitExposed(w)
        w.activateWindow()
        qtbot.waitUntil(w.isActiveWindow)
        w.show_page("models")
        library, chat = w.page("models"), w.page("chat")
        qtbot.waitUntil(lambda: library.table.rowCount() == 2, timeout=5_000)
        row = next(i for i, m in enumerate(library.models) if m.name == "beta")
        beta = library.models[row]
        double_click_row(library.table, row)
        assert w.current_page_key == "chat"
        assert chat.model_bar.picker.currentData().id == beta.id  # picked, though alpha was listed first
        qtbot.waitUntil(lambda: shell.services.pool.state.status == "ready", timeout=10_000)
        assert shell.services.pool.state.model.path == beta.path and len(engines) == 1
        qtbot.waitUntil(lambda: w.focusWidget() is chat.composer.editor, timeout=5_000)

        # Asking again for the model already loaded does not load it again: it only goes back to Chat.
        w.show_page("models")
        library.table.setFocus()
        double_click_row(library.table, row)
        assert w.current_page_key == "chat" and w.focusWidget() is chat.composer.editor
        assert shell.services.pool.state.model.path == beta.path and engines[0].loads == 1
    finally:
        shell.shutdown()


def test_a_library_change_still_queued_at_quit_does_not_read_the_closed_library(shell_factory, qtbot):
    """The double-click test's old flake: a change posted by a worker just before quit ran after the
    library closed ('Cannot operate on a closed database' inside Qt's event loop)."""
    shell, _ = shell_factory(probe=lambda _refresh=False: probe_hardware(measure_bandwidth=False))
    qtbot.wait(50)
    worker = threading.Thread(target=lambda: shell.services.library.changed.emit("m"))
    worker.start()
    worker.join()  # queued for the window's pages, not yet delivered
    shell.shutdown()
    with pytest.raises(Exception, match="closed database"):
        shell.services.library.list()  # the library is closed: reading it would fail
    qtbot.wait(250)  # the event loop runs what was queued; pytest-qt fails the test on an error there


def test_hardware_page_shows_this_machine(shell_factory, qtbot):
    shell, _ = shell_factory()
    page = shell.window.page("hardware")
    with qtbot.waitSignal(page.profile_ready, timeout=30_000) as blocker:
        page.refresh()
    profile = blocker.args[0]
    text = page.text()
    total = psutil.virtual_memory().total
    assert fmt_bytes(total) in text
    assert abs(profile.memory.total_bytes - total) / total < 0.01
    assert "NVIDIA" in text and "none found" in text.lower()  # no NVIDIA GPU here, and why
    assert "AVX2" in text
    assert "llama.cpp" in text


def test_refresh_runs_off_the_ui_thread(shell_factory, qtbot):
    release = threading.Event()
    real = probe_hardware(measure_bandwidth=False)
    probe_threads = []

    def slow_probe(refresh_bandwidth=False):
        probe_threads.append(threading.current_thread())
        release.wait(10)
        return real

    shell, _ = shell_factory(probe=slow_probe)
    page = shell.window.page("hardware")
    page.refresh()
    assert page.probing and page.status.text() == "Probing…"

    # The event loop keeps turning while the probe is blocked: timers fire on time.
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=2_000)
    timer.stop()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5
    assert page.probing
    page.refresh()  # a second click while probing is ignored, not queued
    assert len(probe_threads) == 1 and probe_threads[0] is not threading.main_thread()

    with qtbot.waitSignal(page.profile_ready, timeout=5_000):
        release.set()
    assert not page.probing
    assert page.status.text().startswith("Hardware checked")


def test_probe_failure_is_shown_and_page_stays_usable(shell_factory, qtbot):
    calls = []

    def failing(refresh_bandwidth=False):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("sensor exploded")
        return probe_hardware(measure_bandwidth=False)

    shell, _ = shell_factory(probe=failing)
    page = shell.window.page("hardware")
    with qtbot.waitSignal(page.probe_failed, timeout=5_000):
        page.refresh()
    assert "sensor exploded" in page.status.text()
    with qtbot.waitSignal(page.profile_ready, timeout=30_000):
        page.refresh()


def test_window_geometry_and_page_are_restored(shell_factory, qtbot):
    shell, store = shell_factory()
    w = shell.window
    w.show()
    w.resize(796, 560)  # the offscreen screen is 800 wide; the window's minimum is 790
    w.show_page("server")
    qtbot.wait(50)
    w.close()
    saved = store.load()
    assert saved.window.geometry and saved.window.page == "server"

    shell2, _ = shell_factory(settings=saved)
    w2 = shell2.window
    assert w2.current_page_key == "server"
    assert (w2.width(), w2.height()) == (796, 560)


def test_settings_dialog_saves(shell_factory, qtbot):
    shell, store = shell_factory()
    dialog = shell.window.open_settings()
    dialog.log_level.setCurrentText("DEBUG")
    dialog.models_dir.setText("/srv/models")
    dialog.accept()
    saved = store.load()
    assert saved.log_level == "DEBUG" and saved.models_dir == "/srv/models"
    assert shell.window.settings.log_level == "DEBUG"


def test_gpu_and_apple_cards_render_from_a_profile(shell_factory):
    from app.core.hardware.profile import AppleInfo, EngineAvailability, GpuInfo, HardwareProfile, NvidiaInfo

    gib = 1024**3
    profile = HardwareProfile(
        os="Linux",
        arch="x86_64",
        nvidia=NvidiaInfo(
            available=True,
            driver_version="550.54",
            cuda_version="12.4",
            gpus=[
                GpuInfo(
                    index=0,
                    name="NVIDIA GeForce RTX 4090",
                    memory_total_bytes=24 * gib,
                    memory_free_bytes=20 * gib,
                    memory_used_bytes=4 * gib,
                    compute_capability="8.9",
                    bandwidth_gbps=1008,
                ),
                GpuInfo(
                    index=1,
                    name="NVIDIA GeForce RTX 3090",
                    memory_total_bytes=24 * gib,
                    memory_free_bytes=23 * gib,
                    memory_used_bytes=1 * gib,
                    bandwidth_gbps=936,
                ),
            ],
        ),
        apple=AppleInfo(
            chip="Apple M2 Max",
            unified_memory_bytes=64 * gib,
            gpu_working_set_bytes=48 * gib,
            working_set_source="estimate",
            bandwidth_gbps=400,
        ),
        engines=[EngineAvailability(name="llama.cpp", available=False, reason="llama-cpp-python is not installed")],
    )
    shell, _ = shell_factory()
    page = shell.window.page("hardware")
    page.show_profile(profile)
    titles = [c.title for c in page.cards]
    assert titles == [
        "CPU and memory",
        "Apple M2 Max",
        "GPU 0: NVIDIA GeForce RTX 4090",
        "GPU 1: NVIDIA GeForce RTX 3090",
        "Engines",
    ]
    text = page.text()
    assert "20.0 GiB free of 24.0 GiB" in text and "1,008 GB/s" in text and "CUDA 12.4" in text
    assert "48.0 GiB usable by the GPU" in text
    assert "Not available: llama-cpp-python is not installed." in text


@pytest.mark.parametrize(
    ("os_name", "apple", "expected"),
    [
        ("Linux", False, "Installed, but MLX models need an Apple silicon Mac."),
        ("macOS", True, "Installed: version 0.29.0, runs on the GPU (Metal)."),
    ],
)
def test_the_engines_card_says_mlx_is_of_no_use_off_an_apple_silicon_mac(shell_factory, os_name, apple, expected):
    from app.core.hardware.profile import AppleInfo, EngineAvailability, HardwareProfile

    engines = [
        EngineAvailability(name="llama.cpp", available=True, version="0.3.16", backend="CPU"),
        EngineAvailability(
            name="mlx", available=True, version="0.29.0", backend="Metal" if apple else "CPU", gpu_offload=apple
        ),
    ]
    chip = AppleInfo(chip="Apple M2", unified_memory_bytes=16 * 1024**3) if apple else None
    shell, _ = shell_factory()
    page = shell.window.page("hardware")
    page.show_profile(HardwareProfile(os=os_name, arch="arm64" if apple else "x86_64", apple=chip, engines=engines))
    card = next(c for c in page.cards if c.title == "Engines")
    lines = card.text().splitlines()
    assert "MLX" in lines and expected in lines
    assert "Installed: version 0.3.16, runs on the CPU." in lines and "available — CPU" not in card.text()


def test_the_build_card_says_when_llama_cpp_cannot_use_the_gpu(shell_factory, qtbot):
    """The doctor's verdict runs after the probe, on the pool, and shows as the last card with its fix."""
    from app.core.hardware.profile import AmdIntelInfo, CpuInfo, GpuInfo, HardwareProfile
    from app.core.runtime.doctor import BuildInfo, diagnose

    gib = 1024**3
    radeon = GpuInfo(0, "AMD Radeon RX 7900 XTX", "amd", 24 * gib, 23 * gib, gib, bandwidth_gbps=960)
    profile = HardwareProfile(
        os="Linux",
        arch="x86_64",
        cpu=CpuInfo(brand="AMD Ryzen 9 7950X", simd=["avx", "avx2", "fma", "f16c"]),
        amd_intel=AmdIntelInfo(source="sysfs", gpus=[radeon]),
    )
    build = BuildInfo(version="0.3.36", backend="CPU", cpu_features=["avx", "avx2", "fma", "f16c"])
    threads = []

    def doctor(p):
        threads.append(threading.current_thread())
        return diagnose(p, build, [])

    shell, _ = shell_factory(probe=lambda refresh=False: profile)
    page = shell.window.page("hardware")
    page._diagnose = doctor
    with qtbot.waitSignal(page.profile_ready, timeout=10_000):
        page.refresh()
    qtbot.waitUntil(lambda: page.report is not None, timeout=10_000)
    assert threads and threads[0] is not threading.main_thread()
    assert [c.title for c in page.cards][-2:] == ["Engines", "llama.cpp build"]
    text = page.cards[-1].text()
    assert "built for the CPU only" in text and "AMD Radeon RX 7900 XTX" in text
    assert "make engine BACKEND=vulkan" in text and "ROCm" in text
    # A second probe keeps one build card, not two
    with qtbot.waitSignal(page.profile_ready, timeout=10_000):
        page.refresh()
    qtbot.waitUntil(lambda: not page.probing, timeout=10_000)
    qtbot.wait(200)
    assert [c.title for c in page.cards].count("llama.cpp build") == 1


def test_a_native_crash_last_time_is_told_in_the_chat(qtbot):
    """Services.open turns a crash marker into a sentence; the window shows it once, in the chat."""
    from app.core.services import Services

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False})
    services = Services.open(paths, settings)
    services.crash_notes = ["Hearth stopped unexpectedly while Model.gguf was generating text; it will load safer."]
    shell = build_shell(paths, store, settings, probe=lambda refresh=False: probe_hardware(measure_bandwidth=False),
                        services=services)  # fmt: skip
    qtbot.addWidget(shell.window)
    try:
        notice = shell.window.page("chat").notice
        assert not notice.isHidden() and "Model.gguf was generating text" in notice.text()
    finally:
        shell.shutdown()


def test_damaged_chat_database_is_reported_at_start(qapp, monkeypatch, themed):
    """(`themed` puts the application's look back afterwards: main() themes it for good, as the app does.)"""
    from PySide6.QtWidgets import QMessageBox

    import app.main

    paths = app_paths().ensure()
    (paths.data / "chats.sqlite3").write_bytes(b"this is not a database" * 100)
    shown = []
    monkeypatch.setattr(QMessageBox, "critical", staticmethod(lambda parent, title, text: shown.append(text)))
    assert app.main.main([]) == 1
    assert shown and "chats.sqlite3" in shown[0]


def test_sigterm_closes_the_app_cleanly(hearth_home):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEARTH_HOME": str(hearth_home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app"], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = hearth_home / "logs" / "hearth.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "model pool" in log.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    text = log.read_text()
    assert "model pool hearth-engine stopped" in text and "Hearth stopped" in text


def test_chat_model_picked_before_the_probe_is_planned_again_when_it_arrives(shell_factory, qtbot, tiny_gguf_f16):
    from app.core.library.store import ModelFile

    shell, _ = shell_factory(probe=lambda measure: probe_hardware(measure_bandwidth=False))
    bar = shell.window.page("chat").model_bar
    hardware = shell.window.page("hardware")
    shell.services.library.add(
        name="tiny", format="gguf", path=tiny_gguf_f16, files=[ModelFile(tiny_gguf_f16, tiny_gguf_f16.stat().st_size)]
    )
    qtbot.waitUntil(lambda: "not probed" in bar.defaults.note, timeout=10_000)  # picked, no machine yet
    with qtbot.waitSignal(hardware.profile_ready, timeout=30_000):
        hardware.refresh()
    qtbot.waitUntil(lambda: bar.defaults.offload != "", timeout=10_000)
    assert bar.defaults.note == "" and bar.defaults.predicted_tok_s > 0
    assert "layers on GPU" in bar.defaults.offload


# ---- closing the window: quit, or keep serving from the tray ---------------------------------------


class UserClose(QCloseEvent):
    """A close the user asked for from the window system (the title bar's ×): Qt marks those spontaneous.
    A test cannot make Qt send one, so it calls closeEvent with this directly."""

    def spontaneous(self) -> bool:
        return True


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("available, serving, setting", list(itertools.product([True, False], repeat=3)))
def test_closing_keeps_serving_only_with_a_tray_a_running_server_and_the_setting(available, serving, setting):
    assert keep_serving_in_tray(available, serving, setting) is (available and serving and setting)


def test_without_a_tray_closing_the_window_quits_as_before(shell_factory, qtbot):
    shell, _ = shell_factory()
    assert not QSystemTrayIcon.isSystemTrayAvailable() and shell.tray is None  # offscreen has no tray
    w = shell.window
    w.show()
    qtbot.waitExposed(w)
    event = UserClose()
    w.closeEvent(event)
    assert event.isAccepted()


@pytest.fixture
def serving_shell(shell_factory, qtbot):
    """A shell whose window has a (pretend-available) tray, with its API server running on a free port."""
    base = SettingsStore(app_paths().ensure().settings_file).load()
    base = base.model_copy(
        update={"measure_bandwidth_on_start": False, "server": base.server.model_copy(update={"port": _free_port()})}
    )
    shell, store = shell_factory(settings=base)
    quits: list[bool] = []
    tray = ServerTray(shell.api, shell.window, lambda: shell.services.settings.server.keep_serving_in_tray,
                      available=lambda: True, quit_app=lambda: quits.append(True))  # fmt: skip
    shell.window.close_to_tray = tray.take_window
    assert shell.api.start().running
    shell.window.show()
    qtbot.waitExposed(shell.window)
    return shell, store, tray, quits


def _save_server(shell, store, qtbot, **changes) -> None:
    """Save Server settings as the page does and wait until the window holds them too."""
    current = shell.services.settings
    store.save(current.model_copy(update={"server": current.server.model_copy(update=changes)}))
    qtbot.waitUntil(lambda: shell.window.settings.server == shell.services.settings.server)


def test_closing_while_serving_hides_the_window_to_the_tray(serving_shell, qtbot):
    shell, _, tray, quits = serving_shell
    w = shell.window
    qtbot.waitUntil(lambda: tray.url_action.text() == f"Serving at {shell.api.status.url}")
    event = UserClose()
    w.closeEvent(event)
    assert not event.isAccepted() and not w.isVisible() and tray.icon.isVisible()
    assert shell.api.status.running  # still serving
    assert [a.text() for a in tray.menu.actions() if not a.isSeparator()] == [
        f"Serving at {shell.api.status.url}",
        "Open Hearth",
        "Quit",
    ]

    tray.open_action.trigger()
    assert w.isVisible() and not tray.icon.isVisible()

    tray.quit_action.trigger()  # the normal quit: QApplication.quit, then main's shutdown
    assert quits == [True] and not tray.icon.isVisible()


def test_quit_from_the_menu_closes_for_real_even_while_serving(serving_shell):
    shell, _, tray, _ = serving_shell
    shell.window.close()  # File → Quit and app.quit() close the window this way: not spontaneous
    assert not shell.window.isVisible() and not tray.icon.isVisible()


def test_closing_quits_when_the_server_is_stopped_or_the_setting_is_off(serving_shell, qtbot):
    shell, store, tray, _ = serving_shell
    _save_server(shell, store, qtbot, keep_serving_in_tray=False)
    event = UserClose()
    shell.window.closeEvent(event)
    assert event.isAccepted() and not tray.icon.isVisible()

    _save_server(shell, store, qtbot, keep_serving_in_tray=True)
    shell.api.stop()
    event = UserClose()
    shell.window.closeEvent(event)
    assert event.isAccepted() and not tray.icon.isVisible()


def test_settings_saved_elsewhere_are_not_written_back_stale_when_the_window_closes(shell_factory, qtbot):
    shell, store = shell_factory()
    current = shell.services.settings
    server = current.server.model_copy(update={"api_key": "hearth-kept", "queue_size": 5})
    store.save(current.model_copy(update={"server": server}))  # as the Server page or the LAN key does
    qtbot.waitUntil(lambda: shell.window.settings.server.api_key == "hearth-kept")
    shell.window.close()
    saved = store.load()
    assert saved.server.api_key == "hearth-kept" and saved.server.queue_size == 5


def test_settings_open_with_ctrl_comma_on_every_platform(shell_factory):
    from PySide6.QtGui import QKeySequence

    shell, _ = shell_factory()
    [action] = [a for a in shell.window.menuBar().actions()[0].menu().actions() if "Settings" in a.text()]
    assert QKeySequence("Ctrl+,") in action.shortcuts()


WINDOW_FIRST = """
import json, sys
import app.main
from app.core.services import Services
from app.ui.main_window import MainWindow
from PySide6.QtWidgets import QApplication

seen, real_open, real_build = {}, Services.open, app.main.build_shell

def open_after_the_window(paths, settings):
    windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
    seen["visible"] = [w.isVisible() for w in windows]
    seen["chat page before"] = [type(w.page("chat")).__name__ for w in windows]
    return real_open(paths, settings)

def build(*args, **kwargs):
    shell = real_build(*args, **kwargs)
    seen["chat page after"] = type(shell.window.page("chat")).__name__
    seen["same window"] = kwargs.get("window") is shell.window
    seen["page"] = shell.window.current_page_key
    return shell

Services.open = staticmethod(open_after_the_window)
app.main.build_shell = build
seen["rc"] = app.main.main([])
print(json.dumps(seen))
"""


def test_the_window_shows_before_the_services_open_and_is_filled_after(hearth_home):
    """main(): the sidebar and blank pages are on screen before the services open and the pages are built
    (most of the start); then the real pages take their places, Discover still selected. In a child
    process: a QApplication that has run exec() is no use to the tests after it."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEARTH_HOME": str(hearth_home), "HEARTH_QUIT_AFTER_MS": "0"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", WINDOW_FIRST], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["rc"] == 0 and seen["visible"] == [True] and seen["chat page before"] == ["QWidget"]
    assert seen["chat page after"] == "ChatPage" and seen["same window"] and seen["page"] == "discover"


def test_a_page_put_in_later_keeps_the_sidebar_selection(qtbot):
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QLabel

    from app.ui.main_window import MainWindow

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    window = MainWindow(store, store.load(), paths, [("a", "A", None), ("b", "B", None)])
    qtbot.addWidget(window)
    window.show_page("b")
    placeholder = window.page("b")
    late = QLabel("late")
    window.set_page("b", late)
    assert window.page("b") is late and window.stack.currentWidget() is late
    assert window.current_page_key == "b" and window.stack.count() == 2
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not isValid(placeholder)  # the blank page is deleted, not left behind
