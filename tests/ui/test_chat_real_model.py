"""The Chat page with the real SmolLM2 (llama.cpp) behind an EngineHost: a greedy factual answer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from app.core.chat.store import ChatStore
from app.core.engines.base import LoadSpec, SamplingParams
from app.core.runtime.host import EngineHost
from app.core.runtime.preflight import PreflightResult
from app.ui.chat import ChatPage
from app.ui.tasks import TaskRunner

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a helpful assistant."


@pytest.fixture(scope="module")
def smollm2_host(smollm2_gguf):
    """SmolLM2 loaded once per module through a host (the fit check is the host tests' business)."""
    try:
        from app.core.native import import_native

        import_native("llama_cpp")
    except Exception as exc:  # a broken native build raises OSError, not ImportError
        pytest.skip(f"llama_cpp is not importable: {exc!r}")
    from app.core.engines.llamacpp_options import physical_cores
    from app.core.engines import default_registry

    host = EngineHost(default_registry(), preflight=lambda spec, fmt, check: PreflightResult(),
                      name="test-chat-real-host")
    host.load_sync(LoadSpec(path=smollm2_gguf, n_ctx=2048, n_threads=physical_cores()), "gguf")
    yield host
    assert host.shutdown(30.0)


def test_smollm2_answers_paris_with_stats(smollm2_host, qtbot, tmp_path):
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    store = ChatStore(tmp_path / "chats.sqlite3")
    page = ChatPage(smollm2_host, store, None, tasks)
    qtbot.addWidget(page)
    try:
        qtbot.waitUntil(lambda: page.composer_reason == "", timeout=5000)
        page.new_conversation()
        conv = store.update_settings(page.conv_id, system_prompt=SYSTEM_PROMPT,
                                     sampling=SamplingParams(temperature=0.0, max_tokens=40))
        page.settings.set_conversation(conv)
        with qtbot.waitSignal(page.reply_finished, timeout=120_000) as got:
            assert page.send("What is the capital of France?")
        msg_id, result = got.args
        assert result.status == "done", result.error
        assert "Paris" in result.text
        row = page.messages.rows[-1]
        html = page.messages.rendered(row).html
        assert "tok/s" in html and "TTFT" in html and "tokens" in html
        page.writer.flush()
        assert store.get_message(msg_id).content == result.text
    finally:
        page.shutdown()
        store.close()
        tasks.close()
        pool.shutdown(wait=True)
