"""probe(): which server is at a URL and what it serves. Another Hearth is probed for real (loopback);
vLLM, SGLang, llama-server, Ollama, LM Studio and TGI are simulated with their documented answers."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from app.core.engines.remote import RemoteError, RemoteRefused, RemoteUnreachable, normalize_url, probe
from tests.core.engines.remote.upstream import UPSTREAM_KEY, upstream_server


def served(routes: dict[str, object], calls: list[str] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if calls is not None:
            calls.append(request.url.path)
        body = routes.get(request.url.path)
        if body is None:
            return httpx.Response(404, json={"error": "not found"})
        if isinstance(body, httpx.Response):
            return body
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


def listing(*models: dict) -> dict:
    return {"object": "list", "data": list(models)}


VLLM = {
    "/v1/models": listing(
        {
            "id": "meta-llama/Llama-3.1-70B-Instruct",
            "object": "model",
            "owned_by": "vllm",
            "root": "x",
            "max_model_len": 32768,
        }
    ),
    "/version": {"version": "0.6.3"},
}
SGLANG = {
    "/v1/models": listing({"id": "Qwen/Qwen2.5-72B-Instruct", "owned_by": "sglang", "max_model_len": 131072}),
    "/get_server_info": {"version": "0.4.1"},
}
LLAMA_SERVER = {
    "/v1/models": listing({"id": "qwen2.5-7b-q4_k_m.gguf", "owned_by": "llamacpp", "meta": {"n_ctx_train": 32768}}),
    "/props": {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1},
}
OLLAMA = {
    "/v1/models": listing({"id": "llama3.2:3b", "owned_by": "library"}),
    "/api/version": {"version": "0.5.7"},
}
LM_STUDIO = {
    "/v1/models": listing({"id": "qwen2.5-7b-instruct", "owned_by": "organization_owner"}),
    "/api/v0/models": {"data": [{"id": "qwen2.5-7b-instruct", "max_context_length": 32768}]},
}
TGI = {
    "/v1/models": listing({"id": "tgi", "owned_by": "tgi"}),
    "/info": {"model_id": "mistralai/Mistral-7B-Instruct-v0.3", "max_total_tokens": 8192, "version": "2.4.0"},
}


@pytest.mark.parametrize(
    ("routes", "kind", "version", "model", "context"),
    [
        (VLLM, "vllm", "0.6.3", "meta-llama/Llama-3.1-70B-Instruct", 32768),
        (SGLANG, "sglang", "0.4.1", "Qwen/Qwen2.5-72B-Instruct", 131072),
        (LLAMA_SERVER, "llama-server", "", "qwen2.5-7b-q4_k_m.gguf", 8192),  # the loaded n_ctx, not n_ctx_train
        (OLLAMA, "ollama", "0.5.7", "llama3.2:3b", None),
        (LM_STUDIO, "lmstudio", "", "qwen2.5-7b-instruct", 32768),
        (TGI, "tgi", "2.4.0", "tgi", 8192),
        ({"/v1/models": listing({"id": "gpt-x", "owned_by": "someone"})}, "openai-compatible", "", "gpt-x", None),
    ],
)
def test_each_server_kind_is_told_apart_with_its_models_and_context(routes, kind, version, model, context):
    result = probe("http://gpu-box:8000/v1", transport=served(routes))
    assert (result.kind, result.version) == (kind, version)
    assert [(m.id, m.context_length) for m in result.models] == [(model, context)]
    assert result.url == "http://gpu-box:8000"


def test_another_hearth_is_probed_for_real_with_its_context_lengths(tmp_path):
    with upstream_server(tmp_path) as up:
        result = probe(up.url, UPSTREAM_KEY)
        with pytest.raises(RemoteRefused, match="refused the API key"):
            probe(up.url, "wrong-key", retries=0)
    assert result.kind == "hearth" and result.kind_name == "Hearth" and result.version
    assert {m.id: m.context_length for m in result.models} == {"alpha": 256, "beta": 4096}


def test_a_server_still_starting_is_retried_with_backoff():
    answers = iter([httpx.Response(503), httpx.Response(502)])
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/v1/models":
            return next(answers, httpx.Response(200, json=listing({"id": "m", "owned_by": "vllm", "root": "m"})))
        return httpx.Response(404)

    t0 = time.monotonic()
    result = probe("http://box", transport=httpx.MockTransport(handle), retries=2, backoff_s=0.05)
    assert result.kind == "vllm" and calls.count("/v1/models") == 3
    assert time.monotonic() - t0 >= 0.05 + 0.1  # waited 0.05 s, then twice that


def test_an_unreachable_remote_is_a_clear_error_not_a_hang():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(RemoteUnreachable, match=r"could not reach http://127.0.0.1:\d+: .*tried 3 times"):
        probe(f"127.0.0.1:{port}", retries=2, backoff_s=0.01, connect_timeout_s=0.5)
    assert time.monotonic() - t0 < 3


def test_a_silent_remote_times_out_on_the_probe():
    with socket.socket() as server:  # accepts, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(RemoteUnreachable, match="did not answer in time"):
            probe(f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01, read_timeout_s=0.2)
        assert time.monotonic() - t0 < 2


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ({}, "no /v1/models"),
        ({"/v1/models": {"hello": 1}}, "not a model list"),
        ({"/v1/models": httpx.Response(200, text="<html>")}, "did not answer JSON"),
    ],
)
def test_something_that_is_not_an_openai_server_says_so(routes, message):
    with pytest.raises(RemoteError, match=message):
        probe("http://box", transport=served(routes), retries=0)


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("http://box:8000/v1", "http://box:8000"),
        ("box:8000", "http://box:8000"),
        ("https://api.example.com/v1/", "https://api.example.com"),
    ],
)
def test_urls_are_normalized(given, base):
    assert normalize_url(given) == base


@pytest.mark.parametrize("bad", ["", "ftp://box", "http://"])
def test_bad_urls_are_refused(bad):
    with pytest.raises(RemoteError):
        normalize_url(bad)
