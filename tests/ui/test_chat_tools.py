"""MCP tools in the chat window: the Tools menu turns a server on for one conversation, a call waits in the
approval bar (its server's start command shown before its first start), Allow once / Always / Deny do what
they say, the call and its result show in the thread as blocks and are saved with the conversation."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from app.core.mcp.config import parse_config, save_config
from app.core.mcp.secrets import SecretStore
from app.core.mcp.servers import McpServers
from app.ui.chat.render import look
from app.ui.chat.stream import StreamBridge, StreamResult
from tests.core.chat.tool_fixtures import SERVER, call, scripted


@pytest.fixture
def with_tools(make_chat, tmp_path):
    made = []

    def make(*turns: str):
        config = {"mcpServers": {"tools": {"command": sys.executable, "args": [SERVER]}}}
        save_config(tmp_path / "mcp.json", parse_config(json.dumps(config), "t"))
        servers = McpServers(tmp_path, SecretStore(tmp_path / "s.json"))
        made.append(servers)
        h, page = make_chat(load=False, script=scripted(*turns))
        page.shutdown()  # the page opened before the tools existed; a new one gets them
        h.tools = servers
        page = h.open_page()
        h.load()
        return h, page

    yield make
    for servers in made:
        servers.close()


def turn_on(qtbot, page, name: str = "tools") -> None:
    """As the Tools menu does it, once a chat is open; waits until it is saved."""
    if page.conv_id is None:
        page.new_conversation().result(10)
        qtbot.waitUntil(lambda: page.conv_id is not None, timeout=5000)
    page.tools._fill()
    action = next(a for a in page.tools.menu.actions() if a.text().startswith(name + " — "))
    assert action.text() == f"{name} — stopped" and "mcp_server.py" in action.toolTip()
    with qtbot.waitSignal(page.tools.changed, timeout=5000):
        action.setChecked(True)
    assert page.header.tools_button.text() == "Tools (1)"
    page.open_conversation(page.conv_id)  # opened again: the button reads the saved servers
    assert page.header.tools_button.text() == "Tools (1)" and page.header.tools_button.isEnabled()


def test_a_call_waits_for_approval_then_shows_as_blocks_and_is_saved(with_tools, qtbot):
    _h, page = with_tools(call("add", a=2, b=40), "It is 42.")
    turn_on(qtbot, page)
    assert "starts when the model first needs it" in page.notice.text()
    assert page.replies.send("What is 2 + 40?")
    qtbot.waitUntil(page.approval.isVisible, timeout=15_000)
    assert "add" in page.approval.question.text() and "tools" in page.approval.question.text()
    assert json.loads(page.approval.arguments.text()) == {"a": 2, "b": 40}
    assert not page.approval.start_note.isVisible()  # started before the model ran: its tools were listed
    with qtbot.waitSignal(page.reply_finished, timeout=30_000):
        page.approval.once.click()
    assert not page.approval.isVisible()
    rows = page.thread_view.rows
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    calls_html = page.thread_view.messages.rendered(rows[1]).html
    assert "Called <b>add</b> from tools" in calls_html and "&quot;a&quot;: 2" in calls_html
    assert rows[2].text == "42" and "Tool · add from tools" in page.thread_view.messages.rendered(rows[2]).html
    assert rows[3].text == "It is 42." and rows[3].status == "done"
    stored = page.store.active_path(page.conv_id)
    assert stored[1].tool_calls[0]["tool"] == "add" and stored[2].content == "42"


def test_deny_is_an_error_the_model_reads_and_always_stops_asking(with_tools, qtbot):
    h, page = with_tools(call("echo", text="a"), call("echo", text="b"), "done")
    turn_on(qtbot, page)
    assert page.replies.send("Echo twice")
    qtbot.waitUntil(page.approval.isVisible, timeout=15_000)
    with qtbot.waitSignal(page.reply_finished, timeout=30_000):
        page.approval.always.click()  # the second call of the same tool is not asked about
    assert [r.text for r in page.thread_view.rows if r.role == "tool"] == ["a", "b"]

    h.engines[-1].script = scripted(call("echo", text="no"), "as you wish")
    page.tools.allowed.clear()  # a new session: asked again
    assert page.replies.send("Once more")
    qtbot.waitUntil(page.approval.isVisible, timeout=15_000)
    with qtbot.waitSignal(page.reply_finished, timeout=30_000):
        page.approval.deny.click()
    denied = [r for r in page.thread_view.rows if r.role == "tool"][-1]
    assert denied.status == "error" and denied.text == "Error: the user denied this call"
    assert f"color:{look().error}" in page.thread_view.messages.rendered(denied).html
    assert page.thread_view.rows[-1].text == "as you wish"


def test_the_rows_a_turn_saved_show_before_its_end_whatever_the_ui_thread_does_first(qtbot):
    """The loop saves a tool's result and the model's next turn, which answers at once (a scripted model; a busy UI
    thread): the next drain shows the rows, then the end, never the end of a row the thread does not have."""
    bridge = StreamBridge(1, 1, flush_ms=60_000)  # drained by hand, before any event is processed
    seen: list[tuple] = []
    bridge.row_added.connect(lambda role, msg_id: seen.append(("row", role, msg_id)))
    bridge.updated.connect(lambda msg_id, text: seen.append(("text", msg_id, text)))
    bridge.finished.connect(lambda msg_id, result: seen.append(("end", msg_id, result.text)))

    def loop() -> None:  # the tool loop's thread
        bridge.on_text("calling")
        bridge.on_row("tool", 2)
        bridge.on_row("assistant", 3)
        bridge.on_text("as you wish")
        bridge.on_finished(StreamResult("done", "as you wish", None, "stop"))

    worker = threading.Thread(target=loop)
    worker.start()
    worker.join()
    bridge.drain()
    assert seen == [("row", "tool", 2), ("row", "assistant", 3), ("end", 3, "as you wish")]
    bridge.drain()
    assert len(seen) == 3  # shown once
    bridge.deleteLater()


def test_stop_while_a_call_waits_denies_it_and_ends_the_reply(with_tools, qtbot):
    _h, page = with_tools(call("add", a=1, b=1), "never")
    turn_on(qtbot, page)
    assert page.replies.send("Add")
    qtbot.waitUntil(page.approval.isVisible, timeout=15_000)
    with qtbot.waitSignal(page.reply_finished, timeout=30_000) as done:
        page.replies.stop()
    assert done.args[1].status == "stopped"
    assert not page.replies.replying


def test_a_reply_that_used_none_of_the_tools_says_so_under_it_and_after_reopening(with_tools, qtbot):
    _h, page = with_tools("Just an answer.")
    turn_on(qtbot, page)
    with qtbot.waitSignal(page.reply_finished, timeout=30_000):
        assert page.replies.send("Hello")
    reply = page.thread_view.rows[-1]
    assert reply.text == "Just an answer."
    assert "7 tools offered, none used" in page.thread_view.messages.rendered(reply).html
    page.open_conversation(page.conv_id)  # read back from the saved reply
    assert "7 tools offered, none used" in page.thread_view.messages.rendered(page.thread_view.rows[-1]).html


def test_the_tools_menu_with_no_servers_names_the_file_with_its_path(make_chat, qtbot, tmp_path):
    servers = McpServers(tmp_path / "config", SecretStore(tmp_path / "s.json"))
    try:
        h, page = make_chat(load=False)
        page.shutdown()
        h.tools = servers
        page = h.open_page()
        page.new_conversation().result(10)
        qtbot.waitUntil(lambda: page.conv_id is not None, timeout=5000)
        page.tools._fill()
        empty = page.tools.menu.actions()[0]
        assert str(tmp_path / "config" / "mcp.json") in empty.text() and not empty.isEnabled()
    finally:
        servers.close()
