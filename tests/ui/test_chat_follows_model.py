"""Issue 46 item 9: after the chat's model is unloaded (an Eject in the strip, or Unload), a ModelPool moves
the chat to another loaded model; the picker follows it instead of showing the gone model with Load."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.core.engines.base import LoadSpec
from app.core.library import Library, import_path
from app.core.runtime.jobs import LoadJob
from app.core.runtime.pool import ModelPool
from app.ui.chat.model_bar import ModelBar
from app.ui.chat.stream import HostWatcher
from app.ui.tasks import TaskRunner
from tests.fixtures.fake_engine import registry_with_fake
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf


@pytest.fixture
def bar_on_a_pool(qtbot, tmp_path):
    """A model bar over a real ModelPool of FakeEngines, fed the pool's state as the Chat page feeds it;
    its picker lists two library models (tiny GGUFs, loaded here by the fake engine)."""
    library = Library(tmp_path / "models", tmp_path / "library.db")
    files = {}
    for name in ("gemma", "smol"):
        path = write_tiny_llama_gguf(tmp_path / f"{name}.gguf", n_layer=1, n_embd=128, n_ff=256)
        files[name] = Path(import_path(library, path).imported[0].path)
    pool = ModelPool(registry_with_fake(), machine=lambda: None)
    executor = ThreadPoolExecutor(2)
    tasks = TaskRunner(executor)
    bar = ModelBar(pool, library, tasks)
    qtbot.addWidget(bar)
    watcher = HostWatcher(pool, bar)
    watcher.changed.connect(bar.host_state)
    bar.show()
    yield bar, pool, files, watcher
    tasks.close()
    assert pool.shutdown(5.0)
    executor.shutdown(wait=True)
    library.close()


def load(pool: ModelPool, path: Path) -> None:
    handle = pool.submit(LoadJob(spec=LoadSpec(path=path, n_ctx=512), format="fake", plan_check=False))
    assert handle.wait(5) and handle.error is None, handle.error


def picked_name(bar: ModelBar) -> str:
    return Path(bar.picker.currentData().path).stem


def test_after_an_eject_the_picker_shows_the_model_the_chat_moved_to(qtbot, bar_on_a_pool):
    bar, pool, files, _watcher = bar_on_a_pool
    load(pool, files["smol"])
    bar.picker.setCurrentIndex(next(i for i in range(bar.picker.count()) if bar.picker.itemData(i).name == "gemma"))
    load(pool, files["gemma"])  # the chat's Load: gemma is in focus, smol stays loaded beside it
    qtbot.waitUntil(lambda: bar.picked_is_loaded() and bar.load_button.text() == "Reload", timeout=5_000)
    assert picked_name(bar) == "gemma"
    gemma_row = next(row for row in bar.loaded_models.rows.values() if row.key == str(files["gemma"].resolve()))
    gemma_row.eject.click()
    # The pool moves the chat to smol: the picker says so, and offers Reload (it is loaded), not Load.
    qtbot.waitUntil(lambda: picked_name(bar) == "smol", timeout=5_000)
    qtbot.waitUntil(lambda: bar.load_button.text() == "Reload", timeout=5_000)
    assert bar.picked_is_loaded() and bar.status.text().startswith("smol")


def test_a_model_the_user_picked_to_load_is_not_taken_from_them(qtbot, bar_on_a_pool):
    bar, pool, files, watcher = bar_on_a_pool
    load(pool, files["gemma"])
    qtbot.waitUntil(lambda: bar.state.model is not None, timeout=5_000)
    index = {bar.picker.itemData(i).name: i for i in range(bar.picker.count())}
    bar.picker.setCurrentIndex(index["gemma"])
    qtbot.waitUntil(bar.picked_is_loaded, timeout=5_000)
    bar.picker.setCurrentIndex(index["smol"])  # picked, not loaded yet
    seen = []
    watcher.changed.connect(seen.append)
    load(pool, files["gemma"])  # the same model again (its states repeat): the pick stays
    qtbot.waitUntil(lambda: any(s.status == "ready" for s in seen), timeout=5_000)
    assert picked_name(bar) == "smol" and bar.load_button.text() == "Load"
