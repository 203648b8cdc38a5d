"""`hearth chat` fits each request to the model's context as the chat window does (the core's turn): the oldest
turns are left out and it says so; a message too long even alone is not sent and leaves the history as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import build_parser
from app.cli import engine as cli_engine
from app.cli.context import CliContext
from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from tests.fixtures.fake_engine import registry_with_fake

N_CTX = 300


@pytest.fixture
def small_host(monkeypatch):
    """A FakeEngine host with a small context that answers "ok"; `start_host` returns it."""
    engines: list = []
    host = EngineHost(
        registry_with_fake(engines, script="ok"),
        preflight=lambda spec, fmt, check: PreflightResult(),
        name="test-cli-chat-context",
    )
    host.load_sync(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=N_CTX), "fake")
    host.engines = engines
    monkeypatch.setattr(cli_engine, "start_host", lambda ctx, args: (host, host.state.model))
    yield host
    assert host.shutdown(5)


def chat(monkeypatch, *lines: str) -> None:
    said = iter(lines)

    def ask(prompt: str) -> str:
        try:
            return next(said)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", ask)
    args = build_parser().parse_args(["chat", "model.fake", "--max-tokens", "8", "--system", "Be brief."])
    assert cli_engine.cmd_chat(CliContext("chat"), args) == 0


def test_the_oldest_turns_are_left_out_of_a_request_that_would_not_fit(small_host, monkeypatch, capsys):
    turns = [f"turn {i} " + "word " * 60 for i in range(4)]
    chat(monkeypatch, *turns)
    err = capsys.readouterr().err
    generations = small_host.engines[0].generations
    assert len(generations) == 4
    last = generations[-1].messages
    assert last[0].content == "Be brief." and last[-1].content == turns[-1]
    assert not any(m.content == turns[0] for m in last)  # the oldest turn went first
    assert len(last) < 1 + 2 * 3 + 1 and (len(last) - 1) % 2 == 1  # whole turns: a question with its answer
    assert "oldest messages were left out of this request" in err


def test_a_message_too_long_alone_is_not_sent_and_the_chat_goes_on(small_host, monkeypatch, capsys):
    chat(monkeypatch, "hello", "word " * 2000, "and then?")
    err = capsys.readouterr().err
    assert "error: Your last message is too long" in err and "Nothing was sent." in err
    first, second = small_host.engines[0].generations
    assert [(m.role, m.content) for m in second.messages] == [
        ("system", "Be brief."),
        ("user", "hello"),
        ("assistant", "ok"),
        ("user", "and then?"),
    ]
    assert [(m.role, m.content) for m in first.messages] == [("system", "Be brief."), ("user", "hello")]
