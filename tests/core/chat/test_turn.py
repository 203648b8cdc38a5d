"""A chat turn in the core, on the FakeEngine: from the user's message to the saved reply (app.core.chat.sending and
app.core.chat.turn), with no window. The context is fitted by dropping the oldest turns, the reply streams through
its events on the engine's thread and is saved as it ends, a stop keeps what was written, a refusal or a failure
is saved as an error, and a reply with tools writes down each call and its result."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.core.chat.approvals import WaitedApproval
from app.core.chat.operations import ChatOperations
from app.core.chat.reply_stream import ReplyResult
from app.core.chat.sending import ChatTurns, TurnStart
from app.core.chat.tool_loop import ToolLoop
from app.core.chat.turn import ChatTurn, TurnTools
from app.core.engines.base import LoadSpec, SamplingParams
from app.core.errors import HearthError
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from tests.core.chat.tool_fixtures import call, scripted
from tests.fixtures.fake_engine import registry_with_fake

HOST_THREAD = "test-turn-host"
N_CTX = 4096


class Seen:
    """TurnEvents that keep what they were told, and on which thread."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.rows: list[tuple[str, int]] = []
        self.results: list[ReplyResult] = []
        self.threads: dict[str, set[str]] = {"text": set(), "row": set(), "finished": set()}
        self.started = threading.Event()  # some text came

    def on_text(self, piece: str) -> None:
        self.threads["text"].add(threading.current_thread().name)
        self.text.append(piece)
        self.started.set()

    def on_row(self, role: str, msg_id: int) -> None:
        self.threads["row"].add(threading.current_thread().name)
        self.rows.append((role, msg_id))

    def on_finished(self, result: ReplyResult) -> None:
        self.threads["finished"].add(threading.current_thread().name)
        self.results.append(result)


@pytest.fixture
def fake_host():
    hosts: list[EngineHost] = []

    def make(**engine) -> EngineHost:
        engines: list = []
        preflight = lambda spec, fmt, check: PreflightResult()  # noqa: E731
        host = EngineHost(registry_with_fake(engines, **engine), preflight=preflight, name=HOST_THREAD)
        host.load_sync(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=N_CTX), "fake")
        host.engines = engines  # type: ignore[attr-defined]  # what the engine was asked
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        assert host.shutdown(5)


@pytest.fixture
def chats(store):
    ops = ChatOperations(store)
    yield ops
    ops.close()


def replied(turns: ChatTurns, start: TurnStart, events: Seen | None = None, **kwargs) -> ChatTurn:
    """Once the turn's write is committed, its reply, started and waited for."""
    saved = start.saving.result(10)
    turn = turns.reply(start, saved, events, **kwargs)
    assert turn.start() is None
    assert turn.wait(30)
    turns.chats.flush()
    return turn


def test_a_message_streams_its_reply_on_the_engine_thread_and_saves_it(fake_host, chats, store):
    host = fake_host(script="warm bread by the fire")
    turns, seen = ChatTurns(host, chats), Seen()
    start = turns.send(None, "What is good tonight?", n_ctx=N_CTX)
    assert start.new and start.retitled and start.plan.ok and start.plan.dropped_messages == 0
    turn = replied(turns, start, seen)
    conv_id = start.saving.result().conversation_id
    path = store.active_path(conv_id)
    assert [(m.role, m.status) for m in path] == [("user", "done"), ("assistant", "done")]
    assert path[1].content == "warm bread by the fire" == "".join(seen.text) == turn.result.text
    assert path[1].finish_reason == "stop" and path[1].stats["generated_tokens"] == 5
    assert store.get_conversation(conv_id).title == "What is good tonight?"  # its first message names it
    assert [r.status for r in seen.results] == ["done"] and turn.failure is None
    assert seen.threads["text"] == seen.threads["finished"] == {HOST_THREAD}  # the engine's, as documented
    request = host.engines[0].generations[-1]
    assert request.conversation_id == str(conv_id)  # the engine may reuse the conversation's prefix
    assert [(m.role, m.content) for m in request.messages] == [("user", "What is good tonight?")]


def test_a_long_conversation_leaves_out_its_oldest_turns_and_says_so(fake_host, chats, store):
    host = fake_host(script="ok")
    conv = store.create_conversation("long", system_prompt="Be brief.")
    for i in range(6):
        user = store.add_user_message(conv.id, f"question {i} " + "words " * 25)
        store.finish_assistant(
            store.begin_assistant(conv.id, user), f"answer {i} " + "more " * 25, "done", None, "stop", None
        )
    turns = ChatTurns(host, chats)
    shown = store.active_path(conv.id)
    start = turns.send(store.get_conversation(conv.id), "and now?", shown=shown, n_ctx=400)
    plan = start.plan
    assert plan.ok and plan.dropped_messages > 0 and plan.dropped_messages % 2 == 0  # whole turns
    assert plan.notice is not None and plan.notice.level == "info" and "oldest" in plan.notice.text
    replied(turns, start)
    sent = host.engines[0].generations[-1].messages
    assert sent[0].role == "system" and sent[0].content == "Be brief."  # the system prompt always stays
    assert sent[-1].content == "and now?" and not any("question 0" in m.content for m in sent)
    assert len(sent) == 1 + 12 + 1 - plan.dropped_messages
    path = store.active_path(conv.id)
    assert len(path) == 14 and path[-1].content == "ok"  # nothing left out of the request is deleted


