"""The Chat Completions routes' security and load checks, on the agent routes: Host, CORS, the key (as
Bearer and as x-api-key, with both SDKs), a client that leaves, a full queue (503 for Responses, 529
overloaded_error for Messages, each with Retry-After), pings during a long prefill, and the request log."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import openai
import pytest

from app.server.security import Policy
from tests.helpers import wait_until
from tests.server.conftest import sse_lines

KEY = "hearth-agent-key-9876543210"
RESPONSES = ("/v1/responses", {"model": "alpha", "input": "hi", "max_output_tokens": 3})
MESSAGES = ("/v1/messages", {"model": "alpha", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
ROUTES = [RESPONSES, MESSAGES]


def is_anthropic(route: str) -> bool:
    return route.startswith("/v1/messages")


def error_of(route: str, r: httpx.Response) -> tuple[str, str]:
    """(type, message) from either API's error shape, checking the shape is that route's."""
    body = r.json()
    if is_anthropic(route):
        assert set(body) == {"type", "error"} and body["type"] == "error", body
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]["type"], body["error"]["message"]


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_the_key_is_needed_and_taken_as_bearer_or_x_api_key(make_server, route, body):
    live = make_server(policy=Policy.of(api_key=KEY))
    anonymous = httpx.Client(base_url=live.url)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"x-api-key": "nope"}):
        r = anonymous.post(route, json=body, headers=headers)
        assert r.status_code == 401 and error_of(route, r)[0] == "authentication_error"
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        extra = {"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}
        assert anonymous.post(route, json=body, headers={**headers, **extra}).status_code == 200


def test_both_sdks_send_the_key_their_way_and_a_wrong_one_is_refused(make_server):
    live = make_server(policy=Policy.of(api_key=KEY), script="fine")
    claude = anthropic.Anthropic(base_url=live.url, api_key=KEY, max_retries=0)  # x-api-key
    assert claude.messages.create(model="alpha", max_tokens=3, messages=MESSAGES[1]["messages"]).content[0].text
    token = anthropic.Anthropic(base_url=live.url, auth_token=KEY, max_retries=0)  # Bearer, as Claude Code's token
    assert token.messages.count_tokens(model="alpha", messages=MESSAGES[1]["messages"]).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=live.url, api_key="wrong", max_retries=0).messages.create(
            model="alpha", max_tokens=3, messages=MESSAGES[1]["messages"]
        )
    assert openai.OpenAI(base_url=live.v1, api_key=KEY, max_retries=0).responses.create(model="alpha", input="hi").id
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=live.v1, api_key="wrong", max_retries=0).responses.create(model="alpha", input="hi")


@pytest.mark.parametrize(("route", "body"), [*ROUTES, ("/v1/messages/count_tokens", {**MESSAGES[1]})])
def test_a_foreign_host_or_origin_is_refused_in_the_routes_shape(make_server, route, body):
    live = make_server()
    r = live.client.post(route, json=body, headers={"Host": "evil.example"})
    assert r.status_code == 403 and error_of(route, r)[0] == "permission_error"
    r = live.client.post(route, json=body, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_an_allowed_origin_gets_exactly_itself(make_server, route, body):
    origin = "http://localhost:5173"
    live = make_server(policy=Policy.of(cors_origins=[origin]))
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    r = live.client.options(route, headers=preflight)
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == origin
    assert "anthropic-version" in r.headers["access-control-allow-headers"]
    r = live.client.post(route, json=body, headers={"Origin": origin})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    assert live.client.post(route, json=body).headers.get("access-control-allow-origin") is None


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_a_client_that_leaves_mid_stream_frees_the_host(make_server, route, body):
    live = make_server(tok_s=50)
    long = {**body, "stream": True, ("max_tokens" if is_anthropic(route) else "max_output_tokens"): 10_000}
    with live.client.stream("POST", route, json=long) as r:
        for line in r.iter_lines():
            if "_delta" in line and "data:" in line:
                break
    t0 = time.monotonic()
    assert wait_until(lambda: live.host.state.status == "ready", 2)
    assert time.monotonic() - t0 < 0.5
    assert live.client.post(route, json=body).status_code == 200


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_a_client_that_leaves_during_a_long_prefill_frees_the_host(make_server, route, body):
    live = make_server(prompt_batch=1, prompt_batch_delay_s=0.05, n_ctx=4096)
    words = "word " * 400
    slow = (
        {**body, "input": words}
        if not is_anthropic(route)
        else {**body, "messages": [{"role": "user", "content": words}]}
    )
    client = httpx.Client(base_url=live.url, timeout=0.5)
    with pytest.raises(httpx.ReadTimeout):
        client.post(route, json=slow)
    client.close()
    assert wait_until(lambda: live.host.state.status == "ready", 3)
    assert live.client.post(route, json=body).status_code == 200


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_a_full_queue_is_refused_with_retry_after_in_the_routes_shape(make_server, route, body):
    live = make_server(tok_s=40, queue_size=2, script=" ".join(f"w{i}" for i in range(8)))
    results: list[httpx.Response] = []
    lock = threading.Lock()
    limit = "max_tokens" if is_anthropic(route) else "max_output_tokens"

    def call() -> None:
        with httpx.Client(base_url=live.url, timeout=30) as c:
            r = c.post(route, json={**body, limit: 8})
            with lock:
                results.append(r)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(60)
    refused = 529 if is_anthropic(route) else 503
    statuses = sorted(r.status_code for r in results)
    assert statuses.count(200) >= 3 and refused in statuses and set(statuses) <= {200, refused}
    for r in results:
        if r.status_code == refused:
            kind = error_of(route, r)[0]
            assert kind == ("overloaded_error" if is_anthropic(route) else "unavailable_error")
            assert int(r.headers["Retry-After"]) >= 1


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_a_long_prefill_sends_pings_and_the_sdks_read_past_them(make_server, monkeypatch, route, body):
    import app.server.reply_stream as steps

    monkeypatch.setattr(steps, "PING_EVERY_S", 0.05)
    live = make_server(prompt_batch=1, prompt_batch_delay_s=0.02, n_ctx=4096, script="done now")
    words = "word " * 30
    slow = (
        {**body, "input": words}
        if not is_anthropic(route)
        else {**body, "messages": [{"role": "user", "content": words}]}
    )
    with live.client.stream("POST", route, json={**slow, "stream": True}) as r:
        lines = sse_lines(r)
    ping = "event: ping" if is_anthropic(route) else ": ping"
    pings = [i for i, line in enumerate(lines) if line == ping]
    first_text = next(i for i, line in enumerate(lines) if "done" in line and line.startswith("data:"))
    assert len(pings) >= 3 and all(i < first_text for i in pings)
    if is_anthropic(route):
        client = anthropic.Anthropic(base_url=live.url, api_key="x", max_retries=0)
        with client.messages.stream(model="alpha", max_tokens=3, messages=slow["messages"]) as s:
            assert s.get_final_message().content[0].text == "done now"
    else:
        client = openai.OpenAI(base_url=live.v1, api_key="x", max_retries=0)
        with client.responses.stream(model="alpha", input=words, max_output_tokens=3) as s:
            for _ in s:
                pass
            assert s.get_final_response().output_text == "done now"


def test_both_routes_are_in_the_request_log_with_their_usage(make_server):
    live = make_server(script="one two")
    live.client.post(RESPONSES[0], json=RESPONSES[1])
    live.client.post(MESSAGES[0], json={**MESSAGES[1], "stream": True})
    assert wait_until(lambda: len(live.context.log.items()) == 2, 5)
    logged = sorted((e.path, e.status, e.model, e.completion_tokens) for e in live.context.log.items())
    assert logged == [("/v1/messages", 200, "alpha", 2), ("/v1/responses", 200, "alpha", 2)]
    assert all(e.prompt_tokens > 0 for e in live.context.log.items())
