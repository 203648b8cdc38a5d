"""Grammar bombs against a real `hearth serve` in a child process (T38): the schemas that crashed the
process (maxLength 20,000) or froze the engine (a pattern with nested repetition), and the smaller ones that
were 500s, are a 400 `schema_too_complex` naming the field on every route that takes a schema, each in
well under 5 s; afterwards the same process is alive and answers a constrained request."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

from tests.cli.test_serve import _start

HEADERS = {"anthropic-version": "2023-06-01"}
STRING_BOMB = {"type": "string", "maxLength": 20_000}
PATTERN_BOMB = {"type": "string", "pattern": "^((a{1,10}){1,10}){1,10}$"}
SYSTEM = "You are a helpful assistant who answers in English."


def _chat(schema):
    return "/v1/chat/completions", {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }


def _tools(schema):
    return "/v1/chat/completions", {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": schema}}},
            }
        ],
        "tool_choice": "required",
    }


def _responses(schema):
    return "/v1/responses", {
        "model": "m",
        "max_output_tokens": 16,
        "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}},
    }


def _messages(schema):
    return "/v1/messages", {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }


# (request, the field OpenAI's error names; Anthropic's message names it)
CASES = [
    (_chat(STRING_BOMB), "response_format.json_schema.schema.maxLength"),
    (_tools(STRING_BOMB), "tools[0].function.parameters.properties.x.maxLength"),
    (_responses(STRING_BOMB), "text.format.schema.maxLength"),
    (_messages(STRING_BOMB), "output_config.format.schema.maxLength"),
    (_chat(PATTERN_BOMB), "response_format.json_schema.schema.pattern"),
    (_messages(PATTERN_BOMB), "output_config.format.schema.pattern"),
    (_chat({"type": "object", "properties": {"me": {"$ref": "#"}}}), "response_format.json_schema.schema.properties"),
    (_chat({"type": "blob"}), "response_format.json_schema.schema.type"),
    (_responses({"$ref": "https://example.com/s.json"}), "text.format.schema.$ref"),
    # References that loop with nothing between them (a chain or a recursion is fine: a loop names no schema).
    (
        _chat({"$defs": {"d0": {"$ref": "#/$defs/d1"}, "d1": {"$ref": "#/$defs/d0"}}, "$ref": "#/$defs/d0"}),
        "response_format.json_schema.schema.$ref",
    ),
    # Past the checks in the route, refused by llama.cpp's parser on the engine thread (left recursion:
    # a ::= a | null): still a 400.
    (
        _chat({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}),
        "response_format.json_schema.schema",
    ),
]


@pytest.mark.slow
def test_grammar_bombs_are_400s_on_every_route_and_the_server_lives(smollm2_gguf, tmp_path):
    proc, url, _ = _start(["--model", str(smollm2_gguf), "--port", "0"], tmp_path / "home")
    try:
        with httpx.Client(base_url=url, timeout=30, headers=HEADERS) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
            for (path, body), field in CASES:
                body = body | {"model": model}
                began = time.monotonic()
                r = client.post(path, json=body)
                took = time.monotonic() - began
                assert r.status_code == 400, (path, field, r.status_code, r.text[:400])
                assert took < 5.0, (path, field, took)
                error = r.json()["error"]
                if path == "/v1/messages":
                    assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"
                    assert field in error["message"], error
                else:
                    assert error["code"] == "schema_too_complex", error
                    assert error["param"].startswith(field), (error["param"], field)
            assert proc.poll() is None  # alive
            path, body = _chat({"type": "object", "properties": {"city": {"type": "string", "maxLength": 5_000}}})
            body |= {"model": model, "max_tokens": 40, "temperature": 0}
            body["messages"] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Name a city as JSON."},
            ]
            r = client.post(path, json=body)
            assert r.status_code == 200, r.text[:400]
            assert isinstance(json.loads(r.json()["choices"][0]["message"]["content"])["city"], str)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