def test_a_message_too_long_for_the_context_is_saved_without_a_reply(fake_host, chats, store):
    host = fake_host()
    turns = ChatTurns(host, chats)
    start = turns.send(None, "lorem ipsum " * 400, n_ctx=256)
    assert not start.plan.ok and start.plan.notice.level == "error" and "Nothing was sent" in start.plan.notice.text
    saved = start.saving.result(10)
    assert saved.reply_id is None
    assert [m.role for m in store.active_path(saved.conversation_id)] == ["user"]  # what the user wrote is kept
    with pytest.raises(ValueError):
        turns.reply(start, saved, Seen())
    assert host.engines[0].generations == []


def test_stop_keeps_the_text_so_far_saved_as_stopped(fake_host, chats, store):
    host = fake_host(tok_s=50)
    turns, seen = ChatTurns(host, chats), Seen()
    start = turns.send(None, "tell me a long story", n_ctx=N_CTX)
    turn = turns.reply(start, start.saving.result(10), seen)
    assert turn.start() is None
    assert seen.started.wait(10)
    turn.stop()
    assert turn.wait(10)
    chats.flush()
    result = turn.result
    assert result.status == "stopped" and result.finish_reason == "cancelled" and result.text
    reply = store.get_message(start.saving.result().reply_id)
    assert (reply.status, reply.content) == ("stopped", result.text)
    assert result.text == "".join(seen.text) and host.state.status == "ready"


def test_a_refused_turn_saves_its_reply_as_the_error_and_reports_nothing(fake_host, chats, store):
    host = fake_host()
    turns, seen = ChatTurns(host, chats), Seen()
    start = turns.send(None, "hello", n_ctx=N_CTX)
    saved = start.saving.result(10)
    assert host.shutdown(5)
    turn = turns.reply(start, saved, seen)
    refused = turn.start()
    assert refused and turn.wait(0) and turn.result.status == "error" and isinstance(turn.failure, HearthError)
    chats.flush()
    reply = store.get_message(saved.reply_id)
    assert (reply.status, reply.error) == ("error", refused)
    assert seen.results == []  # the caller shows the refusal it was handed


def test_an_engine_failure_is_saved_as_an_error(fake_host, chats, store):
    host = fake_host(raise_on_token=3)
    turns, seen = ChatTurns(host, chats), Seen()
    start = turns.send(None, "hello", n_ctx=N_CTX)
    turn = replied(turns, start, seen)
    assert turn.result.status == "error" and "failed at token 3" in turn.result.error
    assert isinstance(turn.failure, HearthError)
    reply = store.get_message(start.saving.result().reply_id)
    assert reply.status == "error" and "failed at token 3" in reply.error
    assert [r.status for r in seen.results] == ["error"]


def test_a_reply_kept_by_its_caller_saves_nothing(fake_host, store):
    """As `hearth chat` runs a turn: no conversation, the reply handed back."""
    from app.core.chat.sending import fit_messages, request_for
    from app.core.engines.base import ChatMessage

    host = fake_host(script="hi there")
    plan = fit_messages([ChatMessage(role="user", content="hello")], N_CTX, 32)
    seen = Seen()
    turn = ChatTurn(host, request_for(plan, SamplingParams(max_tokens=32)), seen, source="cli")
    assert turn.start() is None and turn.wait(10)
    assert turn.result.text == "hi there" and turn.final.finish_reason == "stop"
    assert store.list_conversations() == []


def test_regenerate_keeps_the_old_reply_as_a_branch(fake_host, chats, store):
    host = fake_host(script="one answer")
    turns = ChatTurns(host, chats)
    first = turns.send(None, "a question", n_ctx=N_CTX)
    replied(turns, first)
    saved = first.saving.result()
    conv = chats.get_conversation(saved.conversation_id)
    user = store.get_message(saved.parent_id)
    again = turns.regenerate(conv, user.id, [user], N_CTX)
    turn = replied(turns, again)
    new_reply = again.saving.result().reply_id
    assert new_reply != saved.reply_id and turn.result.status == "done"
    assert [m.id for m in store.branches(new_reply)] == [saved.reply_id, new_reply]
    assert store.active_path(conv.id)[-1].id == new_reply


