"""The Responses API over the FakeEngine: the response object and the stream's events byte by byte
(order, sequence numbers, ids that stay the same from added to done), items in and out (function and
custom tool calls, reasoning), stored responses and previous_response_id, and the failure paths:
a prompt over the context, a failure mid-stream, an unknown id, items it does not take."""

from __future__ import annotations

import json

import openai
import pytest

from tests.server.conftest import named_events

ASK = {"model": "alpha", "input": "hi", "max_output_tokens": 4}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}
CALL = 'Checking. <tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>'


def test_a_whole_response_has_a_message_with_output_text_and_usage(make_server):
    live = make_server(script="one two three four five")
    r = live.client.post("/v1/responses", json={**ASK, "instructions": "be brief"})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "response" and body["id"].startswith("resp_") and body["model"] == "alpha"
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    (item,) = body["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["id"].startswith("msg_")
    assert item["content"] == [{"type": "output_text", "text": "one two three four", "annotations": [], "logprobs": []}]
    usage = body["usage"]
    assert usage["output_tokens"] == 4 and usage["total_tokens"] == usage["input_tokens"] + 4
    assert "cached_tokens" in usage["input_tokens_details"]
    request = live.engines[0].generations[-1]
    assert [(m.role, m.content) for m in request.messages] == [("system", "be brief"), ("user", "hi")]
    done = live.client.post("/v1/responses", json={**ASK, "max_output_tokens": 10}).json()
    assert done["status"] == "completed" and done["incomplete_details"] is None


def test_the_stream_is_the_documented_event_order_with_rising_sequence_numbers(make_server):
    live = make_server(script="one two three")
    with live.client.stream("POST", "/v1/responses", json={**ASK, "max_output_tokens": 10, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = named_events(r)
    types = [e["type"] for e in got]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    seqs = [e["sequence_number"] for e in got]
    assert seqs == list(range(len(got)))
    item_id = got[2]["item"]["id"]
    deltas = [e for e in got if e["type"] == "response.output_text.delta"]
    assert {e["item_id"] for e in deltas} == {item_id} and {e["output_index"] for e in deltas} == {0}
    assert "".join(e["delta"] for e in deltas) == "one two three"
    completed = got[-1]["response"]
    assert completed["status"] == "completed" and completed["id"] == got[0]["response"]["id"]
    assert completed["output"][0]["id"] == item_id and completed["usage"]["output_tokens"] == 3
    assert got[0]["response"]["status"] == "in_progress" and got[0]["response"]["output"] == []


def test_the_openai_sdk_reads_stream_and_whole_alike(make_server):
    live = make_server(script="the capital is Paris")
    client = openai.OpenAI(base_url=live.v1, api_key="unused", max_retries=0)
    whole = client.responses.create(model="alpha", input="capital?", max_output_tokens=10)
    assert whole.output_text == "the capital is Paris"
    with client.responses.stream(model="alpha", input="capital?", max_output_tokens=10) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == whole.output_text and final.usage.output_tokens == 4


def test_a_function_call_item_then_its_output_goes_back_to_the_model(make_server):
    live = make_server(script=CALL)
    body = live.client.post("/v1/responses", json={**ASK, "tools": [WEATHER], "max_output_tokens": 64}).json()
    message, call = body["output"]
    assert message["type"] == "message" and message["content"][0]["text"].strip() == "Checking."
    assert call["type"] == "function_call" and call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    follow = {
        **ASK,
        "tools": [WEATHER],
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call["call_id"],
                "name": "get_weather",
                "arguments": call["arguments"],
            },
            {"type": "function_call_output", "call_id": call["call_id"], "output": "18 C"},
        ],
    }
    assert live.client.post("/v1/responses", json=follow).status_code == 200
    turns = live.engines[0].generations[-1].messages
    assert [m.role for m in turns] == ["user", "assistant", "tool"]
    assert turns[1].tool_calls[0].id == call["call_id"] and turns[2].tool_call_id == call["call_id"]
    assert turns[2].content == "18 C"


def test_function_call_arguments_stream_under_one_item(make_server):
    live = make_server(script=CALL)
    body = {**ASK, "tools": [WEATHER], "max_output_tokens": 64, "stream": True}
    with live.client.stream("POST", "/v1/responses", json=body) as r:
        got = named_events(r)
    added = [e for e in got if e["type"] == "response.output_item.added"]
    assert [e["item"]["type"] for e in added] == ["message", "function_call"]
    call_item = added[1]["item"]
    assert call_item["arguments"] == "" and call_item["status"] == "in_progress"
    deltas = [e for e in got if e["type"] == "response.function_call_arguments.delta"]
    assert deltas and {e["item_id"] for e in deltas} == {call_item["id"]} and {e["output_index"] for e in deltas} == {1}
    (done,) = [e for e in got if e["type"] == "response.function_call_arguments.done"]
    assert json.loads("".join(e["delta"] for e in deltas)) == json.loads(done["arguments"]) == {"city": "Paris"}
    final = got[-1]["response"]["output"][1]
    assert final["id"] == call_item["id"] and final["call_id"] == call_item["call_id"]


def test_a_custom_tool_is_a_function_of_one_string_and_comes_back_as_custom_tool_call(make_server):
    patch = "*** Begin Patch\\n*** End Patch"
    live = make_server(
        script=f'<tool_call> {{"name": "apply_patch", "arguments": {{"input": "{patch}"}}}} </tool_call>'
    )
    body = live.client.post("/v1/responses", json={**ASK, "tools": [PATCH], "max_output_tokens": 64}).json()
    (call,) = body["output"]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
    assert call["input"] == "*** Begin Patch\n*** End Patch" and call["id"].startswith("ctc_")
    tool = live.engines[0].generations[-1].tools[0]["function"]
    assert tool["name"] == "apply_patch" and tool["parameters"]["required"] == ["input"]
    with live.client.stream(
        "POST", "/v1/responses", json={**ASK, "tools": [PATCH], "max_output_tokens": 64, "stream": True}
    ) as r:
        got = named_events(r)
    (done,) = [e for e in got if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == call["input"]
    back = {
        **ASK,
        "tools": [PATCH],
        "input": [
            {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "call_1", "output": "applied"},
        ],
    }
    # A conversation needs a user turn to answer; with one before, the round trip renders.
    back["input"].insert(0, {"role": "user", "content": "patch it"})
    assert live.client.post("/v1/responses", json=back).status_code == 200
    turns = live.engines[0].generations[-1].messages
    assert json.loads(turns[1].tool_calls[0].arguments) == {"input": "x"} and turns[2].content == "applied"


def test_reasoning_is_its_own_item_before_the_message(make_server):
    live = make_server(script="<think> it is in France </think> Paris.")
    body = live.client.post("/v1/responses", json={**ASK, "max_output_tokens": 20}).json()
    reasoning, message = body["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"][0]["text"].strip() == "it is in France"
    assert message["content"][0]["text"].strip() == "Paris."
    with live.client.stream("POST", "/v1/responses", json={**ASK, "max_output_tokens": 20, "stream": True}) as r:
        got = named_events(r)
    text = "".join(e["delta"] for e in got if e["type"] == "response.reasoning_text.delta")
    assert text.strip() == "it is in France"
    (done,) = [e for e in got if e["type"] == "response.reasoning_text.done"]
    assert done["text"] == text and done["output_index"] == 0


def test_previous_response_id_continues_and_get_delete_answer(make_server):
    live = make_server(script="first answer")
    first = live.client.post("/v1/responses", json={**ASK, "input": "question one", "instructions": "sys"}).json()
    second = live.client.post(
        "/v1/responses", json={**ASK, "input": "question two", "previous_response_id": first["id"]}
    ).json()
    turns = live.engines[0].generations[-1].messages
    # The earlier turns come first; the earlier instructions do not carry over (as OpenAI documents).
    assert [(m.role, m.content) for m in turns] == [
        ("user", "question one"),
        ("assistant", "first answer"),
        ("user", "question two"),
    ]
    assert second["previous_response_id"] == first["id"]
    assert live.client.get(f"/v1/responses/{first['id']}").json() == first
    items = live.client.get(f"/v1/responses/{first['id']}/input_items").json()["data"]
    assert items[0]["content"][0]["text"] == "question one"
    gone = live.client.delete(f"/v1/responses/{first['id']}").json()
    assert gone == {"id": first["id"], "object": "response.deleted", "deleted": True}
    r = live.client.get(f"/v1/responses/{first['id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"
    r = live.client.post("/v1/responses", json={**ASK, "previous_response_id": first["id"]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"
    unstored = live.client.post("/v1/responses", json={**ASK, "store": False}).json()
    assert live.client.get(f"/v1/responses/{unstored['id']}").status_code == 404


def test_json_schema_format_reaches_the_engine(make_server):
    live = make_server(script="{}")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}
    body = live.client.post("/v1/responses", json={**ASK, "text": {"format": fmt}}).json()
    assert live.engines[0].generations[-1].json_schema == schema
    assert body["text"]["format"]["type"] == "json_schema" and body["text"]["format"]["schema"] == schema


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_longer_than_the_context_is_400_before_any_byte(make_server, stream):
    live = make_server(n_ctx=32)
    with live.client.stream("POST", "/v1/responses", json={**ASK, "input": "word " * 100, "stream": stream}) as r:
        raw = r.read()
    assert r.status_code == 400 and not raw.startswith(b"event:")
    assert json.loads(raw)["error"]["code"] == "context_length_exceeded"


def test_a_mid_stream_failure_ends_with_response_failed(make_server):
    live = make_server(raise_on_token=2)
    with live.client.stream("POST", "/v1/responses", json={**ASK, "max_output_tokens": 10, "stream": True}) as r:
        got = named_events(r)
    last = got[-1]
    assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "engine_error"
    assert [e["sequence_number"] for e in got] == list(range(len(got)))


@pytest.mark.parametrize(
    ("item", "code"),
    [
        (
            {"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
            "unsupported_content",
        ),
        ({"type": "item_reference", "id": "msg_1"}, "unsupported_item"),
        ({"type": "function_call_output", "output": "x"}, None),
        ({"type": "message", "role": "robot", "content": "hi"}, None),
    ],
)
def test_items_it_cannot_take_are_400_naming_the_item(make_server, item, code):
    live = make_server()
    r = live.client.post("/v1/responses", json={**ASK, "input": [{"role": "user", "content": "hi"}, item]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"].startswith("input.1") and (code is None or error["code"] == code)


def test_hosted_tools_are_left_out_and_unknown_tool_types_refused(make_server):
    live = make_server(script="ok")
    r = live.client.post("/v1/responses", json={**ASK, "tools": [WEATHER, {"type": "web_search"}]})
    assert r.status_code == 200 and [t["function"]["name"] for t in live.engines[0].generations[-1].tools] == [
        "get_weather"
    ]
    r = live.client.post("/v1/responses", json={**ASK, "tools": [{"type": "teleport"}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_tool"


def test_a_long_string_input_is_text_not_a_list_of_items(make_server):
    live = make_server(script="ok", n_ctx=4096)
    r = live.client.post("/v1/responses", json={**ASK, "input": "long " * 3000})  # 15,000 characters
    assert r.status_code == 200
    r = live.client.post("/v1/responses", json={**ASK, "input": [{"role": "user", "content": "x"}] * 10_001})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


def test_a_namespace_of_tools_is_offered_flat_and_its_calls_go_back_with_the_namespace(make_server):
    inner = {**WEATHER, "name": "close_agent", "strict": False}
    space = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [inner]}
    call = '<tool_call> {"name": "close_agent", "arguments": {"city": "x"}} </tool_call>'
    live = make_server(script=call)
    body = {
        **ASK,
        "tools": [WEATHER, space, {"type": "web_search", "external_web_access": False}],
        "max_output_tokens": 64,
    }
    out = live.client.post("/v1/responses", json=body).json()["output"]
    (item,) = out
    assert item["type"] == "function_call" and item["name"] == "close_agent" and item["namespace"] == "multi_agent_v1"
    offered = [t["function"]["name"] for t in live.engines[0].generations[-1].tools]
    assert offered == ["get_weather", "close_agent"]
    back = {
        **ASK,
        "tools": body["tools"],
        "input": [
            {"role": "user", "content": "close it"},
            {**{k: item[k] for k in ("type", "call_id", "name", "namespace", "arguments")}},
            {"type": "function_call_output", "call_id": item["call_id"], "output": "closed"},
        ],
    }
    assert live.client.post("/v1/responses", json=back).status_code == 200
    assert live.engines[0].generations[-1].messages[1].tool_calls[0].name == "close_agent"


def test_a_namespaced_name_that_collides_is_offered_with_its_namespace(make_server):
    live = make_server(script='<tool_call> {"name": "tools.get_weather", "arguments": {}} </tool_call>')
    space = {"type": "namespace", "name": "tools", "description": "more", "tools": [WEATHER]}
    out = live.client.post("/v1/responses", json={**ASK, "tools": [WEATHER, space], "max_output_tokens": 64}).json()
    offered = [t["function"]["name"] for t in live.engines[0].generations[-1].tools]
    assert offered == ["get_weather", "tools.get_weather"]
    (item,) = out["output"]
    assert (item["name"], item["namespace"]) == ("get_weather", "tools")
