"""The wire mapping on its own: request bodies per server kind, and stream chunks in the dialects of servers
not run here (vLLM's `reasoning`, tool-call arguments split across chunks, usage without timings)."""

from __future__ import annotations

import httpx
import pytest

from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.core.engines.errors import Unsupported
from app.core.engines.remote.errors import RemoteError, RemoteRefused
from app.core.engines.remote.wire import ReplyDecoder, http_error, request_body, sse_data
from app.core.tools import plan_tools

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_a_chat_request_becomes_a_streamed_openai_body():
    request = GenerateRequest(
        messages=[ChatMessage(role="user", content="hi")],
        sampling=SamplingParams(temperature=0.2, max_tokens=5, stop=["END"], seed=3),
        tools=TOOLS,
        json_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
    )
    path, body = request_body(request, "m", "vllm")
    assert path == "/v1/chat/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (
        "m",
        0.2,
        5,
        ["END"],
        3,
    )
    assert body["tools"] == TOOLS and body["response_format"]["type"] == "json_schema"
    assert body["top_k"] == 40  # vLLM takes llama.cpp's extra samplers ...
    _, strict = request_body(request, "m", "openai-compatible")
    assert "top_k" not in strict and "min_p" not in strict  # ... an unknown server is sent OpenAI's fields only
    path, text = request_body(GenerateRequest(prompt="once"), "m", "tgi")
    assert path == "/v1/completions" and text["prompt"] == "once"
    with pytest.raises(Unsupported):
        request_body(GenerateRequest(prompt="x", grammar="root ::= 'a'"), "m", "vllm")


def test_vllm_style_reasoning_and_split_tool_arguments_become_what_hearths_parser_reads():
    decoder = ReplyDecoder("box")
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"delta": {"reasoning": "think "}}]},
        {"choices": [{"delta": {"reasoning": "hard"}}]},
        {"choices": [{"delta": {"content": "Calling."}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]}}
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 6, "prompt_tokens_details": {"cached_tokens": 4}},
        },
    ]
    text = "".join(decoder.feed(c) for c in chunks) + decoder.close()
    out = plan_tools(TOOLS, "auto").parse(text)
    assert out.reasoning == "think hard" and out.content == "Calling."
    assert [(c.name, c.arguments_dict()) for c in out.tool_calls] == [("f", {"a": 1})]
    stats = decoder.stats(0.0, 0.5, 1.5)
    assert decoder.finish == "stop" and (stats.prompt_tokens, stats.prompt_tokens_evaluated) == (9, 5)
    assert stats.generated_tokens == 6 and stats.decode_tok_s == pytest.approx(5.0)  # measured: 5 tokens in 1 s
    assert stats.time_to_first_token_s == 0.5


def test_a_length_finish_and_an_error_event():
    decoder = ReplyDecoder("box")
    decoder.feed({"choices": [{"delta": {"content": "a"}, "finish_reason": "length"}]})
    assert decoder.finish == "length"
    with pytest.raises(RemoteError, match="remote box failed mid-reply: out of memory"):
        decoder.feed({"error": {"message": "out of memory", "type": "server_error"}})


@pytest.mark.parametrize(
    ("status", "body", "kind", "cls"),
    [
        (401, {"error": "no"}, "engine_error", RemoteRefused),
        (
            400,
            {"error": {"message": "too long", "code": "context_length_exceeded"}},
            "context_length_exceeded",
            RemoteError,
        ),
        (404, {"detail": "no such model"}, "model_not_found", RemoteError),
        (503, {"error": {"message": "overloaded"}}, "busy", RemoteError),
        (422, {"error": {"message": "bad field"}}, "invalid_request", RemoteError),
        (500, {"error": {"message": "boom"}}, "engine_error", RemoteError),
    ],
)
def test_http_refusals_keep_the_remotes_message_and_map_to_the_apis_kinds(status, body, kind, cls):
    error = http_error("box", httpx.Response(status, json=body))
    assert isinstance(error, cls) and error.code == kind and "remote box" in str(error)


def test_sse_lines():
    assert sse_data("data: {}") == "{}" and sse_data("data:[DONE]") == "[DONE]"
    assert sse_data(": ping") is None and sse_data("event: x") is None and sse_data("") is None
