"""Anthropic Messages over the FakeEngine: the message and the stream's events byte by byte, content blocks
in and out (tool_use / tool_result, thinking), stop reasons, usage with cache reads, count_tokens, and
every error in Anthropic's shape (a bad body, a prompt over the context, a failure mid-stream)."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from tests.server.conftest import named_events

HEADERS = {"anthropic-version": "2023-06-01"}
ASK = {"model": "alpha", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = 'Checking. <tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>'


def anthropic_error(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return body["error"]


def test_a_whole_message(make_server):
    live = make_server(script="one two three four five")
    r = live.client.post("/v1/messages", json={**ASK, "system": "be brief"}, headers=HEADERS)
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "message" and body["role"] == "assistant" and body["id"].startswith("msg_")
    assert body["model"] == "alpha" and body["content"] == [{"type": "text", "text": "one two three four"}]
    assert body["stop_reason"] == "max_tokens" and body["stop_sequence"] is None
    usage = body["usage"]
    assert usage["output_tokens"] == 4 and usage["cache_creation_input_tokens"] == 0
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] > 0
    request = live.engines[0].generations[-1]
    assert [(m.role, m.content) for m in request.messages] == [("system", "be brief"), ("user", "hi")]
    done = live.client.post("/v1/messages", json={**ASK, "max_tokens": 10}).json()
    assert done["stop_reason"] == "end_turn"


def test_a_stop_sequence_is_named(make_server):
    live = make_server(script="alpha beta END gamma")
    body = live.client.post("/v1/messages", json={**ASK, "max_tokens": 10, "stop_sequences": ["END"]}).json()
    assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == "END"
    assert body["content"][0]["text"].strip() == "alpha beta"


def test_the_stream_is_the_documented_event_order(make_server):
    live = make_server(script="one two three")
    with live.client.stream("POST", "/v1/messages", json={**ASK, "max_tokens": 10, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = named_events(r)
    types = [e["type"] for e in got]
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[2:-3]) == {"content_block_delta"}
    start = got[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["model"] == "alpha"
    assert got[1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    text = "".join(e["delta"]["text"] for e in got if e["type"] == "content_block_delta")
    assert text == "one two three" and {e["delta"]["type"] for e in got[2:-3]} == {"text_delta"}
    delta = got[-2]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 3


def test_the_anthropic_sdk_reads_stream_and_whole_alike(make_server):
    live = make_server(script="the capital is Paris")
    client = anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0)
    whole = client.messages.create(model="alpha", max_tokens=10, messages=[{"role": "user", "content": "capital?"}])
    with client.messages.stream(model="alpha", max_tokens=10, messages=[{"role": "user", "content": "capital?"}]) as s:
        streamed = s.get_final_message()
    assert whole.content[0].text == streamed.content[0].text == "the capital is Paris"
    assert streamed.usage.output_tokens == 4 and streamed.stop_reason == "end_turn"


def test_tool_use_blocks_then_a_tool_result_round_trip(make_server):
    live = make_server(script=CALL)
    body = live.client.post("/v1/messages", json={**ASK, "max_tokens": 64, "tools": [WEATHER]}).json()
    assert body["stop_reason"] == "tool_use"
    text, use = body["content"]
    assert text["type"] == "text" and text["text"].strip() == "Checking."
    assert use["type"] == "tool_use" and use["id"].startswith("toolu_") and use["input"] == {"city": "Paris"}
    back = {
        **ASK,
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": body["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use["id"], "content": [{"type": "text", "text": "18 C"}]},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    }
    assert live.client.post("/v1/messages", json=back).status_code == 200
    turns = live.engines[0].generations[-1].messages
    assert [m.role for m in turns] == ["user", "assistant", "tool", "user"]
    assert turns[1].tool_calls[0].id == use["id"] and json.loads(turns[1].tool_calls[0].arguments) == {"city": "Paris"}
    assert turns[2].tool_call_id == use["id"] and turns[2].content == "18 C" and turns[2].name == "get_weather"
    back["messages"][2]["content"][0]["is_error"] = True
    live.client.post("/v1/messages", json=back)
    assert live.engines[0].generations[-1].messages[2].content == "Error: 18 C"


def test_tool_use_streams_input_json_deltas_that_join_to_the_input(make_server):
    live = make_server(script=CALL)
    body = {**ASK, "max_tokens": 64, "tools": [WEATHER], "stream": True, "tool_choice": {"type": "any"}}
    with live.client.stream("POST", "/v1/messages", json=body) as r:
        got = named_events(r)
    starts = [e for e in got if e["type"] == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    use = starts[1]
    assert use["index"] == 1 and use["content_block"]["input"] == {} and use["content_block"]["name"] == "get_weather"
    parts = [e["delta"]["partial_json"] for e in got if e["type"] == "content_block_delta" and e["index"] == 1]
    assert parts and json.loads("".join(parts)) == {"city": "Paris"}
    assert got[-2]["delta"]["stop_reason"] == "tool_use"


def test_tool_choice_forms_reach_the_parser(make_server):
    live = make_server(script="ok")
    for choice in ({"type": "auto"}, {"type": "none"}, {"type": "tool", "name": "get_weather"}):
        r = live.client.post("/v1/messages", json={**ASK, "tools": [WEATHER], "tool_choice": choice})
        assert r.status_code == 200, (choice, r.text)
    r = live.client.post(
        "/v1/messages", json={**ASK, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}
    )
    assert r.status_code == 400 and anthropic_error(r)["type"] == "invalid_request_error"


def test_thinking_becomes_a_thinking_block_and_is_not_sent_back(make_server):
    live = make_server(script="<think> it is in France </think> Paris.")
    body = live.client.post(
        "/v1/messages", json={**ASK, "max_tokens": 20, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    ).json()
    thinking, text = body["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"].strip() == "it is in France"
    assert (
        "signature" in thinking and text == {"type": "text", "text": text["text"]} and text["text"].strip() == "Paris."
    )
    with live.client.stream("POST", "/v1/messages", json={**ASK, "max_tokens": 20, "stream": True}) as r:
        got = named_events(r)
    deltas = [e["delta"] for e in got if e["type"] == "content_block_delta" and e["index"] == 0]
    assert {d["type"] for d in deltas} == {"thinking_delta"}
    back = {
        **ASK,
        "messages": [
            ASK["messages"][0],
            {"role": "assistant", "content": body["content"]},
            {"role": "user", "content": "and?"},
        ],
    }
    assert live.client.post("/v1/messages", json=back).status_code == 200
    assert live.engines[0].generations[-1].messages[1].content.strip() == "Paris."


def test_count_tokens_is_what_a_request_reports(make_server):
    live = make_server(script="ok")
    prompt = {
        "model": "alpha",
        "system": "be brief",
        "messages": [{"role": "user", "content": "a b c d e"}],
        "tools": [WEATHER],
    }
    counted = live.client.post("/v1/messages/count_tokens", json=prompt).json()
    used = live.client.post("/v1/messages", json={**prompt, "max_tokens": 1}).json()["usage"]
    assert counted["input_tokens"] == used["input_tokens"] + used["cache_read_input_tokens"] > 5
    again = live.client.post("/v1/messages", json={**prompt, "max_tokens": 1}).json()["usage"]
    assert again["cache_read_input_tokens"] > 0  # the prompt cache, reported as Anthropic does


@pytest.mark.parametrize(
    ("body", "param_hint"),
    [
        ({"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
        ({**ASK, "max_tokens": 0}, "max_tokens"),
        ({**ASK, "messages": []}, "messages"),
        ({**ASK, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
        ({**ASK, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
        (
            {
                **ASK,
                "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "y", "input": {}}]}],
            },
            "tool_use",
        ),
        ({**ASK, "temperature": 3}, "temperature"),
    ],
)
def test_bad_bodies_are_400_in_anthropic_shape(make_server, body, param_hint):
    live = make_server()
    r = live.client.post("/v1/messages", json=body)
    assert r.status_code == 400
    error = anthropic_error(r)
    assert error["type"] == "invalid_request_error" and param_hint in error["message"]


def test_not_json_and_unknown_model_in_anthropic_shape(make_server):
    live = make_server()
    r = live.client.post("/v1/messages", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and anthropic_error(r)["type"] == "invalid_request_error"
    r = live.client.post("/v1/messages", json={**ASK, "model": "gamma"})
    assert r.status_code == 404 and anthropic_error(r)["type"] == "not_found_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_refused_before_any_byte(make_server, stream):
    live = make_server(n_ctx=32)
    body = {**ASK, "stream": stream, "messages": [{"role": "user", "content": "word " * 100}]}
    with live.client.stream("POST", "/v1/messages", json=body) as r:
        raw = r.read()
    assert r.status_code == 400 and not raw.startswith(b"event:")
    error = json.loads(raw)["error"]
    assert error["type"] == "invalid_request_error" and "holds 32" in error["message"]


def test_a_mid_stream_failure_is_an_error_event(make_server):
    live = make_server(raise_on_token=2)
    with live.client.stream("POST", "/v1/messages", json={**ASK, "max_tokens": 10, "stream": True}) as r:
        got = named_events(r)
    assert got[-1]["type"] == "error" and got[-1]["error"]["type"] == "api_error"
    assert "message_stop" not in [e["type"] for e in got]
    client = anthropic.Anthropic(base_url=live.url, api_key="unused", max_retries=0)
    with (
        pytest.raises(anthropic.APIError),
        client.messages.stream(model="alpha", max_tokens=10, messages=ASK["messages"]) as s,
    ):
        s.get_final_message()


def test_system_turns_inside_messages_are_taken_as_claude_code_sends_them(make_server):
    live = make_server(script="ok")
    body = {
        **ASK,
        "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "system", "content": "Agents: explore."},
            {"role": "user", "content": [{"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [{"type": "text", "text": "A reminder."}]},
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"device_id":"x"}'},
    }
    r = live.client.post("/v1/messages?beta=true", json=body, headers={"anthropic-beta": "claude-code-20250219"})
    assert r.status_code == 200, r.text
    turns = [(m.role, m.content) for m in live.engines[0].generations[-1].messages]
    # The leading system text is one turn (templates want one system message first); a later one stays.
    assert turns == [("system", "You are an agent.\n\nAgents: explore."), ("user", "Say hi"), ("system", "A reminder.")]
