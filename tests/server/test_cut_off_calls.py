"""A reply that reaches the token limit inside a second tool call (issue 34's repro, over the FakeEngine): on
every route the whole first call goes out, the unfinished one never reaches the text, and the stop reason
says the limit, not a tool call."""

from __future__ import annotations

import json

from tests.server.conftest import named_events, sse_lines
from tests.server.test_tools_api import CALL, WEATHER

CUT = CALL + " " + CALL  # 10 words a call: the second is cut off at 14 tokens
LIMIT = 14
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def test_chat_completions_says_length_and_keeps_only_the_whole_call(make_server):
    live = make_server(script=CUT)
    body = {"model": "alpha", "messages": ASK, "tools": [WEATHER], "max_tokens": LIMIT}
    whole = live.client.post("/v1/chat/completions", json=body).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length" and whole["usage"]["completion_tokens"] == LIMIT
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert "tool_call" not in (choice["message"]["content"] or "")
    with live.client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in sse_lines(r) if line.startswith("data: {")]
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert deltas[-1]["finish_reason"] == "length"
    assert "tool_call" not in "".join(d["delta"].get("content") or "" for d in deltas)
    starts = [d["delta"]["tool_calls"][0] for d in deltas if d["delta"].get("tool_calls")]
    assert [c["function"]["name"] for c in starts if c.get("id")] == ["get_weather"]  # one call began, whole


def test_messages_says_max_tokens(make_server):
    live = make_server(script=CUT)
    tool = {"name": "get_weather", "description": "Weather", "input_schema": WEATHER["function"]["parameters"]}
    body = {"model": "alpha", "messages": ASK, "tools": [tool], "max_tokens": LIMIT}
    whole = live.client.post("/v1/messages", json=body).json()
    assert whole["stop_reason"] == "max_tokens"
    assert [b["name"] for b in whole["content"] if b["type"] == "tool_use"] == ["get_weather"]
    assert all("tool_call" not in b.get("text", "") for b in whole["content"])
    with live.client.stream("POST", "/v1/messages", json={**body, "stream": True}) as r:
        events = named_events(r)
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens"
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert "tool_call" not in text


def test_responses_is_incomplete_without_a_stray_message(make_server):
    live = make_server(script=CUT)
    tool = {"type": "function", **WEATHER["function"]}
    body = {"model": "alpha", "input": "Weather in Paris?", "tools": [tool], "max_output_tokens": LIMIT}
    whole = live.client.post("/v1/responses", json=body).json()
    assert whole["status"] == "incomplete"
    texts = [p["text"] for item in whole["output"] if item["type"] == "message" for p in item["content"]]
    assert all("tool_call" not in t for t in texts)
    assert [item["name"] for item in whole["output"] if item["type"] == "function_call"] == ["get_weather"]
