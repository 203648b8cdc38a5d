"""RemoteEngine in an EngineHost, against a second Hearth on loopback: streaming, stats from the server's
usage, Stop closing the upstream request, reasoning and tool calls, and the ways a remote fails."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.engines.registry import EngineRegistry
from app.core.engines.remote import FORMAT, register_remote, remote_load_spec
from app.core.errors import HearthError
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import ChunkEvent, GenerateJob, JobFailed
from app.core.tools import plan_tools
from tests.core.engines.remote.upstream import UPSTREAM_KEY, remote_store, upstream_server
from tests.helpers import wait_until

HI = [ChatMessage(role="user", content="hi")]
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture
def connect(tmp_path):
    """connect(**upstream engine kwargs) → (upstream, local host with box/alpha loaded, store)."""
    made = []

    def make(read_timeout_s: float = 30.0, **engine_kwargs):
        cm = upstream_server(tmp_path / f"up{len(made)}", **engine_kwargs)
        up = cm.__enter__()
        store = remote_store(tmp_path / f"local{len(made)}")
        store.add(up.url, name="box", api_key=UPSTREAM_KEY, read_timeout_s=read_timeout_s)
        host = EngineHost(register_remote(EngineRegistry(), store), name="local-host")
        made.append((cm, host))
        host.load_sync(store.load_spec("box/alpha"), FORMAT)
        return up, host, store

    yield make
    for cm, host in made:
        host.shutdown(5)
        cm.__exit__(None, None, None)


def test_a_remote_model_loads_with_the_servers_context_and_streams_through_the_host(connect):
    up, host, _ = connect(script="one two three four five", tok_s=50)
    assert host.state.model.n_ctx == 256 and host.state.model.extra["kind"] == "hearth"
    seen: list[tuple[float, str]] = []
    text, final = host.generate_sync(
        GenerateRequest(messages=HI, sampling=SamplingParams(max_tokens=4, temperature=0)),
        on_chunk=lambda c: seen.append((time.monotonic(), c.text)),
    )
    assert text == "one two three four" and final.finish_reason == "length"
    pieces = [t for _, t in seen if t]
    assert len(pieces) >= 3  # streamed as the remote sent it, not in one piece
    assert seen[-1][0] - seen[0][0] > 0.03  # over the fake's 50 tok/s
    stats = final.stats
    assert stats.generated_tokens == 4 and stats.prompt_tokens == up.engines[0].count_tokens(
        GenerateRequest(messages=HI)
    )
    assert stats.decode_tok_s > 0 and stats.time_to_first_token_s > 0
    sent = up.engines[0].generations[-1]
    assert sent.sampling.max_tokens == 4 and sent.sampling.temperature == 0 and sent.messages[0].content == "hi"


def test_stop_closes_the_upstream_request_and_frees_the_remote_within_a_token(connect):
    up, host, _ = connect(script=" ".join(["word"] * 400), tok_s=20)
    got = threading.Event()

    def sink(event):
        if isinstance(event, ChunkEvent) and event.chunk.text:
            got.set()

    handle = host.submit(GenerateJob(GenerateRequest(messages=HI)), sink)
    assert got.wait(10)
    assert up.host.state.status == "generating"
    handle.cancel()
    assert handle.wait(5)
    assert handle.result.final.finish_reason == "cancelled"
    # The upstream host notices the client left and stops: free within a token (50 ms) plus its poll.
    assert wait_until(lambda: up.host.state.status == "ready", 1.0)
    assert len(handle.result.text.split()) < 20


def test_reasoning_and_tool_calls_pass_through_to_hearths_parser(connect):
    call = '{"name":"get_weather","arguments":{"city":"Paris"}}'
    script = f"<think> the user wants weather </think> <tool_call> {call} </tool_call>"
    up, host, _ = connect(script=script)
    text, _final = host.generate_sync(GenerateRequest(messages=HI, tools=WEATHER))
    assert up.engines[0].generations[-1].tools is not None  # the tools reached the remote
    out = plan_tools(WEATHER, "auto").parse(text)
    assert out.reasoning.strip() == "the user wants weather"
    assert [(c.name, c.arguments_dict()) for c in out.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert out.content.strip() == ""


def test_tool_results_go_back_to_the_remote_as_openai_messages(connect):
    from app.core.tools import ToolCall

    up, host, _ = connect(script="sunny")
    history = [
        *HI,
        ChatMessage(
            role="assistant", tool_calls=[ToolCall(id="call_1", name="get_weather", arguments='{"city":"Paris"}')]
        ),
        ChatMessage(role="tool", content="22 C", tool_call_id="call_1"),
    ]
    text, _ = host.generate_sync(GenerateRequest(messages=history, tools=WEATHER))
    sent = up.engines[0].generations[-1].messages
    assert text == "sunny"
    assert sent[1].tool_calls[0].name == "get_weather" and sent[2].tool_call_id == "call_1"


def test_a_remote_that_goes_away_mid_stream_is_a_clear_engine_error(connect):
    up, host, _ = connect(script=" ".join(["word"] * 400), tok_s=20)
    got = threading.Event()
    events = []

    def sink(event):
        events.append(event)
        if isinstance(event, ChunkEvent) and event.chunk.text:
            got.set()

    handle = host.submit(GenerateJob(GenerateRequest(messages=HI)), sink)
    assert got.wait(10)
    up.stop()  # the remote server shuts down with the reply half sent
    assert handle.wait(10)
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert len(failed) == 1 and failed[0].after_output
    assert "remote box" in failed[0].error_message and "mid-reply" in failed[0].error_message
    assert host.state.status == "ready"  # the local host lives on


def test_a_slow_remote_times_out_as_configured(connect):
    # The upstream takes 5 s to read the prompt; the remote is set to wait 0.5 s for a byte.
    _up, host, _ = connect(read_timeout_s=0.5, prompt_batch=1, prompt_batch_delay_s=5.0)
    t0 = time.monotonic()
    with pytest.raises(HearthError, match=r"remote box sent nothing for 0.5 s"):
        host.generate_sync(GenerateRequest(messages=HI))
    assert time.monotonic() - t0 < 3


def test_a_refusal_before_output_keeps_the_remotes_message_and_kind(connect):
    _up, host, _ = connect(n_ctx=32)
    handle = host.submit(GenerateJob(GenerateRequest(messages=[ChatMessage(role="user", content="word " * 100)])))
    assert handle.wait(10)
    assert handle.error_code == "context_length_exceeded" and "remote box answered 400" in handle.error


def test_loading_a_model_the_remote_does_not_serve_or_an_unreachable_remote_fails_clearly(connect, tmp_path):
    up, host, store = connect()
    with pytest.raises(HearthError, match="does not serve 'gone'"):
        host.load_sync(remote_load_spec("box", "gone"), FORMAT)
    with pytest.raises(HearthError, match="no remote named 'nope'"):
        host.load_sync(remote_load_spec("nope", "alpha"), FORMAT)
    up.stop()
    t0 = time.monotonic()
    with pytest.raises(HearthError, match="could not reach the remote box"):
        host.load_sync(store.load_spec("box/alpha"), FORMAT)
    assert time.monotonic() - t0 < 5 and host.state.status == "error"


def test_completion_prompts_go_to_the_completions_route(connect):
    up, host, _ = connect(script="once upon a time")
    text, final = host.generate_sync(GenerateRequest(prompt="tell me", sampling=SamplingParams(max_tokens=3)))
    assert text == "once upon a" and final.finish_reason == "length"
    assert up.engines[0].generations[-1].prompt == "tell me"


def test_stop_during_a_long_remote_prefill_ends_at_once_and_frees_the_remote(connect):
    # ~10 s of prefill upstream, with nothing sent meanwhile but the role chunk
    up, host, _ = connect(prompt_batch=1, prompt_batch_delay_s=0.5, n_ctx=4096)
    handle = host.submit(GenerateJob(GenerateRequest(messages=[ChatMessage(role="user", content="word " * 20)])))
    assert wait_until(lambda: up.host.state.status == "generating", 5)
    time.sleep(0.2)
    t0 = time.monotonic()
    handle.cancel()
    assert handle.wait(2)
    assert time.monotonic() - t0 < 0.5 and handle.result.final.finish_reason == "cancelled"
    assert wait_until(lambda: up.host.state.status == "ready", 2)
