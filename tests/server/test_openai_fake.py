"""OpenAI Chat Completions and Completions over the FakeEngine: the wire format byte by byte (T24), the
context checked before any byte (T20), clients that leave (T21), a full queue (T22), models and JIT, and
stopping with streams open (T25)."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import openai
import pytest

from app.core.engines.base import GenerateRequest, SamplingParams
from app.core.runtime.jobs import GenerateJob
from app.server.app import create_app
from app.server.runner import ServerThread
from tests.helpers import wait_until
from tests.server.conftest import flood, sse_lines

CHAT = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def events(lines: list[str]) -> list:
    out = []
    for line in lines:
        assert line.startswith("data: ") or line.startswith(":"), line
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_non_stream_reply_is_an_openai_chat_completion(make_server):
    live = make_server(script="one two three four five")
    r = live.client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "alpha"
    assert isinstance(body["created"], int) and body["system_fingerprint"]
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert choice["message"] == {"role": "assistant", "content": "one two three four", "refusal": None}
    usage = body["usage"]
    assert usage["completion_tokens"] == 4 and usage["total_tokens"] == usage["prompt_tokens"] + 4
    assert "cached_tokens" in usage["prompt_tokens_details"]


def test_stream_role_first_one_id_finish_then_usage_with_no_choices_then_done(make_server):
    live = make_server(script="one two three")
    body = {**CHAT, "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}}
    with live.client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = events(sse_lines(r))
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert {c["model"] for c in chunks} == {"alpha"} and {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two three"
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "stop" and finish[0] is chunks[-2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert all(c["usage"] is None for c in chunks[:-1])
    # llama-server's timings ride on the finish chunk only: the engine's own count and rate
    assert [c for c in chunks if "timings" in c] == [finish[0]]
    assert finish[0]["timings"]["predicted_n"] == 3 and finish[0]["timings"]["prompt_n"] > 0


def test_whole_replies_carry_the_engines_timings(make_server):
    live = make_server(script="one two three four five", tok_s=200)
    chat = live.client.post("/v1/chat/completions", json=CHAT).json()
    text = live.client.post("/v1/completions", json={"model": "alpha", "prompt": "hi", "max_tokens": 4}).json()
    for body in (chat, text):
        t = body["timings"]
        assert t["predicted_n"] == body["usage"]["completion_tokens"] == 4
        assert t["cache_n"] == body["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert 100 < t["predicted_per_second"] < 250 and t["predicted_ms"] > 0  # the fake's 200 tok/s


def test_without_include_usage_no_usage_chunk(make_server):
    live = make_server(script="a b")
    with live.client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        got = events(sse_lines(r))
    assert got[-1] == "[DONE]" and all(c["choices"] for c in got[:-1]) and all("usage" not in c for c in got[:-1])


def test_the_openai_client_reads_both(make_server):
    live = make_server(script="the capital is Paris")
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    reply = client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "the capital is Paris"
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "the capital is Paris"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_a_mid_stream_failure_is_one_error_event_and_the_client_raises(make_server):
    live = make_server(raise_on_token=2)
    with live.client.stream("POST", "/v1/chat/completions", json={**CHAT, "max_tokens": 10, "stream": True}) as r:
        got = events(sse_lines(r))
    assert "error" in got[-1] and got[-1]["error"]["code"] == "engine_error" and "[DONE]" not in got
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    with pytest.raises(openai.APIError):
        list(
            client.chat.completions.create(
                model="alpha", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=10
            )
        )


def test_developer_role_and_text_parts_are_accepted_audio_refused(make_server):
    live = make_server(script="ok")
    body = {
        "model": "alpha",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": " there"}]},
        ],
    }
    assert live.client.post("/v1/chat/completions", json=body).status_code == 200
    request = live.engines[0].generations[-1]
    assert [(m.role, m.content) for m in request.messages] == [("system", "be brief"), ("user", "hello there")]
    body["messages"][1]["content"].append({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}})
    r = live.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_content"


def test_sampling_fields_reach_the_engine(make_server):
    live = make_server(script="ok")
    body = {
        **CHAT,
        "temperature": 0,
        "top_p": 0.5,
        "seed": 2**40 + 7,
        "stop": "END",
        "presence_penalty": 0.5,
        "max_completion_tokens": 7,
        "response_format": {"type": "json_object"},
    }
    assert live.client.post("/v1/chat/completions", json=body).status_code == 200
    request = live.engines[0].generations[-1]
    s = request.sampling
    assert (s.temperature, s.top_p, s.seed, s.stop, s.presence_penalty, s.max_tokens) == (0, 0.5, 7, ["END"], 0.5, 7)
    assert request.json_schema == {"type": "object"}


# ---- T20: the context is checked before any byte ----


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_400_before_any_byte(make_server, stream):
    live = make_server(n_ctx=32)
    body = {**CHAT, "stream": stream, "messages": [{"role": "user", "content": "word " * 100}]}
    with live.client.stream("POST", "/v1/chat/completions", json=body) as r:
        raw = r.read()
    assert r.status_code == 400 and not raw.startswith(b"data:")
    error = json.loads(raw)["error"]
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert "102 tokens" in error["message"] and "holds 32" in error["message"]  # the counts, in words


# ---- T21: a client that leaves ----


def test_a_client_that_leaves_after_the_first_chunk_frees_the_host(make_server):
    live = make_server(tok_s=50)
    body = {**CHAT, "max_tokens": 10_000, "stream": True}
    with live.client.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break
    t0 = time.monotonic()
    assert wait_until(lambda: live.host.state.status == "ready", 2)
    assert time.monotonic() - t0 < 0.5
    t1 = time.monotonic()
    assert live.client.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert time.monotonic() - t1 < 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_during_a_long_prefill_frees_the_host(make_server, stream):
    live = make_server(prompt_batch=1, prompt_batch_delay_s=0.05, n_ctx=4096)
    body = {**CHAT, "stream": stream, "messages": [{"role": "user", "content": "word " * 400}]}  # ~20 s of prefill
    client = httpx.Client(base_url=live.url, timeout=0.5)
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json=body)
    client.close()
    t0 = time.monotonic()
    assert wait_until(lambda: live.host.state.status == "ready", 3)
    assert time.monotonic() - t0 < 1.0
    assert live.client.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_a_long_prefill_sends_sse_pings_and_clients_read_past_them(make_server, monkeypatch, route):
    import app.server.reply_stream as reply_stream

    monkeypatch.setattr(reply_stream, "PING_EVERY_S", 0.05)  # the streaming loop both routes share (framed)
    live = make_server(prompt_batch=1, prompt_batch_delay_s=0.02, n_ctx=4096, script="done now")
    words = "word " * 30  # 30 batches: ~0.6 s before the first token
    body = {"model": "alpha", "stream": True, "max_tokens": 4}
    body |= {"messages": [{"role": "user", "content": words}]} if "chat" in route else {"prompt": words}
    with live.client.stream("POST", route, json=body) as r:
        lines = sse_lines(r)
    pings = [i for i, line in enumerate(lines) if line == ": ping"]
    first_text = next(
        i for i, line in enumerate(lines) if line.startswith("data: {") and "done" in line
    )  # the first token
    assert len(pings) >= 3 and all(i < first_text for i in pings)
    assert lines[-1] == "data: [DONE]"
    client = openai.OpenAI(base_url=live.v1, api_key="x")
    if "chat" in route:
        stream = client.chat.completions.create(model="alpha", messages=body["messages"], max_tokens=4, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    else:
        stream = client.completions.create(model="alpha", prompt=words, max_tokens=4, stream=True)
        text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text == "done now"


def test_a_stream_starts_with_its_first_token_and_a_long_prompt_gets_headers_within_the_hold(make_server):
    """The response is held while the engine reads a short prompt (the event loop's work would take the
    engine's cores), and never longer than reply_stream.response_hold_s() (a long prompt's headers)."""
    from app.server.reply_stream import response_hold_s

    hold = response_hold_s()
    live = make_server(prompt_batch=1, prompt_batch_delay_s=0.01, n_ctx=4096, script="done now")
    for words, delay in ((20, 0.01), (60, 0.03)):  # a prompt read in ~0.2 s (within the hold), one in ~1.8 s
        live.engines[-1].prompt_batch_delay_s = delay
        body = {
            "model": "alpha",
            "stream": True,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": "w " * words}],
        }
        t0 = time.monotonic()
        with live.client.stream("POST", "/v1/chat/completions", json=body) as r:
            headers_at = time.monotonic() - t0
            first_at = next(
                time.monotonic() - t0 for line in r.iter_lines() if line.startswith("data: {") and "done" in line
            )
        if words == 20:
            assert headers_at >= 0.17  # held through the prompt (unheld: ~0.09 s, as Started comes)
        else:
            assert headers_at < first_at - 0.5 and headers_at >= hold * 0.9  # released at the hold


# ---- T22: a full queue ----


def test_a_full_queue_answers_503_with_retry_after_and_nothing_interleaves(make_server):
    live = make_server(tok_s=40, queue_size=2, script=" ".join(f"w{i}" for i in range(8)))
    results = flood(live.url, "/v1/chat/completions", {**CHAT, "max_tokens": 8, "stream": True})
    statuses = sorted(r.status_code for r in results)
    assert statuses.count(200) >= 3 and 503 in statuses and set(statuses) <= {200, 503}
    for r in results:
        if r.status_code == 503:
            assert r.json()["error"]["type"] == "unavailable_error" and int(r.headers["Retry-After"]) >= 1
        else:
            text = "".join(
                e["choices"][0]["delta"].get("content") or ""
                for e in events([ln for ln in r.text.splitlines() if ln])
                if e != "[DONE]" and e["choices"]
            )
            assert text == " ".join(f"w{i}" for i in range(8))  # one reply's tokens, in order, nobody else's


def test_api_requests_wait_behind_a_chat_generation(make_server):
    live = make_server(tok_s=30, script=" ".join(f"c{i}" for i in range(6)))
    chat = live.host.submit(
        GenerateJob(GenerateRequest(prompt="chat", sampling=SamplingParams(max_tokens=6)), source="chat")
    )
    assert wait_until(lambda: live.host.state.status == "generating", 2)
    r = live.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
    assert chat.wait(5) and chat.result.text == "c0 c1 c2 c3 c4 c5"
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "c0 c1 c2"


# ---- models and JIT ----


def test_models_list_and_one_model(make_server):
    live = make_server()
    data = {m["id"]: m for m in live.client.get("/v1/models").json()["data"]}
    assert set(data) == {"alpha", "beta"}
    alpha = data["alpha"]
    assert alpha["object"] == "model" and isinstance(alpha["created"], int) and alpha["owned_by"] == "local"
    assert alpha["loaded"] is True and alpha["context_length"] == 256  # what it runs with now
    assert data["beta"]["loaded"] is False and data["beta"]["context_length"] > 0
    assert live.client.get("/v1/models/beta").json()["id"] == "beta"
    r = live.client.get("/v1/models/gamma")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_a_request_for_another_model_loads_it(make_server):
    live = make_server()
    r = live.client.post("/v1/chat/completions", json={**CHAT, "model": "beta"})
    assert r.status_code == 200 and r.json()["model"] == "beta"
    # Loaded beside alpha, which stays the model a request naming none runs on.
    assert sorted(r.name for r in live.host.residents()) == ["alpha.fake", "beta.fake"]
    assert live.host.state.model.path.name == "alpha.fake"
    r = live.client.post("/v1/chat/completions", json={**CHAT, "model": "gamma"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert live.client.post("/models/unload", json={"model": "beta"}).status_code == 200
    live.host.jit = False
    r = live.client.post("/v1/chat/completions", json={**CHAT, "model": "beta"})
    assert r.status_code == 404 and "JIT" in r.json()["error"]["message"]
    assert live.client.post("/v1/chat/completions", json={**CHAT, "model": "alpha"}).status_code == 200


def test_without_a_model_name_the_loaded_one_answers(make_server):
    live = make_server(script="ok")
    r = live.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["model"] == "alpha"


# ---- completions ----


def test_completions_non_stream_and_stream(make_server):
    live = make_server(script="x y z")
    r = live.client.post("/v1/completions", json={"model": "alpha", "prompt": "say", "max_tokens": 5})
    body = r.json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "x y z"
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] == 3
    assert live.engines[0].generations[-1].prompt == "say"
    with live.client.stream(
        "POST",
        "/v1/completions",
        json={"model": "alpha", "prompt": ["say"], "stream": True, "stream_options": {"include_usage": True}},
    ) as s:
        got = events(sse_lines(s))
    assert got[-1] == "[DONE]" and got[-2]["choices"] == [] and got[-2]["usage"]["completion_tokens"] == 3
    assert "".join(c["choices"][0]["text"] for c in got[:-2]) == "x y z"
    for bad in ({"prompt": ["a", "b"]}, {"prompt": "a", "echo": True}):
        assert live.client.post("/v1/completions", json={"model": "alpha", **bad}).status_code in (400, 501)


# ---- T25: stop with streams open ----


def test_stopping_with_three_open_streams_ends_within_5_s_and_frees_the_port(make_server):
    live = make_server(tok_s=20, queue_size=8)
    responses: list[int] = []

    def stream() -> None:
        with httpx.Client(base_url=live.url, timeout=30) as c:
            try:
                with c.stream(
                    "POST", "/v1/chat/completions", json={**CHAT, "max_tokens": 100_000, "stream": True}
                ) as r:
                    responses.append(r.status_code)
                    for _ in r.iter_lines():
                        pass
            except httpx.HTTPError:
                pass

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
    assert wait_until(lambda: len(responses) >= 1 and live.host.state.status == "generating", 5)
    port = live.runner.port
    t0 = time.monotonic()
    assert live.runner.stop(5)
    assert time.monotonic() - t0 < 5
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    with socket.socket() as probe:  # the port is free: a fresh bind works (as servers bind: SO_REUSEADDR)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    again = ServerThread(create_app(live.context), "127.0.0.1", port, live.context.cancel_streams)
    assert again.start() == port
    assert httpx.get(again.url + "/health").status_code == 200
    assert again.stop(5)


# ---- embeddings ----


def test_embeddings_float_and_base64(make_server):
    live = make_server()
    body = live.client.post("/v1/embeddings", json={"model": "alpha", "input": ["red apple", "green pear"]}).json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    first = body["data"][0]["embedding"]
    assert len(first) == 16 and abs(sum(v * v for v in first) - 1) < 1e-6
    assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # the fake engine counts words
    packed = live.client.post(
        "/v1/embeddings", json={"model": "alpha", "input": "red apple", "encoding_format": "base64"}
    ).json()
    import base64
    import struct

    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(first)
