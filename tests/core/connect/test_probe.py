"""The test request: the right path, headers and body for each route, the reply's text from each API's
shape, each API's error shape read back, and a clear word when nothing listens or nothing answers."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from app.core.connect import probe_route
from app.core.connect.probe import ANTHROPIC_VERSION, MAX_TOKENS, PROMPT

BASE = "http://127.0.0.1:48123/v1"
KEY = "hearth-probe-KEY-7"
MODEL = "odd/model:Q3_K_S"

REPLIES = {
    "/v1/chat/completions": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"}}]},
    "/v1/responses": {
        "object": "response",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "Hi from"}, {"type": "refusal"}]},
            {"type": "message", "content": [{"type": "output_text", "text": " responses"}]},
        ],
    },
    "/v1/messages": {
        "type": "message",
        "content": [{"type": "thinking", "thinking": "…"}, {"type": "text", "text": "Hi from messages"}],
    },
    "/api/chat": {"model": MODEL, "message": {"role": "assistant", "content": "Hi from ollama"}, "done": True},
}


class Recorder:
    """A MockTransport handler that answers each route's shape and keeps the requests it saw."""

    def __init__(self, status: int = 200, body: object | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.status, self.body = status, body

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = self.body if self.body is not None else REPLIES.get(request.url.path, {"detail": "Not Found"})
        return httpx.Response(self.status if request.url.path in REPLIES else 404, json=body)


def probe(route, handler, *, url=BASE, key=KEY):
    return probe_route(url, key, MODEL, route, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    "route, path, text",
    [
        ("chat", "/v1/chat/completions", "Hi there"),
        ("responses", "/v1/responses", "Hi from responses"),
        ("messages", "/v1/messages", "Hi from messages"),
        ("ollama", "/api/chat", "Hi from ollama"),
    ],
)
def test_each_route_sends_its_request_and_reads_its_reply(route, path, text):
    seen = Recorder()
    result = probe(route, seen)
    assert result.ok and result.status == 200 and result.text == text
    (request,) = seen.requests
    assert request.method == "POST" and str(request.url) == "http://127.0.0.1:48123" + path
    body = json.loads(request.content)
    assert body["model"] == MODEL
    if route == "messages":
        assert request.headers["x-api-key"] == KEY and request.headers["anthropic-version"] == ANTHROPIC_VERSION
        assert body == {"model": MODEL, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PROMPT}]}
    elif route == "responses":
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert body == {"model": MODEL, "input": PROMPT, "max_output_tokens": MAX_TOKENS}
    elif route == "ollama":  # one whole reply, not Ollama's default NDJSON stream
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert body == {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": False,
            "options": {"num_predict": MAX_TOKENS},
        }
    else:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert body["max_tokens"] == MAX_TOKENS and body["messages"] == [{"role": "user", "content": PROMPT}]
    assert result.summary().startswith(("Chat Completions: OK", "Responses: OK", "Messages: OK", "Ollama chat: OK"))
    assert f"“{text}”" in result.summary()


def test_the_root_url_works_as_well_as_the_base():
    seen = Recorder()
    assert probe("chat", seen, url="http://127.0.0.1:48123").ok
    assert seen.requests[0].url.path == "/v1/chat/completions"


def test_an_openai_error_shows_its_message():
    error = {"error": {"message": "invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}}
    result = probe("chat", Recorder(401, error))
    assert not result.ok and result.status == 401 and result.text == "invalid API key"
    assert result.summary() == "Chat Completions: 401 — invalid API key"


def test_an_anthropic_error_shows_its_message_and_kind():
    error = {"type": "error", "error": {"type": "not_found_error", "message": "model 'x' does not exist"}}
    result = probe("messages", Recorder(404, error))
    assert not result.ok and result.status == 404
    assert result.text == "model 'x' does not exist (not_found_error)"


def test_an_ollama_error_shows_its_message():
    result = probe("ollama", Recorder(404, {"error": "model 'x' not found"}))
    assert not result.ok and result.status == 404 and result.text == "model 'x' not found"
    assert result.summary() == "Ollama chat: 404 — model 'x' not found"


def test_an_openai_reply_on_the_ollama_route_is_not_ok():
    result = probe("ollama", lambda request: httpx.Response(200, json=REPLIES["/v1/chat/completions"]))
    assert not result.ok and "not in this API's shape" in result.text


def test_a_route_the_server_lacks_says_so():
    result = probe("chat", lambda request: httpx.Response(404, json={"detail": "Not Found"}))
    assert (result.ok, result.status, result.text) == (False, 404, "Not Found")


def test_a_reply_that_is_not_json_shows_the_status_reason():
    result = probe("chat", lambda request: httpx.Response(502, text="<html>bad gateway</html>"))
    assert (result.ok, result.status, result.text) == (False, 502, "Bad Gateway")


def test_a_success_in_the_wrong_shape_is_not_ok():
    result = probe("messages", lambda request: httpx.Response(200, json={"choices": []}))
    assert not result.ok and "not in this API's shape" in result.text


def test_a_long_reply_is_shortened_to_one_line():
    body = {"choices": [{"message": {"content": "word\n" * 200}}]}
    result = probe("chat", lambda request: httpx.Response(200, json=body))
    assert result.ok and "\n" not in result.text and len(result.text) <= 160 and result.text.endswith("…")


def test_no_answer_in_time_is_a_timeout():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    result = probe("responses", slow)
    assert not result.ok and result.status is None and "no answer" in result.text


def test_a_refused_connection_says_nothing_listens():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = probe_route(f"http://127.0.0.1:{port}/v1", KEY, MODEL, "chat")
    assert not result.ok and result.status is None
    assert result.text == f"nothing is listening at http://127.0.0.1:{port}: start the server first"
    assert result.summary().startswith("Chat Completions: failed — nothing is listening")
