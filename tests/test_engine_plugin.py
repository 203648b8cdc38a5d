"""A new kind of engine arrives as one module: the toy kind in tests/fixtures/toy_engine.py is named in
HEARTH_ENGINE_PLUGINS and nothing else changes. The app's own composition (Services, the CLI) picks it up,
and a toy model answers through the pool, the three API dialects, `hearth run` and the Chat page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.core.engines import PLUGINS_ENV, default_registry
from app.core.engines.base import GenerateRequest, LoadSpec
from app.core.engines.errors import EngineError
from app.core.library.store import ModelFile
from app.core.paths import app_paths
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import format_for_path
from app.core.services import Services
from app.core.settings import Settings
from tests.fixtures.toy_engine import toy_reply

PLUGIN = "tests.fixtures.toy_engine"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def toy_model(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(PLUGINS_ENV, PLUGIN)
    path = tmp_path / "parrot.toy"
    path.write_text("Polly")
    return path


def expected(words: str) -> str:
    return toy_reply("Polly", GenerateRequest(prompt=words))


def test_a_plug_in_kind_is_registered_beside_the_built_ins_and_claims_its_files(toy_model):
    registry = default_registry()
    assert registry.formats() == ["gguf", "mlx", "toy"]
    assert registry.kind("toy").name == "Toy"
    with pytest.raises(EngineError, match="Toy does not run embedding models"):
        registry.kind("toy", "embedding")
    assert format_for_path(toy_model) == "toy"


def test_a_plug_in_that_fails_to_import_is_skipped_and_the_built_ins_still_run(monkeypatch, caplog):
    monkeypatch.setenv(PLUGINS_ENV, "tests.fixtures.no_such_plugin, " + PLUGIN)
    registry = default_registry()
    assert registry.formats() == ["gguf", "mlx", "toy"]
    assert "engine plug-in tests.fixtures.no_such_plugin failed to register" in caplog.text


def test_a_toy_model_answers_through_the_pool_and_every_api_dialect(toy_model):
    from app.server.app import create_app
    from app.server.context import ServerContext
    from app.server.runner import ServerThread

    services = Services.open(app_paths(), Settings(), env={})
    services.library.add(name="parrot", format="toy", path=toy_model, files=[ModelFile(toy_model, 5)])
    context = ServerContext(services.pool, services.library, services.resolver)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    try:
        with httpx.Client(base_url=runner.url, timeout=30) as client:
            listed = client.get("/v1/models").json()["data"]
            assert "parrot" in [m["id"] for m in listed]
            said = [{"role": "user", "content": "one two three"}]
            openai = client.post("/v1/chat/completions", json={"model": "parrot", "messages": said})
            assert openai.json()["choices"][0]["message"]["content"] == expected("one two three"), openai.text
            anthropic = client.post("/v1/messages", json={"model": "parrot", "max_tokens": 50, "messages": said})
            assert anthropic.json()["content"][0]["text"] == expected("one two three"), anthropic.text
            ollama = client.post("/api/chat", json={"model": "parrot", "messages": said, "stream": False})
            assert ollama.json()["message"]["content"] == expected("one two three"), ollama.text
            # The pool loaded it once, by the library's format, on a host of its own.
            assert [(r.key, r.state.model.format) for r in services.pool.residents()] == [(str(toy_model), "toy")]
    finally:
        runner.stop(5)
        services.close()


def test_hearth_run_answers_with_a_toy_model_by_path_and_by_library_name(toy_model, hearth_home):
    library = Services.open(app_paths(), Settings(), env={}).library
    library.add(name="parrot", format="toy", path=toy_model, files=[ModelFile(toy_model, 5)])
    library.close()
    for model in (str(toy_model), "parrot"):
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "run", model, "red green blue"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected("red green blue")


def test_the_chat_page_shows_and_saves_a_toy_models_reply(qtbot, toy_model, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from app.core.chat.store import ChatStore
    from app.ui.chat import ChatPage
    from app.ui.tasks import TaskRunner
    from tests.ui.chat_harness import send_and_wait

    host = EngineHost(default_registry(), name="toy-chat-host")
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    store = ChatStore(tmp_path / "chats.sqlite3")
    page = ChatPage(host, store, None, tasks)
    qtbot.addWidget(page)
    try:
        host.load_sync(LoadSpec(path=toy_model, n_ctx=512), format_for_path(toy_model))
        qtbot.waitUntil(lambda: page.replies.reason == "", timeout=5000)
        send_and_wait(qtbot, page, "sun moon stars")
        rows = page.thread_view.messages.rows
        assert rows[-1].message.role == "assistant" and rows[-1].text == expected("sun moon stars")
        qtbot.waitUntil(lambda: [m.role for m in store.active_path(page.conv_id)] == ["user", "assistant"])
        assert store.active_path(page.conv_id)[-1].content == expected("sun moon stars")
    finally:
        page.shutdown()
        tasks.close()
        store.close()
        assert host.shutdown(5.0)
        pool.shutdown(wait=True)
