"""A chat reply with tools is written down turn by turn: the model's call turn, each result, its answer, each
committed before the model reads it; read back, the thread is what the model was given."""

from __future__ import annotations

import threading

from app.core.chat.context import history_for_request
from app.core.chat.operations import ChatOperations
from app.core.chat.tool_loop import ToolLoop
from app.core.chat.tool_turns import SavedTurns
from app.core.engines.base import SamplingParams
from tests.core.chat.tool_fixtures import call, scripted, stop_soon


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
        loop = ToolLoop(make_host(scripted(call("hang", seconds=30), "never")), servers, stop_soon(cancel))
        thread = store.active_path(saved.conversation_id)
        loop.run(history_for_request("", thread[:-1]), SamplingParams(), ["tools"], sink=sink, cancel=cancel)
        chats.flush()
        path = store.active_path(saved.conversation_id)
        assert [m.role for m in path] == ["user", "assistant", "tool"]
        assert path[2].status == "error" and path[2].error == "stopped by the user"
    finally:
        chats.close()


def test_smollm2_forced_to_call_a_tool_ends_in_a_stored_call_and_result(store, tmp_path, smollm2_gguf):
    import json
    import sys

    from app.core.engines import default_registry
    from app.core.engines.base import LoadSpec
    from app.core.mcp.config import parse_config, save_config
    from app.core.mcp.secrets import SecretStore
    from app.core.mcp.servers import McpServers
    from app.core.runtime.engine_host import EngineHost
    from tests.core.chat.tool_fixtures import SERVER
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    only_add = {"command": sys.executable, "args": [SERVER], "env": {"MCP_TEST_ONLY": "add"}}
    save_config(tmp_path / "mcp.json", parse_config(json.dumps({"mcpServers": {"tools": only_add}}), "t"))
    servers = McpServers(tmp_path, SecretStore(tmp_path / "s.json"))
    host = EngineHost(default_registry(), name="test-smol-tools")
    chats = ChatOperations(store)
    try:
        host.load_sync(LoadSpec(path=smollm2_gguf, n_ctx=2048), "gguf")
        saved = chats.send(None, "Add 2 and 3 with the add tool.", title="add").result(10)
        sink = SavedTurns(chats, saved.conversation_id, saved.reply_id)
        loop = ToolLoop(host, servers, lambda c: "once", max_steps=2, source="test")
        history = history_for_request("", store.active_path(saved.conversation_id)[:-1])
        greedy = SamplingParams(temperature=0, max_tokens=48)
        loop.run(history, greedy, ["tools"], tool_choice="required", sink=sink)
        chats.flush()
        path = store.active_path(saved.conversation_id)
        assert [m.role for m in path[:3]] == ["user", "assistant", "tool"]
        stored = path[1].tool_calls[0]  # the grammar made the first turn a call
        assert (stored["server"], stored["tool"]) == ("tools", "add") and path[2].tool_call_id == stored["id"]
        assert path[2].content  # its result (or why the arguments were refused), as the model read it
        assert path[-1].role == "assistant" and path[-1].status == "done"
    finally:
        chats.close()
        host.shutdown(10)
        servers.close()
