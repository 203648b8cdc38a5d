"""The Chat page against a FakeEngine host (thousands of tok/s): streaming, stop, regenerate, edit,
switching chats mid-stream, persistence across restarts, the context policy and a 1,000-message chat."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.core.chat.models import ChatStoreError, Conversation, Message
from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.runtime.jobs import GenerateJob
from tests.ui.chat_harness import limit_tokens, new_chat, reply_words, send_and_wait, switch_branch


def test_send_streams_coalesced_chunks_and_shows_stats(make_chat, qtbot):
    h, page = make_chat(tok_s=3000)
    limit_tokens(page, 400)
    committed: list[bool] = []
    submit = h.host.submit

    def spy(job, sink=None):
        if isinstance(job, GenerateJob):  # the user turn must already be in the DB
            committed.append(
                any(m.role == "user" and m.content == "Tell me a tale" for m in page.store.active_path(page.conv_id))
            )
        return submit(job, sink)

    h.host.submit = spy
    updates: list[str] = []
    page.thread_view.messages.dataChanged.connect(lambda *_: updates.append("x"))
    msg_id, result = send_and_wait(qtbot, page, "Tell me a tale")
    assert committed == [True]
    assert result.status == "done" and result.finish_reason == "length"
    assert len(result.text.split()) == 400
    bridge_chunks = result.stats.generated_tokens
    assert bridge_chunks == 400
    assert 1 <= len(updates) < 100, "the view must be updated in batches, not per token"
    row = page.thread_view.messages.rows[-1]
    assert row.id == msg_id and row.status == "done" and row.text == result.text
    html = page.thread_view.messages.rendered(row).html
    assert "tok/s" in html and "400 tokens" in html and "TTFT" in html and "finish: length" in html
    page.chats.flush()
    saved = page.store.get_message(msg_id)
    assert saved.status == "done" and saved.content == result.text
    assert saved.stats["generated_tokens"] == 400
    assert " / " in page.header.meter.label.text() and "tokens used" in page.header.meter.bar.toolTip()
    assert "tok/s" in page.model_bar.status.text()  # the last reply's speed, measured
    assert "Measured speed: " in page.model_bar.status.toolTip()
    assert page.conversations.list.count() == 1 and page.conversations.list.item(0).text() == "Tell me a tale"
    # Export offers the Documents folder and the chat's title, not "chat.md" wherever Hearth was started.
    offered = page.conversations.export_suggestion("md")
    assert offered.name == "Tell me a tale.md" and offered.parent != Path.cwd()


def test_stop_mid_stream_keeps_partial_text_marked_stopped(make_chat, qtbot):
    _h, page = make_chat(tok_s=300)
    assert page.replies.send("Talk for a long time")
    qtbot.waitUntil(lambda: reply_words(page) >= 20, timeout=5000)
    assert page.replies.reason.startswith("Replying")
    with qtbot.waitSignal(page.reply_finished, timeout=5000) as got:
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Escape)
    msg_id, result = got.args
    assert result.status == "stopped" and result.text
    row = page.thread_view.messages.rows[-1]
    assert row.status == "stopped" and "Stopped" in page.thread_view.messages.rendered(row).html
    page.chats.flush()
    saved = page.store.get_message(msg_id)
    assert saved.status == "stopped" and saved.content == result.text
    assert page.replies.reason == ""


def test_regenerate_makes_a_sibling_and_keeps_the_old_reply(make_chat, qtbot):
    h, page = make_chat()
    limit_tokens(page, 30)
    first_id, first = send_and_wait(qtbot, page, "Say something")
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    second_id, second = got.args
    assert second_id != first_id and second.status == "done"
    page.chats.flush()
    siblings = page.store.branches(second_id)
    assert [m.id for m in siblings] == [first_id, second_id]
    assert page.thread_view.messages.rows[-1].id == second_id and page.thread_view.messages.rows[-1].branch == (2, 2)
    assert "2/2" in page.thread_view.messages.rendered(page.thread_view.messages.rows[-1]).html
    # The engine saw the same history both times: system-less user turn only, no old reply.
    requests = h.engines[0].generations
    assert [m.content for m in requests[-1].messages] == ["Say something"]
    switch_branch(qtbot, page, second_id, -1)
    assert page.thread_view.messages.rows[-1].id == first_id and page.thread_view.messages.rows[-1].text == first.text


def test_edit_and_resend_keeps_the_old_branch(make_chat, qtbot):
    h, page = make_chat()
    limit_tokens(page, 20)
    send_and_wait(qtbot, page, "first question")
    user_id = page.thread_view.messages.rows[0].id
    page.thread_view.begin_edit(user_id)
    assert page.composer.text() == "first question" and "Editing" in page.composer.reason.text()
    page.composer.set_text("second question")
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return)
    rows = page.thread_view.messages.rows
    assert next(r.text for r in rows) == "second question" and rows[0].branch == (2, 2)
    assert h.engines[0].generations[-1].messages[-1].content == "second question"
    switch_branch(qtbot, page, rows[0].id, -1)
    rows = page.thread_view.messages.rows
    assert rows[0].text == "first question" and rows[0].branch == (1, 2) and len(rows) == 2


def test_switching_conversations_while_streaming_keeps_the_stream_in_its_own_chat(make_chat, qtbot):
    _h, page = make_chat(tok_s=400)
    limit_tokens(page, 200)
    first_conv = page.conv_id
    assert page.replies.send("a long answer please")
    qtbot.waitUntil(lambda: reply_words(page) >= 5, timeout=5000)
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        second_conv = new_chat(qtbot, page)
        assert page.conv_id == second_conv and page.thread_view.messages.rows == []
        assert page.replies.reason.startswith("Replying")  # one reply at a time, wherever it is
    msg_id, result = got.args
    assert result.status == "done" and len(result.text.split()) == 200
    assert page.thread_view.messages.rows == [] and page.conv_id == second_conv
    page.chats.flush()
    assert page.store.get_message(msg_id).content == result.text
    page.open_conversation(first_conv)
    last = page.thread_view.messages.rows[-1]
    assert last.text == result.text and last.status == "done"


def test_restart_keeps_conversations_and_marks_interrupted_replies(make_chat, qtbot):
    h, page = make_chat()
    limit_tokens(page, 10)
    _, result = send_and_wait(qtbot, page, "remember me")
    conv_id = page.conv_id
    # A reply a crash left mid-stream: written as `streaming`, never finished.
    leftover = page.store.begin_assistant(conv_id, page.thread_view.messages.rows[0].id)
    page.store.update_streaming(leftover, "half a rep")
    h.close_page(page)
    page2 = h.open_page()
    assert page2.conv_id == conv_id and page2.conversations.list.item(0).text() == "remember me"
    rows = page2.thread_view.messages.rows
    assert rows[0].text == "remember me"
    assert rows[-1].id == leftover and rows[-1].status == "interrupted" and rows[-1].text == "half a rep"
    assert "Interrupted" in page2.thread_view.messages.rendered(rows[-1]).html
    assert page2.notice.isVisible() and "interrupted" in page2.notice.text()
    switch_branch(qtbot, page2, leftover, -1)
    assert page2.thread_view.messages.rows[-1].text == result.text


def test_composer_needs_a_model_and_enter_sends_shift_enter_newlines(make_chat, qtbot):
    h, page = make_chat(load=False)
    assert not page.composer.editor.isEnabled() and page.composer.reason.text() == "Load a model to chat"
    assert not page.replies.send("hello")
    h.load()
    assert page.composer.editor.isEnabled() and page.composer.reason.text() == ""
    limit_tokens(page, 5)
    qtbot.keyClicks(page.composer.editor, "line one")
    qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(page.composer.editor, "line two")
    assert page.composer.text() == "line one\nline two"
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_Return)
    assert page.thread_view.messages.rows[0].text == "line one\nline two" and page.composer.text() == ""


def test_api_request_shows_busy_and_chat_job_waits(make_chat, qtbot):
    h, page = make_chat(tok_s=200)
    limit_tokens(page, 5)
    api = h.host.submit(
        GenerateJob(
            request=GenerateRequest(
                messages=[ChatMessage(role="user", content="api")], sampling=SamplingParams(max_tokens=60)
            ),
            source="api",
        )
    )
    qtbot.waitUntil(lambda: "busy: API request" in page.model_bar.status.text(), timeout=5000)
    assert "busy: API request" in page.composer.reason.text()
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        assert page.replies.send("me too")
    assert api.done.is_set() and got.args[1].status == "done"
    assert "busy" not in page.model_bar.status.text()


def test_context_policy_drops_oldest_turns_with_a_notice_and_the_request_fits(make_chat, qtbot):
    h, page = make_chat(n_ctx=1024)
    conv = page.store.create_conversation(
        "long", system_prompt="You are terse.", sampling=SamplingParams(max_tokens=100)
    )
    words = " ".join(["lorem ipsum dolor sit amet"] * 12)  # 60 words a message
    for i in range(20):
        page.store.add_user_message(conv.id, f"question {i} {words}")
        reply = page.store.begin_assistant(conv.id, page.store.active_path(conv.id)[-1].id)
        page.store.finish_assistant(reply, f"answer {i} {words}")
    page.refresh_conversations()
    page.open_conversation(conv.id)
    assert "near the limit" in page.header.meter.label.text() or "full" in page.header.meter.label.text()
    _, result = send_and_wait(qtbot, page, "and now?")
    assert result.status == "done"
    assert page.notice.isVisible() and "left out of this request" in page.notice.text()
    assert page.replies.last_plan.dropped_messages > 0
    sent = h.engines[0].generations[-1]
    assert sent.messages[0].content == "You are terse." and sent.messages[-1].content == "and now?"
    assert h.engines[0].count_tokens(sent) + 100 <= 1024


def test_a_thousand_message_chat_with_code_opens_fast(make_chat, qtbot):
    _h, page = make_chat()
    now = time.time()
    code = "Here:\n\n```python\ndef f(x):\n    return [i * x for i in range(10)]\n```\n\nDone."
    msgs = [
        Message(
            id=i + 1,
            conversation_id=0,
            parent_id=i or None,
            role="user" if i % 2 == 0 else "assistant",
            content=(f"question {i}" if i % 2 == 0 else code),
            status="done",
            created_at=now,
            updated_at=now,
        )
        for i in range(1000)
    ]
    conv = Conversation(id=0, title="big", created_at=now, updated_at=now)
    cid = page.store.import_conversation(conv, msgs, 1000)
    page.refresh_conversations()
    t0 = time.perf_counter()
    page.open_conversation(cid)
    page.thread_view.view.scrollToBottom()
    page.thread_view.view.viewport().repaint()
    elapsed = time.perf_counter() - t0
    assert page.thread_view.messages.rowCount() == 1000
    assert elapsed < 3.0, f"opening took {elapsed:.2f} s"
    assert page.thread_view.messages.renders < 100, "only the rows on screen are rendered"
    assert page.thread_view.view.at_bottom()


def test_conversation_list_new_rename_delete_search(make_chat, qtbot):
    _h, page = make_chat()
    limit_tokens(page, 5)
    send_and_wait(qtbot, page, "kettle on the hearth")
    first = page.conv_id
    with qtbot.waitSignal(page.conversation_opened, timeout=5000):
        qtbot.keyClick(page.composer.editor, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    second = page.conv_id
    assert second != first and page.conversations.list.count() == 2
    page.edits.rename(second, "Planning")
    assert page.header.title.text() == "Planning"
    page.conversations.search.setText("kettle")
    qtbot.waitUntil(lambda: page.conversations.list.count() == 1, timeout=3000)
    assert page.conversations.list.item(0).data(Qt.ItemDataRole.UserRole) == first
    page.conversations.search.setText("plann")
    qtbot.waitUntil(
        lambda: (
            page.conversations.list.count() == 1
            and page.conversations.list.item(0).data(Qt.ItemDataRole.UserRole) == second
        ),
        timeout=3000,
    )
    page.conversations.search.clear()
    qtbot.waitUntil(lambda: page.conversations.list.count() == 2, timeout=3000)  # the search answered
    page.edits.delete(second)
    qtbot.waitUntil(
        lambda: page.conversations.list.count() == 1 and page.conv_id == first,
        timeout=3000,
    )
    assert page.conversations.list.item(0).data(Qt.ItemDataRole.UserRole) == first


def test_export_and_import_round_trip(make_chat, qtbot, tmp_path):
    _h, page = make_chat()
    limit_tokens(page, 8)
    _, result = send_and_wait(qtbot, page, "export me")
    page.chats.flush()
    with qtbot.waitSignal(page.files_done, timeout=5000):
        page.export_to(tmp_path / "c.json", "json")
    with qtbot.waitSignal(page.files_done, timeout=5000):
        page.export_to(tmp_path / "c.md", "md")
    assert "export me" in (tmp_path / "c.md").read_text() and json.loads((tmp_path / "c.json").read_text())
    old = page.conv_id
    with qtbot.waitSignal(page.files_done, timeout=5000):
        page.import_from(tmp_path / "c.json")
    assert page.conv_id != old and [r.text for r in page.thread_view.messages.rows] == ["export me", result.text]
    with qtbot.waitSignal(page.files_done, timeout=5000):
        (tmp_path / "bad.json").write_text("{not json")
        page.import_from(tmp_path / "bad.json")
    assert page.notice.property("level") == "error"


def test_message_actions_copy_delete_and_code_copy(make_chat, qtbot):
    _h, page = make_chat()
    limit_tokens(page, 5)
    send_and_wait(qtbot, page, "Show:\n\n```python\nprint('hi')\n```")
    user = page.thread_view.messages.rows[0]
    page.thread_view.messages.rendered(user)
    page.thread_view.activate(user.id, "copy:0")
    assert QGuiApplication.clipboard().text() == "print('hi')\n"
    page.thread_view.activate(user.id, "act:copy")
    assert QGuiApplication.clipboard().text().startswith("Show:")
    reply = page.thread_view.messages.rows[-1]
    with qtbot.waitSignal(page.thread_view.changed, timeout=5000):  # once the delete is committed
        page.thread_view.activate(reply.id, "act:delete")
    assert [r.id for r in page.thread_view.messages.rows] == [user.id]
    page.thread_view.activate(user.id, "http://example.com/x")  # a link in text is never opened, only copied
    assert QGuiApplication.clipboard().text() == "http://example.com/x"


def test_a_message_too_long_for_the_context_is_kept_and_explained(make_chat, qtbot):
    h, page = make_chat(n_ctx=512)
    limit_tokens(page, 50)
    assert not page.replies.send("lorem ipsum " * 2000)
    qtbot.waitUntil(lambda: page.notice.property("level") == "error", timeout=5000)
    assert page.replies.stream is None
    assert page.notice.isVisible() and page.notice.text()
    rows = page.thread_view.messages.rows
    assert len(rows) == 1 and rows[0].message.role == "user" and rows[0].text.startswith("lorem ipsum")
    assert page.replies.reason == "" and h.engines[0].generations == []


def test_an_opened_chat_ends_at_its_last_row_once_real_heights_replace_estimates(make_chat, qtbot):
    _h, page = make_chat()
    conv = page.store.create_conversation("tables")
    table = "| function | returns |\n|---|---|\n" + "".join(f"| `f{i}` | a value |\n" for i in range(12))
    parent = None
    for i in range(6):
        parent = page.store.add_user_message(conv.id, f"question {i}")
        reply = page.store.begin_assistant(conv.id, parent)
        page.store.finish_assistant(reply, f"Answer {i}:\n\n{table}\n```python\nx = {i}\n```")
    page.refresh_conversations()
    page.open_conversation(conv.id)
    page.show_notice("a notice that takes room from the view", "info")
    qtbot.wait(200)
    page.thread_view.view.grab()
    qtbot.wait(50)
    last = page.thread_view.messages.index(len(page.thread_view.messages.rows) - 1, 0)
    assert page.thread_view.view.at_bottom()
    assert page.thread_view.view.visualRect(last).bottom() <= page.thread_view.view.viewport().height()
    # Scrolled away by the user: new layouts leave the position alone.
    bar = page.thread_view.view.verticalScrollBar()
    bar.triggerAction(bar.SliderAction.SliderToMinimum)
    qtbot.wait(50)
    page.show_notice("")
    qtbot.wait(50)
    assert bar.value() == 0


def test_search_runs_on_the_pool_and_only_the_newest_answer_is_shown(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    apples = page.store.create_conversation("apples")
    bananas = page.store.create_conversation("bananas")
    threads, answered, real = [], [], page.store.search
    bananas_done = threading.Event()

    def slow(query, limit=50):
        threads.append(threading.current_thread())
        if query == "apples":
            bananas_done.wait(10)  # the older query answers last
        found = real(query, limit)
        answered.append(query)
        if query == "bananas":
            bananas_done.set()
        return found

    def shown() -> list[int]:
        lst = page.conversations.list
        return [lst.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lst.count())]

    monkeypatch.setattr(page.store, "search", slow)
    page.conversations.search.setText("apples")
    page.conversations.refresh(None)
    page.conversations.search.setText("bananas")
    page.conversations.refresh(None)
    qtbot.waitUntil(lambda: "apples" in answered and shown() == [bananas.id], timeout=10_000)
    qtbot.wait(100)  # the stale "apples" answer has been delivered by now, and dropped
    assert shown() == [bananas.id] and apples.id not in shown()
    assert threads and threading.main_thread() not in threads

    def broken(query, limit=50):
        raise ChatStoreError("The chat database could not be read.")

    monkeypatch.setattr(page.store, "search", broken)
    page.conversations.search.setText("cherries")
    qtbot.waitUntil(lambda: page.notice.property("level") == "error", timeout=3000)
    assert "Search failed" in page.notice.text()


def test_send_writes_on_the_writer_thread_and_never_waits_for_it(make_chat, qtbot, monkeypatch):
    _h, page = make_chat()
    limit_tokens(page, 5)
    threads = []
    for name in ("add_user_message", "begin_assistant", "rename_conversation"):
        real = getattr(page.store, name)

        def spy(*args, _real=real, _name=name):
            threads.append((_name, threading.current_thread()))
            return _real(*args)

        monkeypatch.setattr(page.store, name, spy)
    # The writer is stuck in a slow write (an fsync on a slow disk) until the test lets it go.
    release = threading.Event()
    page.chats.run(release.wait, 10)
    with qtbot.waitSignal(page.reply_finished, timeout=10_000) as got:
        assert page.replies.send("hello there")
        # send() returned while the writer was still stuck: it did not wait for the write.
        assert not release.is_set() and threads == []
        assert page.replies.reason.startswith("Replying") and not page.replies.send("again")  # one turn at a time
        release.set()
    assert got.args[1].status == "done"
    assert {n for n, _ in threads} == {"add_user_message", "begin_assistant", "rename_conversation"}
    assert all(t is not threading.main_thread() for _, t in threads)
    assert next(r.text for r in page.thread_view.messages.rows) == "hello there"


def test_a_failed_save_puts_the_text_back_and_says_why(make_chat, qtbot, monkeypatch):
    from app.core.chat.models import ChatStoreWriteError

    h, page = make_chat()

    def full(*args):
        raise ChatStoreWriteError("Could not save your message: the disk is full.")

    monkeypatch.setattr(page.store, "add_user_message", full)
    page.composer.set_text("keep me")
    assert page.replies.send()
    qtbot.waitUntil(lambda: page.notice.property("level") == "error", timeout=5000)
    assert "disk is full" in page.notice.text()
    assert page.composer.text() == "keep me" and page.replies.stream is None and page.replies.reason == ""
    assert h.engines[0].generations == []


def test_a_reply_of_one_token_says_token():
    from app.ui.chat.messages_model import stats_line

    assert "1 token ·" in stats_line({"generated_tokens": 1, "decode_tok_s": 5.0}, "stop") + " ·"
    assert "1 tokens" not in stats_line({"generated_tokens": 1}, "stop")
    assert "2,048 tokens" in stats_line({"generated_tokens": 2048}, "length")
