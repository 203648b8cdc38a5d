"""Embeddings requests that would hold the engine (T40), over the FakeEngine: each bound is a 4xx in OpenAI's shape
naming `input`, nothing is embedded and the next request is served; a client that leaves stops the work
within about one input's time."""

from __future__ import annotations

import time

import httpx
import pytest

from app.core.engines.inputs.embed_limits import (
    EMBED_INPUT_COST,
    MAX_EMBED_CHARS,
    MAX_EMBED_INPUTS,
    MAX_EMBED_TOKENS,
    MAX_EMBED_WORK,
)

N_CTX = 256  # the fake model's context: an input's most words

# (inputs, status, error type, code)
BOUNDS = {
    "too many inputs": (["x"] * (MAX_EMBED_INPUTS + 1), 400, "invalid_request_error", "invalid_value"),
    "all inputs over the characters": (
        ["z" * (MAX_EMBED_CHARS // 2 + 1)] * 2,
        413,
        "request_too_large",
        "request_too_large",
    ),
    "one input over the context": (
        ["fine"] * 3 + ["w " * (N_CTX + 1)],
        400,
        "invalid_request_error",
        "context_length_exceeded",
    ),
    "all inputs over the work (tokens and a cost per input)": (
        ["w " * N_CTX] * (MAX_EMBED_WORK // (N_CTX + EMBED_INPUT_COST) + 1),
        413,
        "request_too_large",
        "request_too_large",
    ),
    "an empty input": (["fine", " "], 400, "invalid_request_error", "invalid_request"),
}


@pytest.mark.parametrize("texts, status, type_, code", BOUNDS.values(), ids=BOUNDS.keys())
def test_each_embeddings_bound_is_a_4xx_naming_input_and_the_engine_stays_free(make_server, texts, status, type_, code):
    live = make_server(n_ctx=N_CTX)
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": texts})
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "input" and error["type"] == type_ and error["code"] == code, error
    assert live.engines[0].embedded == 0
    ok = live.client.post("/v1/embeddings", json={"model": "alpha", "input": ["warm fire", "cold river"]})
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2


def test_a_request_at_the_token_cap_is_served(make_server):
    live = make_server(n_ctx=N_CTX)
    texts = ["w " * N_CTX] * (MAX_EMBED_TOKENS // N_CTX)
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": texts})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["usage"]["prompt_tokens"] == len(texts) * N_CTX > MAX_EMBED_TOKENS - N_CTX


def test_a_client_that_leaves_stops_the_embedding_work(make_server):
    live = make_server(embed_delay_s=0.05)
    texts = [f"input number {i}" for i in range(200)]  # 10 s of engine time uncancelled
    client = httpx.Client(base_url=live.url, timeout=0.5)
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/embeddings", json={"model": "alpha", "input": texts})
    client.close()
    engine = live.engines[0]
    t0 = time.monotonic()
    # Queued behind the one that was left: answered only once that one stopped.
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": "warm fire"})
    assert r.status_code == 200
    assert time.monotonic() - t0 < 2.0
    stopped_at = engine.embedded
    assert stopped_at < 100  # about 0.5 s of the 10 s: one poll (0.1 s) and one input (0.05 s) past the leaving
    time.sleep(0.3)
    assert engine.embedded == stopped_at
