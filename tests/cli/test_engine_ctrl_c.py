"""Ctrl-C in `hearth run` / `hearth chat`, in process on the FakeEngine: the reply stops, keeps its text,
and `run` exits 130 while `chat` says [stopped] and carries on."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.cli import build_parser, model_load
from app.cli import engine as cli_engine
from app.cli.context import CliContext
from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.preflight import PreflightResult
from tests.fixtures.fake_engine import registry_with_fake
from tests.helpers import ctrl_c_on_wait


@pytest.fixture
def fake_host(monkeypatch):
    """A loaded FakeEngine host at 20 tok/s (a 1000-token reply would take 50 s); `start_host` returns it.
    `.first_chunk` is set once the reply has started; `.engines` holds the engine."""
    engines: list = []
    host = EngineHost(
        registry_with_fake(engines, tok_s=20),
        preflight=lambda spec, fmt, check: PreflightResult(),
        name="test-cli-host",
    )
    host.load_sync(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=4096), "fake")
    host.first_chunk = threading.Event()
    host.engines = engines
    write = cli_engine._write

    def streamed(text: str) -> None:
        write(text)
        host.first_chunk.set()

    monkeypatch.setattr(cli_engine, "_write", streamed)
    monkeypatch.setattr(cli_engine, "start_host", lambda ctx, args: (host, host.state.model))
    yield host
    assert host.shutdown(5)


def test_generate_returns_the_stopped_reply(fake_host, monkeypatch, capsys):
    hit = ctrl_c_on_wait(monkeypatch, fake_host.first_chunk)
    request = GenerateRequest(prompt="tell me a story", sampling=SamplingParams(max_tokens=1000))
    text, final, interrupted = cli_engine.generate(fake_host, request)
    assert interrupted and len(hit) == 1
    assert final.finish_reason == "cancelled" and 0 < final.stats.generated_tokens < 1000
    assert text and capsys.readouterr().out == text  # what streamed is what it returns
    assert fake_host.state.status == "ready"


def test_run_exits_130_after_ctrl_c(fake_host, monkeypatch, capsys):
    ctrl_c_on_wait(monkeypatch, fake_host.first_chunk)
    args = build_parser().parse_args(["run", "model.fake", "tell me a story", "--max-tokens", "1000"])
    assert cli_engine.cmd_run(CliContext("run"), args) == cli_engine.EXIT_INTERRUPTED == 130
    out, err = capsys.readouterr()
    assert out.strip() and out.endswith("\n")
    assert "cancelled]" in err and "prompt tokens" not in out


def test_chat_says_stopped_keeps_the_reply_and_goes_on(fake_host, monkeypatch, capsys):
    ctrl_c_on_wait(monkeypatch, fake_host.first_chunk)
    lines = iter(["tell me a story", "and then?"])

    def ask(prompt: str) -> str:
        if fake_host.engines[0].generations:
            fake_host.engines[0].tok_s = 0  # the second reply runs to its end: quickly
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", ask)
    args = build_parser().parse_args(["chat", "model.fake", "--max-tokens", "1000", "--system", "Be brief."])
    assert cli_engine.cmd_chat(CliContext("chat"), args) == 0
    out, err = capsys.readouterr()
    stats = [line for line in err.splitlines() if line.startswith("[")]
    assert len(stats) == 2
    assert stats[0].startswith("[stopped] [") and stats[0].endswith(" · cancelled]")
    assert not stats[1].startswith("[stopped]") and stats[1].endswith(" · length]")
    first, second = fake_host.engines[0].generations
    assert [(m.role, m.content) for m in first.messages] == [("system", "Be brief."), ("user", "tell me a story")]
    # The stopped reply stays in the history as the user saw it.
    stopped = out.splitlines()[0]
    assert stopped.split() and [(m.role, m.content) for m in second.messages] == [
        ("system", "Be brief."),
        ("user", "tell me a story"),
        ("assistant", stopped),
        ("user", "and then?"),
    ]


@pytest.mark.parametrize(
    ("setting", "flag", "fmt", "mode"),
    [
        ("auto", None, "gguf", "auto"),  # as the app and `hearth serve` plan it
        ("off", None, "gguf", "off"),  # the user's Settings → Speculative decoding
        ("on", None, "gguf", "auto"),  # an old saved "On" is what Automatic now is
        ("off", "ngram", "gguf", "ngram"),  # the flag wins over the setting
        ("auto", None, "mlx", "off"),  # MLX drafts only with a draft model
    ],
)
def test_run_and_chat_draft_as_the_settings_say_unless_told(setting, flag, fmt, mode):
    from app.core.settings import SettingsStore

    ctx = CliContext("run")
    store = SettingsStore(ctx.paths.settings_file)
    store.save(store.load().model_copy(update={"speculative": setting}))
    for command in (["run", "model.gguf", "hi"], ["chat", "model.gguf"]):
        args = build_parser().parse_args(command + (["--speculative", flag] if flag else []))
        assert model_load.speculation(CliContext("run"), args, fmt) == mode
