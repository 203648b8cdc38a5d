"""Tool calls and reasoning on the wire (FakeEngine scripts in the Hermes format): streamed tool calls
with index, id, type and name on each call's first delta, `finish_reason: "tool_calls"`, a round trip
with the tool's result, reasoning in `reasoning_content`, and bad tool fields refused before queueing."""

from __future__ import annotations

import json

import openai

from tests.server.conftest import sse_lines
from tests.server.test_openai_fake import events

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = 'Let me check. <tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>'
TWO = (
    '<tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call> '
    '<tool_call> {"name": "get_weather", "arguments": {"city": "Rome"}} </tool_call>'
)
ASK = {"model": "alpha", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}


def test_a_tool_call_non_stream(make_server):
    live = make_server(script=CALL)
    body = live.client.post("/v1/chat/completions", json=ASK).json()
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] == "Let me check."
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    request = live.engines[0].generations[-1]
    assert request.tools == [WEATHER]  # rendered into the prompt (the template's own way, or the fallback)


def test_tool_calls_stream_with_index_id_type_and_name_first(make_server):
    live = make_server(script=TWO)
    with live.client.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}) as r:
        got = events(sse_lines(r))
    chunks = [c for c in got[:-1] if c["choices"]]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    firsts = [tc for tc in calls if "id" in tc]
    assert [tc["index"] for tc in firsts] == [0, 1]
    assert all(tc["id"] and tc["type"] == "function" and tc["function"]["name"] == "get_weather" for tc in firsts)
    assert len({tc["id"] for tc in firsts}) == 2
    args = {i: "".join(tc["function"].get("arguments", "") for tc in calls if tc["index"] == i) for i in (0, 1)}
    assert [json.loads(a)["city"] for a in args.values()] == ["Paris", "Rome"]
    assert all("index" in tc for tc in calls)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" and got[-1] == "[DONE]"


def test_the_openai_sdk_reads_calls_and_a_round_trip_goes_back_to_the_model(make_server):
    live = make_server(script=CALL)
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    reply = client.chat.completions.create(model="alpha", messages=ASK["messages"], tools=[WEATHER])
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    stream = client.chat.completions.create(model="alpha", messages=ASK["messages"], tools=[WEATHER], stream=True)
    names = [
        tc.function.name
        for c in stream
        for tc in (c.choices[0].delta.tool_calls or [])
        if c.choices and tc.function and tc.function.name
    ]
    assert names == ["get_weather"]
    follow = [
        *ASK["messages"],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    live.engines[0].script = "It is 18 degrees and sunny in Paris.".split()
    final = client.chat.completions.create(model="alpha", messages=follow, tools=[WEATHER])
    assert final.choices[0].finish_reason == "stop" and "18 degrees" in final.choices[0].message.content
    sent = live.engines[0].generations[-1].messages
    assert sent[1].tool_calls[0].id == call.id and sent[2].role == "tool" and sent[2].tool_call_id == call.id


def test_one_call_when_parallel_calls_are_off(make_server):
    live = make_server(script=TWO)
    body = live.client.post("/v1/chat/completions", json={**ASK, "parallel_tool_calls": False}).json()
    assert len(body["choices"][0]["message"]["tool_calls"]) == 1
    with live.client.stream(
        "POST", "/v1/chat/completions", json={**ASK, "parallel_tool_calls": False, "stream": True}
    ) as r:
        got = events(sse_lines(r))
    firsts = [
        tc for c in got[:-1] if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls") or [] if "id" in tc
    ]
    assert len(firsts) == 1 and got[-1] == "[DONE]" and got[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_without_tools_call_markup_stays_text_and_tool_choice_none_too(make_server):
    live = make_server(script=CALL)
    plain = {**ASK}
    plain.pop("tools")
    body = live.client.post("/v1/chat/completions", json=plain).json()
    assert body["choices"][0]["finish_reason"] == "stop" and "<tool_call>" in body["choices"][0]["message"]["content"]
    body = live.client.post("/v1/chat/completions", json={**ASK, "tool_choice": "none"}).json()
    assert "tool_calls" not in body["choices"][0]["message"]


def test_reasoning_goes_to_reasoning_content_unless_asked_inline(make_server):
    live = make_server(script="<think> it is in France </think> Paris.")
    msg = live.client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    assert msg["reasoning_content"].strip() == "it is in France" and msg["content"].strip() == "Paris."
    with live.client.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}) as r:
        got = events(sse_lines(r))
    deltas = [c["choices"][0]["delta"] for c in got[:-1] if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas).strip() == "it is in France"
    assert "".join(d.get("content") or "" for d in deltas).strip() == "Paris."
    inline = live.client.post("/v1/chat/completions", json={**ASK, "reasoning_format": "inline"}).json()
    assert "<think>" in inline["choices"][0]["message"]["content"]
    # Clients that send reasoning back with the assistant turn are accepted.
    back = {
        **ASK,
        "messages": [
            *ASK["messages"],
            {"role": "assistant", "content": "Paris.", "reasoning_content": "it is in France"},
            {"role": "user", "content": "And Rome?"},
        ],
    }
    assert live.client.post("/v1/chat/completions", json=back).status_code == 200


def test_bad_tool_fields_are_400_before_anything_runs(make_server):
    live = make_server()
    for bad in (
        {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tool_choice": "sometimes"},
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"tools": [WEATHER, WEATHER]},
    ):
        r = live.client.post("/v1/chat/completions", json={**ASK, **bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert live.engines[0].generations == []
    # The fake engine takes no grammars: a "required" call is only asked for, so nothing conflicts with a
    # response_format (with llama.cpp the two grammars do: tests/server/test_openai_real.py).
    r = live.client.post(
        "/v1/chat/completions", json={**ASK, "tool_choice": "required", "response_format": {"type": "json_object"}}
    )
    assert r.status_code == 200
