"""logprobs / top_logprobs and logit_bias on the OpenAI routes over the FakeEngine (whose model is greedy and
deterministic): OpenAI's shapes for chat and completions, stream and non-stream agreeing, content tokens
only in chat (not reasoning, not what follows a stop string), and bad values refused in OpenAI's error
shape before any byte is streamed."""

from __future__ import annotations

import math

import openai
import pytest

from tests.fixtures.fake_engine import _token_id
from tests.server.conftest import sse_lines
from tests.server.test_openai_fake import events

ASK = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
SCRIPT = "the kettle sings by the fire"


def chat(live, **body) -> dict:
    r = live.client.post("/v1/chat/completions", json={**ASK, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def chat_stream(live, **body) -> list[dict]:
    with live.client.stream("POST", "/v1/chat/completions", json={**ASK, **body, "stream": True}) as r:
        assert r.status_code == 200
        got = events(sse_lines(r))
    assert got[-1] == "[DONE]"
    return [c["choices"][0] for c in got[:-1] if c["choices"]]


def test_chat_logprobs_have_openai_s_shape_and_cover_the_content(make_server):
    live = make_server(script=SCRIPT)
    choice = chat(live, logprobs=True, top_logprobs=3)
    content = choice["logprobs"]["content"]
    assert choice["logprobs"]["refusal"] is None
    assert "".join(e["token"] for e in content) == choice["message"]["content"] == SCRIPT
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["bytes"] == list(entry["token"].encode()) and entry["logprob"] < 0
        tops = entry["top_logprobs"]
        assert len(tops) == 3 and all(set(t) == {"token", "logprob", "bytes"} for t in tops)
        assert tops[0]["token"] == entry["token"] and tops[0]["logprob"] == entry["logprob"]  # greedy
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        assert sum(math.exp(t["logprob"]) for t in tops) < 1
    plain = chat(live, logprobs=True)
    assert [e["top_logprobs"] for e in plain["logprobs"]["content"]] == [[]] * 6
    assert chat(live)["logprobs"] is None and chat(live, logprobs=False)["logprobs"] is None


def test_chat_stream_carries_each_delta_s_logprobs_and_agrees_with_non_stream(make_server):
    live = make_server(script=SCRIPT)
    whole = chat(live, logprobs=True, top_logprobs=2)["logprobs"]["content"]
    choices = chat_stream(live, logprobs=True, top_logprobs=2)
    assert choices[0]["delta"]["role"] == "assistant" and choices[0]["logprobs"] is None
    assert choices[-1]["finish_reason"] == "stop" and choices[-1]["logprobs"] is None
    streamed = []
    for c in choices:
        if c["delta"].get("content"):
            entries = c["logprobs"]["content"]
            assert "".join(e["token"] for e in entries) == c["delta"]["content"]  # each delta, its own tokens
            streamed += entries
    assert streamed == whole


def test_chat_logprobs_leave_out_reasoning_and_the_stop_string(make_server):
    live = make_server(script="<think> hmm ok </think> answer here STOP more words")
    for choice_logprobs in (
        chat(live, logprobs=True, stop=["STOP"])["logprobs"]["content"],
        [e for c in chat_stream(live, logprobs=True, stop=["STOP"]) if c["logprobs"] for e in c["logprobs"]["content"]],
    ):
        tokens = [e["token"] for e in choice_logprobs]
        # " STOP" is in: its space ends the content. What the stop string cut off is not.
        assert tokens == [" answer", " here", " STOP"]


def test_chat_logprobs_with_a_tool_call_cover_the_content_before_it(make_server):
    from tests.server.test_tools_api import CALL, WEATHER

    live = make_server(script=CALL)
    whole = chat(live, tools=[WEATHER], logprobs=True)
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] == "Let me check."
    assert [e["token"] for e in whole["logprobs"]["content"]] == ["Let", " me", " check."]
    streamed = chat_stream(live, tools=[WEATHER], logprobs=True)
    assert [e for c in streamed if c["logprobs"] for e in c["logprobs"]["content"]] == whole["logprobs"]["content"]
    assert all(c["logprobs"] is None for c in streamed if "tool_calls" in c["delta"])


def test_the_openai_client_reads_chat_logprobs(make_server):
    live = make_server(script=SCRIPT)
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    reply = client.chat.completions.create(model="alpha", messages=ASK["messages"], logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == SCRIPT and all(len(t.top_logprobs) == 2 for t in content)
    chunks = client.chat.completions.create(
        model="alpha", messages=ASK["messages"], logprobs=True, top_logprobs=2, stream=True
    )
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": "maybe"}, "logprobs"),
    ],
)
def test_bad_logprobs_fields_are_400(make_server, body, param):
    live = make_server(script="a")
    r = live.client.post("/v1/chat/completions", json={**ASK, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_completions_logprobs_tokens_offsets_and_top_dicts(make_server):
    live = make_server(script=SCRIPT)
    prompt = "say something"
    body = {"model": "alpha", "prompt": prompt, "max_tokens": 10, "logprobs": 2}
    choice = live.client.post("/v1/completions", json=body).json()["choices"][0]
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == choice["text"] == SCRIPT
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 6
    offsets = [len(prompt) + len("".join(lp["tokens"][:i])) for i in range(6)]
    assert lp["text_offset"] == offsets  # from the start of the prompt, as OpenAI counts
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert top[token] == logprob == max(top.values()) and len(top) == 2  # the greedy token leads its top 2
    with live.client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        pieces = [c["choices"][0] for c in events(sse_lines(r))[:-1]]
    merged = {key: [v for p in pieces if p["logprobs"] for v in p["logprobs"][key]] for key in lp}
    assert merged == lp
    assert all("".join(p["logprobs"]["tokens"]) == p["text"] for p in pieces if p["text"])
    assert pieces[-1]["finish_reason"] == "stop" and pieces[-1]["logprobs"] is None
    zero = live.client.post("/v1/completions", json={**body, "logprobs": 0}).json()["choices"][0]["logprobs"]
    assert [list(top) for top in zero["top_logprobs"]] == [[t] for t in zero["tokens"]]  # only the sampled one
    assert live.client.post("/v1/completions", json={**body, "logprobs": None}).json()["choices"][0]["logprobs"] is None
    assert live.client.post("/v1/completions", json={**body, "logprobs": 6}).status_code == 400


def test_the_openai_client_reads_completion_logprobs(make_server):
    live = make_server(script=SCRIPT)
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    reply = client.completions.create(model="alpha", prompt="go", logprobs=1, max_tokens=3)
    assert reply.choices[0].logprobs.tokens == ["the", " kettle", " sings"]
    assert reply.choices[0].logprobs.text_offset == [2, 5, 12]


def test_logit_bias_bans_and_forces_tokens(make_server):
    live = make_server(script=SCRIPT)
    plain = chat(live, logprobs=True, top_logprobs=2)["logprobs"]["content"]
    runner_up = plain[1]["top_logprobs"][1]["token"]
    banned = chat(live, logit_bias={str(_token_id("kettle")): -100})["message"]["content"]
    assert banned == SCRIPT.replace(" kettle", runner_up) and runner_up != " kettle"
    forced = live.client.post(
        "/v1/completions", json={"model": "alpha", "prompt": "go", "max_tokens": 3, "logit_bias": {"77": 100}}
    ).json()
    assert forced["choices"][0]["text"] == "tok77 tok77 tok77"
    request = live.engines[0].generations[-1]
    assert request.sampling.logit_bias == {77: 100.0}


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("bias", "code"),
    [
        ({"abc": 1}, "invalid_value"),
        ({"-1": 1}, "invalid_value"),
        ({"1.5": 1}, "invalid_value"),
        ({"5": 101}, "invalid_value"),
        ({"5": "high"}, "invalid_value"),
        ({"5": True}, "invalid_value"),
        ({"50000": 1}, "invalid_request"),  # the fake's vocabulary ends at 49999: the engine says so
        ({"99999999999": 1}, "invalid_value"),
    ],
)
def test_bad_logit_bias_is_a_400_naming_logit_bias_before_any_byte(make_server, route, stream, bias, code):
    live = make_server(script="a b")
    body = {"model": "alpha", "logit_bias": bias, "stream": stream}
    body |= {"messages": ASK["messages"]} if route.endswith("chat/completions") else {"prompt": "hi"}
    with live.client.stream("POST", route, json=body) as r:
        raw = r.read()
    assert r.status_code == 400 and not raw.startswith(b"data:")
    error = r.json()["error"]
    assert error["param"] == "logit_bias" and error["code"] == code and error["type"] == "invalid_request_error"
