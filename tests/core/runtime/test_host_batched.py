"""The host over a batched llama.cpp engine (slots > 1): concurrent jobs are sequences of one batch.

Each sink runs on the host thread, so the order of recorded events is the order the host produced them.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import ChunkEvent, CountJob, GenerateJob, HostBusy, JobDone, Started
from tests.core.engines.fixtures import chat_request, load_llamacpp
from tests.fixtures.tiny_gguf import ENDOFTEXT_ID, IM_END_ID

QUESTIONS = ["What is the capital of France?", "Name three colours.", "Count to five.", "Say hello."]


class Log:
    """Events of many jobs in the one order the host thread delivered them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def sink(self, name: str, on_event=None):
        def record(event) -> None:
            with self.lock:
                self.events.append((name, event))
            if on_event is not None:
                on_event(event)

        return record

    def tokens(self, name: str) -> list[int]:
        return [
            e.chunk.token
            for n, e in self.events
            if n == name and isinstance(e, ChunkEvent) and e.chunk.token is not None
        ]


def make_host(path, **spec) -> EngineHost:
    from app.core.engines import default_registry
    from app.core.engines.llamacpp.options import default_threads

    host = EngineHost(default_registry(), name="batched-engine-host")
    spec.setdefault("n_threads", default_threads())
    host.load_sync(LoadSpec(path=path, **spec), plan_check=False)
    return host


def submit_all(host, jobs: dict[str, GenerateRequest], log: Log, on_event=None):
    return {
        name: host.submit(GenerateJob(request=r, source=name), log.sink(name, on_event and on_event(name)))
        for name, r in jobs.items()
    }


def wait_all(handles, timeout=120.0):
    for handle in handles.values():
        assert handle.wait(timeout), "a job did not finish"


def greedy(prompt: str, **sampling) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, **sampling))


def endless(prompt: str, max_tokens: int) -> GenerateRequest:
    """A greedy request on the tiny model that runs to max_tokens (its end-of-text tokens banned)."""
    bias = {ENDOFTEXT_ID: -100.0, IM_END_ID: -100.0}
    return GenerateRequest(
        prompt=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens, logit_bias=bias)
    )


@pytest.fixture(scope="module")
def tiny_host(tiny_gguf_f16):
    host = make_host(tiny_gguf_f16, n_ctx=1024, slots=4, n_batch=32, kv_unified=False)
    yield host
    assert host.shutdown(30)


def test_tiny_four_concurrent_jobs_give_each_one_alone(tiny_host, tiny_gguf_f16):
    requests = {f"j{i}": endless(p, 16) for i, p in enumerate(["Alpha", "Beta gamma", "Delta", "Epsilon"])}
    single = load_llamacpp(tiny_gguf_f16, n_ctx=1024, slots=1)
    try:
        expected = {n: [c.token for c in single.generate(r, threading.Event()) if c.token] for n, r in requests.items()}
    finally:
        single.unload()
    log = Log()
    states = []  # the host's states, on the host thread as they change
    off = tiny_host.state_changed.connect(states.append)
    try:
        handles = submit_all(tiny_host, requests, log)
        wait_all(handles)
    finally:
        off()
    assert {n: log.tokens(n) for n in requests} == expected
    # The stats a Server page shows: all four slots were busy at once, and each freed as its job ended.
    assert {s.slots_total for s in states} == {4}
    busy = [s.slots_busy for s in states]
    assert max(busy) == 4 and busy[-1] == 0 and tiny_host.state.slots_busy == 0
    for name, handle in handles.items():
        assert handle.result.final.finish_reason in ("stop", "length")
        assert "".join(e.chunk.text for n, e in log.events if n == name and isinstance(e, ChunkEvent)) == (
            handle.result.text
        )
    # They ran together: the jobs' tokens interleave in the host's one stream of events.
    names = [n for n, e in log.events if isinstance(e, ChunkEvent) and e.chunk.token is not None]
    switches = sum(1 for x, y in itertools.pairwise(names) if x != y)
    assert switches >= 8
    assert tiny_host.state.status == "ready" and tiny_host.queue_depth == 0


