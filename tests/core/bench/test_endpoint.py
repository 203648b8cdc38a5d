"""The endpoint runner against a scripted OpenAI-compatible server (httpx.MockTransport): a server with no
`timings` (decode from the arrival times), picking the model, and its errors in words."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from app.core.bench.driver import BenchCancelled, BenchError
from app.core.bench.endpoint import EndpointRunner, base_url
from app.core.bench.workload import Workload

WORKLOAD = Workload(prompt_lens=[30, 60], gen_len=5, concurrency=[1, 2], runs=2, warmup=0)


def openai_like(models=("m1",), *, status=200, delay=0.004, seen=None):
    """A server that counts 1.5 tokens a word, streams 5 deltas `delay` apart and reports usage, no timings."""

    def handler(request: httpx.Request) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "nope"}})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": m, "owned_by": "someone"} for m in models]})
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404, json={"error": "not found"})
        body = json.loads(request.content)
        if seen is not None:
            seen.append(body)
        words = sum(len(m["content"].split()) for m in body["messages"])
        usage = {"prompt_tokens": 10 + int(1.5 * words), "completion_tokens": body["max_tokens"]}
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [{"message": {"content": "x"}}], "usage": usage})

        def stream():
            for i in range(body["max_tokens"]):
                time.sleep(delay)
                yield f"data: {json.dumps({'choices': [{'delta': {'content': f' t{i}'}}]})}\n\n".encode()
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


def test_a_server_without_timings_is_measured_from_the_client(hearth_home):
    seen: list[dict] = []
    runner = EndpointRunner("http://srv:1/v1/", WORKLOAD, api_key="k", transport=openai_like(seen=seen))
    report = runner.run()
    assert runner.model == "m1" and report.engine.name == "someone" and report.engine.kind == "endpoint"
    assert report.engine.url == "http://srv:1"
    for cell in report.cells:
        assert cell.completed == cell.requests
        assert abs(cell.prompt_tokens - cell.prompt_len) <= 0.2 * cell.prompt_len  # sized by the server's count
        assert cell.output_tokens == 5 and cell.ttft_s and cell.ttft_s.p50 >= 0.003
        # No timings: decode is the arrival rate (deltas ~4 ms apart), prefill the prompt over the TTFT.
        assert cell.decode_tok_s and 20 < cell.decode_tok_s < 260
        assert cell.prefill_tok_s and cell.prefill_tok_s > 0
        assert cell.predicted.decode_tok_s is None  # nothing to predict for someone else's server
    streamed = [b for b in seen if b["stream"]]
    assert streamed and all(b["stream_options"] == {"include_usage": True} and b["max_tokens"] == 5 for b in streamed)


def test_several_models_need_a_choice():
    runner = EndpointRunner("http://srv:1", WORKLOAD, transport=openai_like(models=("a", "b")))
    with pytest.raises(BenchError, match=r"serves 2 models \(a, b\); choose one with --model"):
        runner.run()
    assert EndpointRunner("http://srv:1", WORKLOAD, model="b", transport=openai_like(models=("a", "b"))).run()


def test_a_refused_key_is_named():
    with pytest.raises(BenchError, match="refused the request \\(401\\): check --api-key"):
        EndpointRunner("http://srv:1", WORKLOAD, transport=openai_like(status=401)).run()


def test_cancel_stops_an_endpoint_run():
    cancel = threading.Event()
    runner = EndpointRunner(
        "http://srv:1", WORKLOAD, transport=openai_like(), cancel=cancel, progress=lambda p: cancel.set()
    )
    with pytest.raises(BenchCancelled):
        runner.run()


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://x", "http://", ""])
def test_bad_urls(url):
    with pytest.raises(ValueError, match="is not an http"):
        base_url(url)
