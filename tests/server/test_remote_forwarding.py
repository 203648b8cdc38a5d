"""The local endpoint serving remote models: a request for `remote/model` is forwarded to a second Hearth
on loopback (the remote) and comes back through Hearth's own response code, in the same shapes as a local
model's (the conformance checks of test_openai_fake.py), under the local security."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from app.server.remote_forward import RemotePool
from app.server.security import Policy
from tests.core.engines.remote.upstream import UPSTREAM_KEY, remote_store, upstream_server
from tests.helpers import wait_until
from tests.server.conftest import sse_lines
from tests.server.test_openai_fake import events

REMOTE = "box/alpha"
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture
def forward(make_server, tmp_path):
    """forward(local policy, expose, **upstream engine kwargs) → (local server, upstream); the local
    server's library has alpha and beta, loaded alpha, and forwards box/* to the upstream."""
    made = []

    def make(policy: Policy | None = None, expose: bool = True, read_timeout_s: float = 30.0, **engine_kwargs):
        cm = upstream_server(tmp_path / f"up{len(made)}", **engine_kwargs)
        up = cm.__enter__()
        store = remote_store(tmp_path / f"local{len(made)}")
        store.add(up.url, name="box", api_key=UPSTREAM_KEY, expose_locally=expose, read_timeout_s=read_timeout_s)
        live = make_server(policy=policy, script="local words only")
        live.context.remotes = pool = RemotePool(store)
        made.append((cm, pool))
        return live, up

    yield make
    for cm, pool in made:
        pool.close()
        cm.__exit__(None, None, None)


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, **extra}


def shape(chunks: list) -> list:
    """A stream's chunks with what differs per reply (ids, times, model, the text, rates) blanked."""
    out = []
    for c in chunks:
        if c == "[DONE]":
            out.append(c)
            continue
        c = {**c, "id": "-", "created": 0, "model": "-"}
        for key in ("timings", "usage"):  # their fields, not their numbers (the upstream's cache differs)
            if isinstance(c.get(key), dict):
                c[key] = sorted(c[key])
        c["choices"] = [{**ch, "delta": {k: type(v).__name__ for k, v in ch["delta"].items()}} for ch in c["choices"]]
        out.append(c)
    return out


def stream_events(client: httpx.Client, body: dict) -> list:
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return events(sse_lines(r))


def test_exposed_remote_models_are_listed_with_their_context(forward):
    live, _ = forward(script="x")
    listed = {m["id"]: m for m in live.client.get("/v1/models").json()["data"]}
    assert set(listed) == {"alpha", "beta", "box/alpha", "box/beta"}
    remote = listed["box/alpha"]
    assert remote["context_length"] == 256 and remote["format"] == "remote" and remote["owned_by"] == "box"
    assert remote["remote"] == {"name": "box", "kind": "hearth", "model": "alpha", "reachable": True}
    assert live.client.get("/v1/models/box/beta").json()["context_length"] == 4096


def test_a_remote_not_exposed_is_neither_listed_nor_served(forward):
    live, up = forward(expose=False, script="x")
    assert {m["id"] for m in live.client.get("/v1/models").json()["data"]} == {"alpha", "beta"}
    r = live.client.post("/v1/chat/completions", json=chat(REMOTE))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert "does not expose" in r.json()["error"]["message"] and up.engines[0].generations == []


def test_a_forwarded_stream_has_the_shapes_of_a_local_one(forward):
    live, up = forward(script="one two three")
    body = chat(REMOTE, stream=True, stream_options={"include_usage": True})
    remote = stream_events(live.client, body)
    local = stream_events(live.client, {**body, "model": "alpha"})
    with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {UPSTREAM_KEY}"}) as direct:
        upstream = stream_events(direct, {**body, "model": "alpha"})
    assert shape(remote) == shape(local) == shape(upstream)
    chunks = remote[:-1]
    assert {c["model"] for c in chunks} == {REMOTE} and len({c["id"] for c in chunks}) == 1
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "one two three"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3  # the remote's usage
    # The local model stayed loaded: the remote ran on a host of its own.
    assert live.host.state.model is not None and live.host.state.model.format == "fake"
    assert live.engines[0].loads == 1


