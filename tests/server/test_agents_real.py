"""The official `openai` (Responses) and `anthropic` (Messages) clients against the real SmolLM2, loaded
once per session: what Codex CLI and Claude Code rely on, with a real model's tokens, template and
tool calls."""

from __future__ import annotations

import itertools
import json

import anthropic
import openai
import pytest

from tests.server.conftest import SYSTEM_PROMPT

pytestmark = pytest.mark.slow

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def oai(smol_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=smol_server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(smol_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=smol_server.url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(oai) -> str:
    (model,) = oai.models.list().data
    return model.id


# ---- OpenAI Responses ----


def test_responses_whole_and_streamed_agree(oai, model_id):
    ask = {"model": model_id, "instructions": SYSTEM_PROMPT, "input": "What is the capital of France?"}
    whole = oai.responses.create(**ask, temperature=0, max_output_tokens=24)
    assert "Paris" in whole.output_text and whole.status in ("completed", "incomplete")
    assert whole.usage.input_tokens > 10 and whole.usage.output_tokens > 0
    events = list(oai.responses.create(**ask, temperature=0, max_output_tokens=24, stream=True))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] == ("response.completed" if whole.status == "completed" else "response.incomplete")
    seqs = [e.sequence_number for e in events]
    assert all(b > a for a, b in itertools.pairwise(seqs))
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == whole.output_text


def test_responses_forced_function_call_then_its_output(oai, model_id):
    tools = [
        {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER_SCHEMA}
    ]
    first = oai.responses.create(
        model=model_id,
        input="What is the weather in Paris?",
        tools=tools,
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=64,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    assert "city" in json.loads(calls[0].arguments)
    second = oai.responses.create(
        model=model_id,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp_c": 18}'}],
        tools=tools,
        tool_choice="none",
        temperature=0,
        max_output_tokens=32,
    )
    assert [item.type for item in second.output] == ["message"] and second.output_text.strip()


def test_responses_previous_response_id_continues(oai, model_id):
    first = oai.responses.create(
        model=model_id, instructions=SYSTEM_PROMPT, input="My name is Ada.", temperature=0, max_output_tokens=16
    )
    question = "What is my name?"
    alone = oai.responses.create(model=model_id, input=question, temperature=0, max_output_tokens=4)
    second = oai.responses.create(
        model=model_id, previous_response_id=first.id, input=question, temperature=0, max_output_tokens=4
    )
    # The second request carried the first one's turns (its input and its answer) before the question.
    carried = second.usage.input_tokens - alone.usage.input_tokens
    assert first.usage.output_tokens < carried <= first.usage.input_tokens + first.usage.output_tokens
    assert oai.responses.retrieve(first.id).output_text == first.output_text
    assert second.previous_response_id == first.id


def test_responses_json_schema_output_validates(oai, model_id):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    reply = oai.responses.create(
        model=model_id,
        input="Give the capital of France as JSON.",
        text={"format": {"type": "json_schema", "name": "capital", "schema": schema, "strict": True}},
        temperature=0,
        max_output_tokens=48,
    )
    data = json.loads(reply.output_text)
    assert set(data) == {"city", "country"} and all(isinstance(v, str) for v in data.values())


# ---- Anthropic Messages ----


def test_messages_whole_and_streamed_agree(claude, model_id):
    ask = {
        "model": model_id,
        "max_tokens": 24,
        "system": SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": "Name three colours."}],
    }
    whole = claude.messages.create(**ask, extra_body=GREEDY)
    assert whole.content[0].type == "text" and whole.content[0].text
    assert whole.stop_reason in ("end_turn", "max_tokens")
    with claude.messages.stream(**ask, extra_body=GREEDY) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_message()
    raw = [t for t in types if t not in ("text",)]  # the SDK adds "text" events beside the deltas
    assert raw[:2] == ["message_start", "content_block_start"]
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert final.content[0].text == whole.content[0].text and final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_messages_forced_tool_use_streams_json_and_a_tool_result_round_trips(smol_server, claude, model_id):
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER_SCHEMA}]
    ask = {
        "model": model_id,
        "max_tokens": 64,
        "tools": tools,
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    }
    body = {**ask, "stream": True, **GREEDY}
    with smol_server.client.stream("POST", "/v1/messages", json=body) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines]
    (start,) = [e for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"]
    fragments = [
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["index"] == start["index"]
    ]
    assert fragments and "city" in json.loads("".join(fragments))
    assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
    first = claude.messages.create(**ask, extra_body=GREEDY)
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and use.name == "get_weather" and "city" in use.input
    final = claude.messages.create(
        model=model_id,
        max_tokens=32,
        tools=tools,
        messages=[
            *ask["messages"],
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C, sunny"}]},
        ],
        extra_body=GREEDY,
    )
    assert final.content and final.content[0].type in ("text", "tool_use")


def test_count_tokens_equals_what_the_request_reports(claude, model_id):
    prompt = {
        "model": model_id,
        "system": SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": "Count these words please."}],
        "tools": [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER_SCHEMA}],
    }
    counted = claude.messages.count_tokens(**prompt).input_tokens
    used = claude.messages.create(**prompt, max_tokens=1, extra_body=GREEDY).usage
    # Anthropic's input_tokens leaves out what the prompt cache read; together they are the prompt.
    assert counted == used.input_tokens + used.cache_read_input_tokens > 20


def test_an_over_long_prompt_is_anthropics_error(claude, model_id):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=model_id, max_tokens=4, messages=[{"role": "user", "content": "word " * 20_000}])
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "context" in body["error"]["message"]