def test_tiny_the_queue_holds_only_what_exceeds_the_slots(tiny_host):
    hold = threading.Event()  # set: the first job's sink blocks the host thread at its next chunk
    held = threading.Event()
    release = threading.Event()

    def blocker(event):
        if isinstance(event, ChunkEvent) and hold.is_set():
            hold.clear()
            held.set()
            release.wait(10)
            release.clear()

    log = Log()
    tiny_host.queue_size = 3
    try:
        hold.set()
        first = tiny_host.submit(GenerateJob(request=endless("One", 200)), log.sink("a", blocker))
        assert held.wait(30)
        more = [tiny_host.submit(GenerateJob(request=endless(p, 200)), log.sink(p)) for p in "BCD"]
        assert tiny_host.queue_depth == 3  # the host is held in a sink: not taken yet
        held.clear()
        hold.set()
        release.set()
        assert held.wait(30)  # held again, one step later: the three have joined the four slots
        assert tiny_host.queue_depth == 0 and all(h.started for h in more)
        tiny_host.queue_size = 1
        waiting = tiny_host.submit(GenerateJob(request=endless("E", 4)), log.sink("E"))
        assert tiny_host.queue_depth == 1  # the fifth waits for a slot: only it is in the queue
        with pytest.raises(HostBusy):
            tiny_host.submit(GenerateJob(request=endless("F", 4)))
        release.set()
        for h in [first, *more, waiting]:
            assert h.wait(60) and h.result.final.finish_reason == "length"
        assert not waiting.started or waiting.result.final.stats.generated_tokens == 4
    finally:
        release.set()
        tiny_host.queue_size = 8


def test_tiny_a_count_job_runs_between_steps_and_a_load_waits_for_the_sequences(tiny_host):
    log = Log()
    gen = tiny_host.submit(GenerateJob(request=greedy("Long one", max_tokens=64)), log.sink("gen"))
    count = tiny_host.submit(CountJob(request=greedy("Count me")), log.sink("count"))
    assert count.wait(30) and count.result.prompt_tokens > 0
    assert not gen.done.is_set()  # counted while the generation was still running
    assert gen.wait(60) and gen.result.final.finish_reason in ("stop", "length")
    done = [n for n, e in log.events if isinstance(e, JobDone)]
    assert done == ["count", "gen"]


# -- SmolLM2 ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_host(smollm2_gguf):
    host = make_host(smollm2_gguf, n_ctx=2048, slots=4, n_batch=64, kv_unified=False)
    host.generate_sync(chat_request("Hi", max_tokens=2), source="warm-up")
    yield host
    assert host.shutdown(30)


@pytest.mark.slow
def test_smollm2_four_concurrent_chats_give_each_one_alone(smol_host, smollm2_engine):
    requests = {f"q{i}": chat_request(q, max_tokens=24) for i, q in enumerate(QUESTIONS)}
    expected = {
        n: [c.token for c in smollm2_engine.generate(r, threading.Event()) if c.token is not None]
        for n, r in requests.items()
    }
    log = Log()
    handles = submit_all(smol_host, requests, log)
    wait_all(handles)
    assert {n: log.tokens(n) for n in requests} == expected
    assert "Paris" in handles["q0"].result.text


