"""A chat reply with tools is written down turn by turn: the model's call turn, each result, its answer, each
committed before the model reads it; read back, the thread is what the model was given."""

from __future__ import annotations

import threading

from app.core.chat.context import history_for_request
from app.core.chat.operations import ChatOperations
from app.core.chat.tool_loop import ToolLoop
from app.core.chat.tool_turns import SavedTurns
from app.core.engines.base import SamplingParams
from tests.core.chat.tool_fixtures import call, scripted


def test_each_turn_is_saved_as_it_ends_and_the_thread_reads_back_as_the_model_saw_it(store, servers, make_host):
    chats = ChatOperations(store)
    try:
        saved = chats.send(None, "What is 2 + 40?", title="sums").result(10)
        rows: list[tuple[str, int]] = []
        sink = SavedTurns(chats, saved.conversation_id, saved.reply_id, on_row=lambda r, i: rows.append((r, i)))
        loop = ToolLoop(make_host(scripted(call("add", a=2, b=40), "It is 42.")), servers, lambda c: "once")
        thread = store.active_path(saved.conversation_id)
        run = loop.run(history_for_request("", thread[:-1]), SamplingParams(temperature=0), ["tools"], sink=sink)
        chats.flush()
        path = store.active_path(saved.conversation_id)
        assert [(m.role, m.status) for m in path] == [
            ("user", "done"),
            ("assistant", "done"),
            ("tool", "done"),
            ("assistant", "done"),
        ]
        assert path[1].id == saved.reply_id and path[1].finish_reason == "tool_calls"
        assert path[1].tool_calls[0]["server"] == "tools" and path[1].tool_calls[0]["arguments"] == {"a": 2, "b": 40}
        assert (path[2].content, path[2].tool_call_id) == ("42", path[1].tool_calls[0]["id"])
        assert path[3].content == "It is 42." and [r for r, _ in rows] == ["tool", "assistant"]
        again = history_for_request("", path)
        assert [(m.role, m.content, m.tool_call_id) for m in again] == [
            (m.role, m.content, m.tool_call_id) for m in run.messages
        ]
        assert again[1].tool_calls == run.messages[1].tool_calls
    finally:
        chats.close()


def test_a_stopped_tool_leaves_a_stopped_reply_and_the_tools_error(store, servers, make_host):
    chats = ChatOperations(store)
    try:
        saved = chats.send(None, "Wait for it", title="wait").result(10)
        cancel = threading.Event()
        sink = SavedTurns(chats, saved.conversation_id, saved.reply_id, cancel=cancel)
        loop = ToolLoop(make_host(scripted(call("hang", seconds=30), "never")), servers, lambda c: "once")
        threading.Timer(2.0, cancel.set).start()
        thread = store.active_path(saved.conversation_id)
        loop.run(history_for_request("", thread[:-1]), SamplingParams(), ["tools"], sink=sink, cancel=cancel)
        chats.flush()
        path = store.active_path(saved.conversation_id)
        assert [m.role for m in path] == ["user", "assistant", "tool"]
        assert path[2].status == "error" and path[2].error == "stopped by the user"
    finally:
        chats.close()