def test_editing_the_first_message_names_the_chat_again(fake_host, chats, store):
    host = fake_host(script="sure")
    turns = ChatTurns(host, chats)
    first = turns.send(None, "first words", n_ctx=N_CTX)
    replied(turns, first)
    saved = first.saving.result()
    conv = chats.get_conversation(saved.conversation_id)
    assert conv.title == "first words"
    edited = turns.edit(conv, store.get_message(saved.parent_id), "other words", [], N_CTX)
    assert edited.retitled
    replied(turns, edited)
    path = store.active_path(conv.id)
    assert [(m.role, m.content) for m in path] == [("user", "other words"), ("assistant", "sure")]
    assert store.get_conversation(conv.id).title == "other words"


# -- a reply with tools --------------------------------------------------------------------------------------
def tool_turn(host, chats, servers, seen, ask):
    """A message in a new chat whose reply may call the test server's tools, asking `ask` about each call."""
    turns = ChatTurns(host, chats)
    start = turns.send(None, "What is 2 + 40?", n_ctx=N_CTX)
    cancel = threading.Event()
    approvals = WaitedApproval(ask, cancel)
    pool = ThreadPoolExecutor(1, thread_name_prefix="test-turn-loop")
    tools = TurnTools(ToolLoop(host, servers, approvals), ["tools"], pool)
    turn = turns.reply(start, start.saving.result(10), seen, tools=tools, cancel=cancel)
    return start, turn, approvals, pool


def test_a_tool_round_trip_saves_the_call_and_its_result(chats, store, servers, make_host):
    host = make_host(scripted(call("add", a=2, b=40), "It is 42."))
    seen, asked = Seen(), []

    def ask(pending) -> None:
        """Loop thread: answered from another thread, as a window's button would."""
        asked.append(pending)
        threading.Timer(0.05, approvals.answer, ("once",)).start()

    start, turn, approvals, pool = tool_turn(host, chats, servers, seen, ask)
    try:
        assert turn.start() is None and turn.wait(30)
    finally:
        pool.shutdown(wait=True)
    chats.flush()
    conv_id = start.saving.result().conversation_id
    path = store.active_path(conv_id)
    assert [(m.role, m.status) for m in path] == [
        ("user", "done"),
        ("assistant", "done"),
        ("tool", "done"),
        ("assistant", "done"),
    ]
    assert [(c.tool, c.arguments) for c in asked] == [("add", {"a": 2, "b": 40})]
    assert path[1].tool_calls[0]["tool"] == "add" and path[1].finish_reason == "tool_calls"
    assert (path[2].content, path[2].tool_call_id) == ("42", path[1].tool_calls[0]["id"])
    assert path[3].content == "It is 42." == turn.result.text and turn.result.status == "done"
    assert seen.rows == [("tool", path[2].id), ("assistant", path[3].id)]
    assert seen.threads["row"] == seen.threads["finished"] and all(
        t.startswith("test-turn-loop") for t in seen.threads["row"]
    )


def test_stopping_while_a_call_waits_for_approval_denies_it_and_ends_stopped(chats, store, servers, make_host):
    host = make_host(scripted(call("add", a=1, b=1), "never"))
    seen, asking = Seen(), threading.Event()
    start, turn, _approvals, pool = tool_turn(host, chats, servers, seen, lambda _call: asking.set())
    try:
        assert turn.start() is None
        assert asking.wait(15)
        turn.stop()  # nobody answers: the stop does
        assert turn.wait(15)
    finally:
        pool.shutdown(wait=True)
    chats.flush()
    assert turn.result.status == "stopped" and turn.result.finish_reason == "cancelled"
    path = store.active_path(start.saving.result().conversation_id)
    assert [m.role for m in path] == ["user", "assistant", "tool"]
    assert (path[2].status, path[2].content) == ("error", "Error: the user denied this call")
    assert len(host.engines[0].generations) == 1  # the model never read a result


def test_a_tool_loop_that_fails_saves_the_reply_as_the_error(chats, store, fake_host):
    class Broken:
        def run(self, *args, **kwargs):
            raise HearthError("the tools server went away")

    host = fake_host()
    turns, seen = ChatTurns(host, chats), Seen()
    start = turns.send(None, "hello", n_ctx=N_CTX)
    with ThreadPoolExecutor(1) as pool:
        turn = replied(turns, start, seen, tools=TurnTools(Broken(), ["tools"], pool))  # type: ignore[arg-type]
    assert turn.result.status == "error" and str(turn.failure) == "the tools server went away"
    reply = store.get_message(start.saving.result().reply_id)
    assert (reply.status, reply.error) == ("error", "the tools server went away")
    assert [r.error for r in seen.results] == ["the tools server went away"]
