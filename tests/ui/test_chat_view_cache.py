"""What keeps the chat smooth: caches that survive a reload of the thread, painting only the
lines on screen, one layout when a reply finishes, and a token estimate that is cheap to repeat."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

from PySide6.QtCore import Qt

from app.core.chat.models import Message
from app.core.chat.operations import ChatOperations
from app.core.chat.reply_stream import ReplyRow, StreamedReply
from app.core.chat.store import ChatStore
from app.core.engines.base import Chunk, GenerationStats
from app.core.runtime.jobs import ChunkEvent, JobDone
from app.ui.chat.header import tokens_in_use
from app.ui.chat.message_view import MessageView, SafeDocument
from app.ui.chat.messages_model import MessagesModel
from app.ui.chat.stream import StreamBridge
from tests.ui.chat_harness import limit_tokens, send_and_wait

THINK = "<think>step one, step two</think>The answer is **42**."


def streamed(msg: int, conv_id: int, writer: ChatOperations) -> tuple[StreamBridge, StreamedReply]:
    """A reply shown by hand: `reply.sink` takes host events (and saves), `bridge.drain` shows them."""
    bridge = StreamBridge(msg, conv_id, flush_ms=60_000)  # drained by hand
    reply = StreamedReply(bridge.on_text, bridge.on_finished, ReplyRow(writer, conv_id, msg))
    return bridge, reply


def messages(now: float) -> list[Message]:
    return [
        Message(1, 1, None, "user", "question", "done", now, now),
        Message(2, 1, 1, "assistant", THINK, "done", now, now, stats={"generated_tokens": 7}, finish_reason="stop"),
    ]


def shown(qtbot, model: MessagesModel) -> MessageView:
    view = MessageView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.resize(600, 400)
    view.show()
    view.grab()
    return view


def test_reloading_the_same_thread_renders_and_lays_out_nothing_again(qtbot):
    now = time.time()
    model = MessagesModel()
    model.set_messages(messages(now))
    view = shown(qtbot, model)
    renders = model.renders
    docs = [view.delegate.document(r, model) for r in model.rows]
    assert renders == 2
    model.set_messages(messages(now))  # what a send does: the thread is read again from the DB
    view.grab()
    assert model.renders == renders
    assert [view.delegate.document(r, model) for r in model.rows] == docs
    # A change that shows (new stats) renders that row again, and only that row.
    changed = messages(now)
    changed[1] = replace(changed[1], stats={"generated_tokens": 8})
    model.set_messages(changed)
    view.grab()
    assert model.renders == renders + 1 and "8 tokens" in model.rendered(model.rows[1]).html


def test_an_opened_reasoning_block_stays_open_after_a_reload(qtbot):
    now = time.time()
    model = MessagesModel()
    model.set_messages(messages(now))
    assert "step one" not in model.rendered(model.rows[1]).html
    model.toggle_reasoning(2)
    assert "step one" in model.rendered(model.rows[1]).html
    model.set_messages(messages(now))
    assert model.rows[1].expanded and "step one" in model.rendered(model.rows[1]).html
    model.toggle_reasoning(2)
    model.set_messages(messages(now))
    assert "step one" not in model.rendered(model.rows[1]).html


def test_a_tall_reply_is_painted_only_where_it_is_on_screen(qtbot, monkeypatch):
    now = time.time()
    long_text = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(300))
    model = MessagesModel()
    model.set_messages([Message(1, 1, None, "assistant", long_text, "done", now, now)])
    view = shown(qtbot, model)
    clips = []
    draw = SafeDocument.drawContents

    def spy(self, painter, rect):
        clips.append(rect)
        return draw(self, painter, rect)

    monkeypatch.setattr(SafeDocument, "drawContents", spy)
    view.scrollToBottom()
    view.grab()
    doc = view.delegate.document(model.rows[0], model)
    assert doc.size().height() > 20 * view.viewport().height()
    assert clips and all(r.height() <= view.viewport().height() for r in clips)
    assert clips[-1].top() > doc.size().height() / 2  # the end of the reply, not its start


def test_the_last_chunk_and_the_finish_in_one_drain_lay_the_reply_out_once(qtbot, tmp_path):
    store = ChatStore(tmp_path / "c.sqlite3")
    conv = store.create_conversation("t")
    user = store.add_user_message(conv.id, "hi")
    msg = store.begin_assistant(conv.id, user)
    writer = ChatOperations(store)
    bridge, reply = streamed(msg, conv.id, writer)
    updates, finished = [], []
    bridge.updated.connect(lambda *a: updates.append(a))
    bridge.finished.connect(lambda *a: finished.append(a))
    try:
        reply.sink(ChunkEvent(Chunk(text="Hello")))
        bridge.drain()
        assert updates == [(msg, "Hello")]
        reply.sink(ChunkEvent(Chunk(text=" world")))
        stats = GenerationStats(prompt_tokens=3, generated_tokens=2)
        reply.sink(ChunkEvent(Chunk(finish_reason="stop", stats=stats)))
        reply.sink(JobDone(None))
        bridge.drain()
        assert len(updates) == 1, "the finish shows the final text; no extra update to lay out first"
        assert finished[0][1].text == "Hello world" and finished[0][1].status == "done"
        writer.flush()
        assert store.get_message(msg).content == "Hello world"
    finally:
        writer.close()
        store.close()


def test_size_hints_live_in_the_items_and_follow_text_width_and_inserts(qtbot, monkeypatch):
    now = time.time()
    model = MessagesModel()
    model.set_messages(messages(now))
    view = shown(qtbot, model)
    calls = []
    size_for = view.delegate.size_for
    model.sizer = lambda row, exact: calls.append(row.id) or size_for(row, exact)

    def height(row: int) -> int:
        return model.index(row, 0).data(Qt.ItemDataRole.SizeHintRole).height()

    short = height(1)
    view.doItemsLayout()
    view.grab()
    assert calls == [], "a relayout asks Python for no sizes: the items hold them"
    model.update_text(2, THINK + "\n\n" + "\n\n".join(f"paragraph {i} " + "word " * 30 for i in range(20)))
    assert calls == [2]  # only the changed row is measured again
    taller = height(1)
    assert taller > short + 200
    view.resize(300, 400)
    qtbot.waitUntil(lambda: height(1) > taller, timeout=2000)  # narrower: more wrapped lines
    model.append(Message(3, 1, 2, "user", "next", "done", now, now))
    assert 0 < height(2) < taller and height(1) > taller


def test_sending_in_an_open_chat_appends_rows_without_resetting_the_view(make_chat, qtbot):
    _h, page = make_chat()
    limit_tokens(page, 5)
    send_and_wait(qtbot, page, "first")
    resets = []
    page.thread_view.messages.modelReset.connect(lambda: resets.append(1))
    msg_id, _result = send_and_wait(qtbot, page, "second")
    assert resets == []
    page.chats.flush()
    shown_rows = [(r.id, r.message.role, r.text, r.status) for r in page.thread_view.messages.rows]
    saved = [(m.id, m.role, m.content, m.status) for m in page.store.active_path(page.conv_id)]
    assert shown_rows == saved and shown_rows[-1][0] == msg_id and shown_rows[-2][2] == "second"


def test_context_meter_counts_from_the_newest_measured_reply_and_estimates_the_rest(qtbot):
    now = time.time()
    model = MessagesModel()
    measured = Message(
        2, 1, 1, "assistant", "an answer", "done", now, now, stats={"prompt_tokens": 100, "generated_tokens": 20}
    )
    model.set_messages([Message(1, 1, None, "user", "question", "done", now, now), measured])
    assert tokens_in_use(model.rows, "Be brief.") == (120, "")
    follow_up = Message(3, 1, 2, "user", "x" * 300, "done", now, now)
    model.append(follow_up)
    assert tokens_in_use(model.rows, "Be brief.") == (120 + 100 + 6, "~")
    # A reply streamed into the view counts with its shown text, not the empty text it was created with.
    model.append(Message(4, 1, 3, "assistant", "", "streaming", now, now))
    model.finish(4, "done", "y" * 300, None, "stop", None)
    assert tokens_in_use(model.rows, "Be brief.") == (120 + 100 + 6 + 100 + 6, "~")


def test_partial_saves_come_every_64_tokens_but_not_closer_than_a_quarter_second(qtbot, tmp_path):
    from app.core.chat.reply_stream import MIN_SAVE_GAP_S

    store = ChatStore(tmp_path / "c.sqlite3")
    conv = store.create_conversation("t")
    msg = store.begin_assistant(conv.id, store.add_user_message(conv.id, "hi"))
    saves: list[tuple[float, str]] = []

    class Spy:  # the writer's store, counting partial saves
        def update_streaming(self, msg_id, text):
            saves.append((time.monotonic(), text))
            return store.update_streaming(msg_id, text)

    writer = ChatOperations(store)
    writer.store = Spy()
    _bridge, reply = streamed(msg, conv.id, writer)
    try:
        t0 = time.monotonic()
        words = 0
        while time.monotonic() - t0 < 0.6 or words < 1000:  # thousands of tok/s for 0.6 s
            reply.sink(ChunkEvent(Chunk(text="w ")))
            words += 1
            time.sleep(0.0003)
        elapsed = time.monotonic() - t0
        writer.flush()
        assert 2 <= len(saves) <= elapsed / MIN_SAVE_GAP_S + 1
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(saves)]
        assert all(g >= MIN_SAVE_GAP_S - 0.01 for g in gaps)
        assert store.get_message(msg).content == saves[-1][1] and saves[-1][1].startswith("w w")
        # At a model's usual pace, each 64 tokens are saved as they come (gap rule met already).
        time.sleep(MIN_SAVE_GAP_S)
        before = len(saves)
        for _ in range(64):
            reply.sink(ChunkEvent(Chunk(text="x ")))
        writer.flush()
        assert len(saves) == before + 1
    finally:
        writer.close()
        store.close()
