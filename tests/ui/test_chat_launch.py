"""Chat from My Models: the model is loaded with the planner's defaults, not the bar's safe ones."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from app.core.chat.store import ChatStore
from app.core.library import Library, ModelFile
from app.core.models.devices import Device, GiB, Machine
from app.core.runtime.engine_host import EngineHost
from app.ui.chat import ChatPage
from app.ui.chat.model_bar_defaults import FALLBACK_CTX, plan_defaults
from app.ui.chat_launch import ChatLauncher
from app.ui.tasks import TaskRunner
from tests.fixtures.fake_engine import registry_with_fake
from tests.ui.chat_harness import no_preflight

ROOMY = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))


@pytest.fixture
def chat(qtbot, tmp_path):
    (tmp_path / "models").mkdir()
    library = Library(tmp_path / "models", tmp_path / "library.db")
    store = ChatStore(tmp_path / "chats.sqlite3")
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-chat-launch")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    page = ChatPage(host, store, library, tasks, machine_source=lambda: ROOMY)
    qtbot.addWidget(page)
    yield page, library, tasks
    page.shutdown()
    tasks.close()
    store.close()
    assert host.shutdown(5.0)
    pool.shutdown(wait=True)
    library.close()


def test_the_model_is_loaded_with_the_planners_defaults(qtbot, chat, tiny_gguf_f16, monkeypatch):
    page, library, tasks = chat
    model = library.add(
        name="tiny", format="gguf", path=tiny_gguf_f16, files=[ModelFile(tiny_gguf_f16, tiny_gguf_f16.stat().st_size)]
    )
    planned = plan_defaults(tiny_gguf_f16, "gguf", lambda: ROOMY)
    assert planned.n_ctx != FALLBACK_CTX  # else this test could not tell the plan from the safe defaults
    bar = page.model_bar
    loads = []
    monkeypatch.setattr(
        bar, "load_selected", lambda: loads.append((bar.advanced.n_ctx.value(), bar.picker.currentData().id))
    )
    shown = []
    launcher = ChatLauncher(page, tasks, lambda: shown.append(True))
    assert launcher.chat_with(model)
    assert shown == [True] and bar.picker.currentData().id == model.id
    qtbot.waitUntil(lambda: loads != [], timeout=10_000)
    assert loads == [(planned.n_ctx, model.id)]
    assert launcher.waiting_for == tiny_gguf_f16


@pytest.mark.parametrize(("serving", "slots"), [(True, 3), (False, 1)])
def test_the_load_carries_the_parallel_setting_only_while_the_server_serves(
    qtbot, tmp_path, tiny_gguf_f16, monkeypatch, serving, slots
):
    """One person chatting gets one slot (each slot holds a whole context of KV); while the API server
    serves, its clients share the model, so the load plans for Settings → Parallel requests."""
    (tmp_path / "models").mkdir()
    library = Library(tmp_path / "models", tmp_path / "library.db")
    store = ChatStore(tmp_path / "chats.sqlite3")
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-chat-slots")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    page = ChatPage(
        host, store, library, tasks, machine_source=lambda: ROOMY, parallel=lambda: 3, serving=lambda: serving
    )
    qtbot.addWidget(page)
    try:
        model = library.add(
            name="tiny",
            format="gguf",
            path=tiny_gguf_f16,
            files=[ModelFile(tiny_gguf_f16, tiny_gguf_f16.stat().st_size)],
        )
        bar = page.model_bar
        specs = []
        monkeypatch.setattr(bar, "load_spec", lambda spec, fmt, name=None: specs.append(spec) or True)
        launcher = ChatLauncher(page, tasks, lambda: None)
        assert launcher.chat_with(model)
        qtbot.waitUntil(lambda: specs != [], timeout=10_000)
        # Parallel requests 3 on a roomy machine: three slots while serving, each with the whole context.
        assert (specs[0].slots, specs[0].kv_unified) == (slots, False)
        assert specs[0].n_ctx == plan_defaults(tiny_gguf_f16, "gguf", lambda: ROOMY, 3).n_ctx
        assert bar.advanced.slots.value() == slots
    finally:
        page.shutdown()
        tasks.close()
        store.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
        library.close()


def test_the_next_load_plans_again_when_the_server_started_meanwhile(qtbot, chat, tiny_gguf_f16):
    page, library, _tasks = chat
    serving = {"now": False}
    bar = page.model_bar
    bar.serving, bar.parallel = (lambda: serving["now"]), (lambda: 3)
    library.add(
        name="tiny", format="gguf", path=tiny_gguf_f16, files=[ModelFile(tiny_gguf_f16, tiny_gguf_f16.stat().st_size)]
    )
    bar.refresh_models()
    qtbot.waitUntil(lambda: bar.defaults.spec is not None, timeout=10_000)
    assert bar.advanced.slots.value() == 1
    serving["now"] = True  # started on the Server page; the user comes back to Chat
    page.hide()
    page.show()
    qtbot.waitUntil(lambda: bar.advanced.slots.value() == 3, timeout=10_000)