def test_a_forwarded_whole_reply_and_the_openai_client(forward):
    live, _ = forward(script="the capital is Paris")
    body = live.client.post("/v1/chat/completions", json=chat(REMOTE)).json()
    assert body["object"] == "chat.completion" and body["model"] == REMOTE
    assert body["choices"][0]["message"]["content"] == "the capital is Paris"
    assert body["usage"]["completion_tokens"] == 4
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    stream = client.chat.completions.create(
        model=REMOTE, messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "the capital is Paris"


def test_reasoning_and_tool_calls_come_through_forwarding(forward):
    call = '{"name":"get_weather","arguments":{"city":"Paris"}}'
    live, _ = forward(script=f"<think> checking the sky </think> <tool_call> {call} </tool_call>")
    got = stream_events(live.client, chat(REMOTE, stream=True, tools=WEATHER))
    deltas = [c["choices"][0]["delta"] for c in got[:-1] if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert reasoning.strip() == "checking the sky"
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"city": "Paris"}
    assert [c["choices"][0]["finish_reason"] for c in got[:-1] if c["choices"]][-1] == "tool_calls"
    whole = live.client.post("/v1/chat/completions", json=chat(REMOTE, tools=WEATHER)).json()["choices"][0]
    assert whole["message"]["reasoning_content"].strip() == "checking the sky"
    assert whole["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_client_that_leaves_frees_the_remote(forward):
    live, up = forward(script=" ".join(["word"] * 400), tok_s=20)
    with live.client.stream("POST", "/v1/chat/completions", json=chat(REMOTE, max_tokens=400, stream=True)) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break
    assert wait_until(lambda: up.host.state.status == "ready", 2)


def test_a_remote_that_goes_away_mid_stream_ends_with_an_api_error_event(forward):
    live, up = forward(script=" ".join(["word"] * 400), tok_s=20)
    lines = []
    with live.client.stream("POST", "/v1/chat/completions", json=chat(REMOTE, max_tokens=400, stream=True)) as r:
        for line in r.iter_lines():
            if line:
                lines.append(line)
            if len(lines) == 3:
                threading.Thread(target=up.stop).start()
    got = events(lines)
    assert "[DONE]" not in got
    error = got[-1]["error"]
    assert set(error) >= {"message", "type", "code"} and error["type"] == "server_error"
    assert "remote box" in error["message"] and "mid-reply" in error["message"]


def test_a_slow_remote_is_an_api_error_after_the_configured_timeout(forward):
    live, _ = forward(read_timeout_s=0.5, prompt_batch=1, prompt_batch_delay_s=5.0)
    t0 = time.monotonic()
    got = stream_events(live.client, chat(REMOTE, stream=True))
    assert time.monotonic() - t0 < 3
    assert "sent nothing for 0.5 s" in got[-1]["error"]["message"]


def test_local_security_applies_and_the_remote_key_stays_out_of_the_log(forward):
    live, up = forward(policy=Policy.of(api_key="local-key"), script="fine")
    with httpx.Client(base_url=live.url) as anonymous:
        assert anonymous.post("/v1/chat/completions", json=chat(REMOTE)).status_code == 401
        # a request with the remote's own key is not let in either: only the local key opens this door
        wrong = anonymous.post(
            "/v1/chat/completions", json=chat(REMOTE), headers={"Authorization": f"Bearer {UPSTREAM_KEY}"}
        )
        assert wrong.status_code == 401
        foreign = anonymous.get("/v1/models", headers={"Host": "evil.example", "Authorization": "Bearer local-key"})
        assert foreign.status_code == 403
    assert up.engines[0].generations == []
    r = live.client.post("/v1/chat/completions", json=chat(REMOTE))
    assert r.status_code == 200 and UPSTREAM_KEY not in r.text and UPSTREAM_KEY not in str(r.headers)
    # the log records a request just after its response went out
    assert wait_until(lambda: any(item.model == REMOTE for item in live.context.log.items()), 2)
    logged = live.context.log.items()
    assert all(UPSTREAM_KEY not in repr(item) for item in logged)
    # and the upstream was asked with the key (it requires one)
    assert len(up.engines[0].generations) == 1


def test_the_api_service_forwards_the_remotes_its_resolver_knows(tmp_path):
    import socket

    from app.core.engines.base import LoadSpec
    from app.core.runtime.engine_host import EngineHost
    from app.core.runtime.resolve import ModelResolver
    from app.core.settings import ServerSettings
    from app.server.service import ApiService
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.server.conftest import fake_library, no_preflight

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with upstream_server(tmp_path / "up", script="via the service") as up:
        store = remote_store(tmp_path)
        store.add(up.url, name="box", api_key=UPSTREAM_KEY, expose_locally=True)
        library = fake_library(tmp_path / "lib")
        resolver = ModelResolver(library, machine=lambda: None, remotes=store)
        host = EngineHost(registry_with_fake(), preflight=no_preflight, resolver=resolver)
        host.load_sync(LoadSpec(path=library.find("alpha").path, n_ctx=64), "fake")
        api = ApiService(host, library, resolver, lambda: ServerSettings(port=port))
        try:
            url = api.start().url
            r = httpx.post(url + "/chat/completions", json=chat(REMOTE), timeout=30)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "via the service"
            assert "box/alpha" in {m["id"] for m in httpx.get(url + "/models").json()["data"]}
        finally:
            api.stop()
            host.shutdown(5)
            library.close()
    assert api._remotes is None  # its remote hosts were shut down with the server


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_remotes_context_is_its_400_before_any_byte(forward, stream):
    live, _ = forward(n_ctx=32, script="x")
    body = {"model": REMOTE, "stream": stream, "messages": [{"role": "user", "content": "word " * 100}]}
    r = live.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "remote box" in r.json()["error"]["message"]


def test_the_agent_routes_and_concurrent_clients_reach_the_remote_too(forward):
    live, _ = forward(script="hello over there", tok_s=5)  # a reply lasts most of a second
    message = live.client.post(
        "/v1/messages", json={"model": REMOTE, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert message.status_code == 200 and message.json()["content"][0]["text"] == "hello over there"
    response = live.client.post("/v1/responses", json={"model": REMOTE, "input": "hi"})
    assert response.status_code == 200 and "hello over there" in json.dumps(response.json())
    # two clients at once: each gets a host of its own (the remote server takes both). The second is sent
    # once the first is streaming, so a slow start of the first (a busy machine) cannot serialise them.
    results: list[int] = []
    hosts = live.context.remotes._hosts

    def first_streaming() -> bool:
        return any(h.state.status == "generating" for h in hosts.get(REMOTE, []))

    with httpx.Client(timeout=30) as client:
        threads = [
            threading.Thread(
                target=lambda: results.append(client.post(live.v1 + "/chat/completions", json=chat(REMOTE)).status_code)
            )
            for _ in range(2)
        ]
        threads[0].start()
        assert wait_until(first_streaming, 10)
        threads[1].start()
        for t in threads:
            t.join()
    assert results == [200, 200]
    assert len(hosts[REMOTE]) == 2