@pytest.mark.slow
def test_smollm2_a_cancel_in_one_sequence_leaves_the_others_streaming(smol_host, smollm2_engine):
    requests = {f"q{i}": chat_request(q, max_tokens=24) for i, q in enumerate(QUESTIONS[:3])}
    expected = {
        n: [c.token for c in smollm2_engine.generate(r, threading.Event()) if c.token is not None]
        for n, r in requests.items()
    }
    handles: dict = {}

    def cancel_after_three(name):
        seen = [0]

        def on_event(event):
            if name == "q1" and isinstance(event, ChunkEvent) and event.chunk.token is not None:
                seen[0] += 1
                if seen[0] == 3:
                    handles["q1"].cancel()

        return on_event

    log = Log()
    handles.update(submit_all(smol_host, requests, log, cancel_after_three))
    wait_all(handles)
    assert handles["q1"].result.final.finish_reason == "cancelled"
    assert log.tokens("q1") == expected["q1"][:3]
    assert log.tokens("q0") == expected["q0"] and log.tokens("q2") == expected["q2"]
    cancelled_at = next(
        i for i, (n, e) in enumerate(log.events) if n == "q1" and isinstance(e, ChunkEvent) and e.chunk.finish_reason
    )
    assert any(n == "q0" and isinstance(e, ChunkEvent) for n, e in log.events[cancelled_at:])  # went on after it


@pytest.mark.slow
def test_smollm2_a_request_joining_mid_stream_pauses_the_others_one_chunk_at_most(smol_host):
    log = Log()
    streaming = smol_host.submit(
        GenerateJob(request=chat_request("Tell me a long story about a dragon.", max_tokens=80)), log.sink("A")
    )
    while len(log.tokens("A")) < 5:
        time.sleep(0.005)
    long_prompt = "Summarise this: " + " ".join(f"item {i} is on the shelf." for i in range(90))
    joiner = smol_host.submit(GenerateJob(request=chat_request(long_prompt, max_tokens=4)), log.sink("B"))
    assert joiner.wait(120) and streaming.wait(120)
    stats = joiner.result.final.stats
    chunks = -(-stats.prompt_tokens_evaluated // 63)  # n_batch 64, one place taken by A's token
    assert chunks >= 6  # a prompt long enough to take several steps
    # Between B's start and its first token, A got a token at (nearly) every step: B's prompt was read
    # one chunk per step beside A's decoding, never all at once.
    b_start = next(i for i, (n, e) in enumerate(log.events) if n == "B" and isinstance(e, Started))
    b_first = next(i for i, (n, e) in enumerate(log.events) if n == "B" and isinstance(e, ChunkEvent))
    a_during = sum(1 for n, e in log.events[b_start:b_first] if n == "A" and isinstance(e, ChunkEvent))
    assert a_during >= chunks - 1
    assert streaming.result.final.finish_reason == "length" and joiner.result.final.finish_reason in ("stop", "length")


@pytest.mark.slow
@pytest.mark.parametrize("conversations", [2, 3])
def test_smollm2_alternating_conversations_evaluate_only_their_new_tokens(smollm2_gguf, conversations):
    """Two conversations on two slots keep a slot each; three on two (slot-starved) come back from RAM."""
    from app.core.engines.base import ChatMessage

    three = conversations == 3
    host = make_host(smollm2_gguf, n_ctx=2048, slots=2)
    try:
        convs = {
            "a": [ChatMessage(role="user", content="My name is Ada. What is 2 + 2?")],
            "b": [ChatMessage(role="user", content="Tell me one fact about the Moon.")],
        }
        if three:
            convs["c"] = [ChatMessage(role="user", content="Which colour is the sky on a clear day?")]
        first: dict = {}
        for turn in range(2):
            for name, messages in convs.items():
                request = GenerateRequest(messages=messages, sampling=SamplingParams(temperature=0.0, max_tokens=16))
                text, final = host.generate_sync(request, source=name)
                stats = final.stats
                if turn == 0:
                    first[name] = stats
                    messages += [ChatMessage(role="assistant", content=text)]
                    messages += [ChatMessage(role="user", content="And what is my name?")]
                else:
                    new_tokens = stats.prompt_tokens - first[name].prompt_tokens
                    assert stats.prompt_tokens_evaluated <= new_tokens  # the first turn's prompt was cached
                    assert stats.prompt_tokens - stats.prompt_tokens_evaluated >= first[name].prompt_tokens
    finally:
        assert host.shutdown(30)
