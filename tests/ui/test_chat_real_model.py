"""The Chat page with the real SmolLM2 (llama.cpp) behind an EngineHost: a greedy answer with stats,
Stop mid-stream, Regenerate, Edit and resend, and switching chats while a reply streams."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from PySide6.QtCore import Qt

from app.core.chat.store import ChatStore
from app.core.engines.base import LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from app.ui.chat import ChatPage
from app.ui.tasks import TaskRunner
from tests.ui.chat_harness import new_chat, reply_words, switch_branch

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a helpful assistant who answers in English."


@pytest.fixture(scope="module")
def smollm2_host(smollm2_gguf):
    """SmolLM2 loaded once per module through a host (the fit check is the host tests' business)."""
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.engines.llamacpp.options import default_threads

    host = EngineHost(
        default_registry(), preflight=lambda spec, fmt, check: PreflightResult(), name="test-chat-real-host"
    )
    host.load_sync(LoadSpec(path=smollm2_gguf, n_ctx=2048, n_threads=default_threads()), "gguf")
    yield host
    assert host.shutdown(30.0)


@pytest.fixture
def page(smollm2_host, qtbot, tmp_path):
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    store = ChatStore(tmp_path / "chats.sqlite3")
    page = ChatPage(smollm2_host, store, None, tasks)
    qtbot.addWidget(page)
    page.resize(1000, 700)
    page.show()  # shortcuts (Esc stops) need a shown window
    qtbot.waitUntil(lambda: page.replies.reason == "", timeout=5000)
    yield page
    page.shutdown()
    store.close()
    tasks.close()
    pool.shutdown(wait=True)


def greedy_chat(qtbot, page: ChatPage, max_tokens: int) -> int:
    new_chat(qtbot, page)
    conv = page.store.update_settings(
        page.conv_id, system_prompt=SYSTEM_PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens)
    )
    page.settings.set_conversation(conv)
    return conv.id


def send_and_wait(qtbot, page: ChatPage, text: str):
    with qtbot.waitSignal(page.reply_finished, timeout=120_000) as got:
        assert page.replies.send(text)
    return got.args


def test_smollm2_answers_paris_with_stats(page, qtbot):
    greedy_chat(qtbot, page, 40)
    msg_id, result = send_and_wait(qtbot, page, "What is the capital of France?")
    assert result.status == "done", result.error
    assert "Paris" in result.text
    row = page.thread_view.messages.rows[-1]
    html = page.thread_view.messages.rendered(row).html
    assert "tok/s" in html and "TTFT" in html and "tokens" in html
    assert result.stats.generated_tokens > 0 and result.stats.decode_tok_s > 0
    page.chats.flush()
    assert page.store.get_message(msg_id).content == result.text


def test_smollm2_stop_mid_stream_keeps_the_partial_reply(page, qtbot):
    greedy_chat(qtbot, page, 400)
    assert page.replies.send("Count from 1 to 300, writing each number as a word.")
    qtbot.waitUntil(lambda: reply_words(page) >= 8, timeout=120_000)
    with qtbot.waitSignal(page.reply_finished, timeout=30_000) as got:
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Escape)
    msg_id, result = got.args
    assert result.status == "stopped" and len(result.text.split()) >= 8, result
    assert result.stats is None or result.stats.generated_tokens < 400
    page.chats.flush()
    saved = page.store.get_message(msg_id)
    assert saved.status == "stopped" and saved.content == result.text


def test_smollm2_regenerate_is_a_sibling_and_greedy_repeats_itself(page, qtbot):
    greedy_chat(qtbot, page, 24)
    first_id, first = send_and_wait(qtbot, page, "Name three colours.")
    with qtbot.waitSignal(page.reply_finished, timeout=120_000) as got:
        assert page.replies.regenerate()
    second_id, second = got.args
    assert second.status == "done" and second_id != first_id
    # Same prompt, greedy: the same words (the cached prompt was reused, not corrupted).
    assert second.text == first.text
    page.chats.flush()
    assert [m.id for m in page.store.branches(second_id)] == [first_id, second_id]


def test_smollm2_edit_and_resend_answers_the_new_question(page, qtbot):
    greedy_chat(qtbot, page, 30)
    _, paris = send_and_wait(qtbot, page, "What is the capital of France?")
    user_id = page.thread_view.messages.rows[0].id
    page.thread_view.begin_edit(user_id)
    page.composer.set_text("What is the capital of Italy?")
    with qtbot.waitSignal(page.reply_finished, timeout=120_000) as got:
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return)
    _, rome = got.args
    assert rome.status == "done" and "Rom" in rome.text  # "Rome" or, from this small model, "Roma"
    rows = page.thread_view.messages.rows
    assert rows[0].text == "What is the capital of Italy?" and rows[0].branch == (2, 2)
    switch_branch(qtbot, page, page.thread_view.messages.rows[0].id, -1)
    assert page.thread_view.messages.rows[-1].text == paris.text and "Paris" in paris.text


def test_smollm2_switching_chats_while_a_reply_streams(page, qtbot):
    first = greedy_chat(qtbot, page, 60)
    assert page.replies.send("Describe the sea in a few sentences.")
    qtbot.waitUntil(lambda: reply_words(page) >= 3, timeout=120_000)
    with qtbot.waitSignal(page.reply_finished, timeout=120_000) as got:
        second = new_chat(qtbot, page)
        assert page.thread_view.messages.rows == [] and page.replies.reason.startswith("Replying")
    msg_id, result = got.args
    assert result.status == "done" and page.conv_id == second and page.thread_view.messages.rows == []
    page.chats.flush()
    assert page.store.get_message(msg_id).content == result.text
    page.open_conversation(first)
    last = page.thread_view.messages.rows[-1]
    assert last.text == result.text and last.status == "done"
