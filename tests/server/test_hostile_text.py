"""Small hostile inputs over the FakeEngine (T34, T35): a lone UTF-16 surrogate anywhere in a body, and a prompt
of millions of characters, are a 400 in each API's own shape on every route, before anything queues;
the next request is served as usual."""

from __future__ import annotations

import json
import re

import pytest

from app.core.engines.errors import MAX_PROMPT_CHARS

BAD = "@BAD@"  # becomes \ud800 on the wire: a lone surrogate in the string itself
INNER = "@INNER@"  # becomes \\ud800: the escape inside a JSON text (tool-call arguments)
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
CHAT = {"model": "alpha", "max_tokens": 4}
RESP = {"model": "alpha", "max_output_tokens": 4}
MSG = {"model": "alpha", "max_tokens": 4}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"city": "@INNER@"}'}}
FN = {"type": "function", "function": {"name": "f", "description": "@BAD@", "parameters": {"type": "object"}}}

# (route, body, the field the error names: OpenAI's `param`, or a phrase of Anthropic's message)
CASES = [
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "a@BAD@b"}]}, "messages.0.content"),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "system", "content": "@BAD@"}, {"role": "user", "content": "hi"}]},
        "messages.0.content",
    ),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "@BAD@"}]}]},
        "messages.0.content.0.text",
    ),
    (
        "/v1/chat/completions",
        {
            **CHAT,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            ],
        },
        "messages.1.tool_calls.0.function.arguments",
    ),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": "hi"}], "tools": [FN]},
        "tools.0.function.description",
    ),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": "hi"}], "metadata": {"k@BAD@": "v"}},
        "metadata",
    ),
    ("/v1/completions", {"model": "alpha", "prompt": "@BAD@", "max_tokens": 4}, "prompt"),
    ("/v1/responses", {**RESP, "input": "a@BAD@"}, "input"),
    ("/v1/responses", {**RESP, "input": "hi", "instructions": "@BAD@"}, "instructions"),
    (
        "/v1/responses",
        {
            **RESP,
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": "@INNER@"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
        },
        "input.1.arguments",
    ),
    ("/v1/embeddings", {"model": "alpha", "input": ["fine", "@BAD@"]}, "input.1"),
    ("/v1/messages", {**MSG, "system": "@BAD@", "messages": [{"role": "user", "content": "hi"}]}, "system"),
    (
        "/v1/messages",
        {**MSG, "messages": [{"role": "user", "content": [{"type": "text", "text": "x@BAD@"}]}]},
        "messages.0.content.0.text",
    ),
    (
        "/v1/messages",
        {
            **MSG,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"c": "@BAD@"}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ],
        },
        "messages.1.content.0.input.c",
    ),
    (
        "/v1/messages/count_tokens",
        {"model": "alpha", "messages": [{"role": "user", "content": "@BAD@"}]},
        "messages.0.content",
    ),
]


def wire(body: dict) -> bytes:
    """`body` as JSON text with the placeholders spelled as escapes (httpx cannot encode a lone surrogate)."""
    return json.dumps(body).replace(BAD, "\\ud800").replace(INNER, "\\\\ud800").encode()


def error_of(route: str, r) -> dict:
    """The error, checked to be in the route's own shape: Anthropic's on /v1/messages, OpenAI's elsewhere."""
    body = r.json()
    if route.startswith("/v1/messages"):
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]


def good_request_still_works(live) -> None:
    r = live.client.post("/v1/chat/completions", json={**CHAT, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize(("route", "body", "field"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field(make_server, route, body, field):
    live = make_server(script="ok")
    r = live.client.post(route, content=wire(body), headers=HEADERS)
    assert r.status_code == 400, r.text
    error = error_of(route, r)
    assert "lone UTF-16 surrogate (U+D800)" in error["message"] and field in error["message"]
    if "param" in error:
        assert error["param"] == field
    assert live.engines[0].generations == []  # refused as it was parsed: nothing queued
    good_request_still_works(live)


def test_surrogates_in_utf8_bytes_are_refused_and_other_bad_bytes_too(make_server):
    live = make_server(script="ok")
    cesu = b'{"model": "alpha", "messages": [{"role": "user", "content": "a\xed\xa0\x80b"}]}'
    r = live.client.post("/v1/chat/completions", content=cesu, headers=HEADERS)
    assert r.status_code == 400 and error_of("/v1/chat/completions", r)["param"] == "messages.0.content"
    junk = b'{"model": "alpha", "messages": [{"role": "user", "content": "a\xffb"}]}'
    for route in ("/v1/chat/completions", "/v1/messages"):
        r = live.client.post(route, content=junk, headers=HEADERS)
        assert r.status_code == 400 and error_of(route, r)
    good_request_still_works(live)


def test_a_surrogate_pair_and_an_escaped_backslash_u_are_text(make_server):
    live = make_server(script="ok")
    text = 'emoji \\ud83d\\ude00 and the characters \\\\ud800 in "code"'
    raw = b'{"model": "alpha", "messages": [{"role": "user", "content": "' + text.replace('"', '\\"').encode() + b'"}]}'
    r = live.client.post("/v1/chat/completions", content=raw, headers=HEADERS)
    assert r.status_code == 200, r.text
    assert (
        live.engines[0].generations[-1].messages[0].content == 'emoji \U0001f600 and the characters \\ud800 in "code"'
    )


HUGE = "x" * (MAX_PROMPT_CHARS + 100_000)
HUGE_CASES = [
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": HUGE}]}),
    ("/v1/completions", {"model": "alpha", "prompt": HUGE, "max_tokens": 4}),
    ("/v1/responses", {**RESP, "input": HUGE}),
    ("/v1/messages", {**MSG, "messages": [{"role": "user", "content": HUGE}]}),
    ("/v1/messages/count_tokens", {"model": "alpha", "messages": [{"role": "user", "content": HUGE}]}),
]


HUGE_RUNS = [
    (route, body, stream)
    for route, body in HUGE_CASES
    for stream in (False, True)
    if "count" not in route or not stream
]


@pytest.mark.parametrize(("route", "body", "stream"), HUGE_RUNS, ids=[f"{r}:stream={s}" for r, _, s in HUGE_RUNS])
def test_a_prompt_of_millions_of_characters_is_a_400_before_any_byte(make_server, route, body, stream):
    live = make_server(script="ok")
    body = {**body, "stream": True} if stream else body
    with live.client.stream("POST", route, json=body, headers=HEADERS) as r:
        raw = r.read()
    assert r.status_code == 400 and raw.startswith(b"{"), raw[:200]
    error = error_of(route, r)
    assert re.search(r"2,100,\d{3} characters", error["message"]) and "2,000,000-character cap" in error["message"]
    if "code" in error:
        assert error["code"] == "context_length_exceeded"
    assert live.engines[0].generations == []
    good_request_still_works(live)


def test_an_embeddings_input_over_the_cap_is_a_400_from_the_engine(make_server):
    # Embeddings take many inputs, each its own prompt: the engine caps each one, not the body.
    live = make_server()
    r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": ["short", HUGE]})
    assert r.status_code == 400, r.text
    error = error_of("/v1/embeddings", r)
    assert error["code"] == "context_length_exceeded" and "2,100,000 characters" in error["message"]
    assert live.client.post("/v1/embeddings", json={"model": "alpha", "input": "short"}).status_code == 200


def test_a_conversation_that_grows_past_the_cap_is_a_400_before_the_template_renders(make_server):
    # Each request is under the cap; the stored turns plus the new one are not: the host thread refuses it.
    live = make_server(script="ok", n_ctx=1 << 20)
    half = "y" * (MAX_PROMPT_CHARS // 2 + 50_000)
    first = live.client.post("/v1/responses", json={**RESP, "input": half})
    assert first.status_code == 200
    r = live.client.post("/v1/responses", json={**RESP, "input": half, "previous_response_id": first.json()["id"]})
    assert r.status_code == 400, r.text
    error = error_of("/v1/responses", r)
    assert error["code"] == "context_length_exceeded" and "2,000,000-character cap" in error["message"]
    assert len(live.engines[0].generations) == 1


def test_a_conversation_just_under_the_cap_whose_rendered_prompt_passes_it_is_a_400(make_server):
    # The text is under the cap; the chat template's markup takes the rendered prompt over it.
    live = make_server(script="ok", n_ctx=1 << 22)
    body = {**CHAT, "messages": [{"role": "user", "content": "y" * (MAX_PROMPT_CHARS - 10)}]}
    r = live.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text[:300]
    error = error_of("/v1/chat/completions", r)
    assert error["code"] == "context_length_exceeded" and "once the chat template renders it" in error["message"]
    assert error["param"] == "messages"
    assert live.engines[0].generations == []
    good_request_still_works(live)
