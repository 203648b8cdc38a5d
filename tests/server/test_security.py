"""The front door (security.md T15–T19): the API key, the Host allowlist, CORS only for exact origins,
loopback only, and malformed requests answered 400/413 in OpenAI's shape, never 500."""

from __future__ import annotations

import json
import socket

import httpx
import openai
import pytest

from app.core.settings import ServerSettings
from app.server.config import policy_for
from app.server.security import Policy, host_name
from tests.helpers import wait_until

KEY = "hearth-test-key-0123456789"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def _error(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# ---- T15: the API key ----


def test_without_the_key_401_and_with_it_the_openai_client_works(make_server):
    live = make_server(policy=Policy.of(api_key=KEY))
    anonymous = httpx.Client(base_url=live.url)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"x-api-key": "nope"}, {"Authorization": KEY}):
        r = anonymous.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert r.status_code == 401
        assert _error(r)["type"] == "authentication_error" and _error(r)["code"] == "invalid_api_key"
    assert anonymous.post("/v1/chat/completions", json=CHAT, headers={"x-api-key": KEY}).status_code == 200
    assert anonymous.get("/health").status_code == 200  # a liveness probe needs no key
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=live.v1, api_key="wrong").models.list()
    client = openai.OpenAI(base_url=live.v1, api_key=KEY)
    assert sorted(m.id for m in client.models.list()) == ["alpha", "beta"]
    reply = client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert reply.choices[0].message.content


def test_refused_requests_are_in_the_request_log(make_server):
    live = make_server(policy=Policy.of(api_key=KEY))
    anonymous = httpx.Client(base_url=live.url)
    anonymous.post("/v1/chat/completions", json=CHAT)
    anonymous.get("/v1/models", headers={"Host": "evil.example", "x-api-key": KEY})
    anonymous.post("/v1/chat/completions", json=CHAT, headers={"x-api-key": KEY})
    assert wait_until(lambda: len(live.context.log.items()) == 3, 5)
    logged = sorted((e.path, e.status) for e in live.context.log.items())
    assert logged == [("/v1/chat/completions", 200), ("/v1/chat/completions", 401), ("/v1/models", 403)]


def test_lan_mode_needs_a_key_and_loopback_may_go_without():
    with pytest.raises(ValueError, match="API key"):
        policy_for(ServerSettings(bind="lan"))
    assert policy_for(ServerSettings(bind="lan", api_key=KEY)).api_key == KEY
    assert policy_for(ServerSettings(api_key=KEY)).api_key == ""  # loopback: the key is optional
    assert policy_for(ServerSettings(api_key=KEY, require_api_key=True)).api_key == KEY


def test_a_container_reaches_the_lan_server_by_dockers_name_and_never_the_loopback_one():
    lan = policy_for(ServerSettings(bind="lan", api_key=KEY))
    assert "host.docker.internal" in lan.allowed_hosts and lan.api_key == KEY
    assert "host.docker.internal" not in policy_for(ServerSettings()).allowed_hosts


# ---- T16: Host ----


@pytest.mark.parametrize("host", ["localhost", "localhost:8487", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:8487"])
def test_loopback_names_are_allowed(make_server, host):
    live = make_server()
    assert live.client.get("/v1/models", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8487", "localhost.evil.example", "127.0.0.2", ""])
def test_other_hosts_and_an_empty_one_are_refused(make_server, host):
    live = make_server()
    r = live.client.get("/v1/models", headers={"Host": host})
    assert r.status_code == 403 and _error(r)["code"] == "host_not_allowed"


def test_host_name_parsing():
    assert [host_name(h) for h in ("LocalHost:80", "[::1]:1", "::1", "a.b")] == ["localhost", "[::1]", "::1", "a.b"]


# ---- T17: CORS ----


def test_a_preflight_from_a_foreign_origin_gets_no_cors_headers(make_server):
    live = make_server()
    r = live.client.options(
        "/v1/chat/completions", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    r = live.client.post("/v1/chat/completions", json=CHAT, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


def test_an_origin_the_user_allowed_gets_exactly_itself_and_no_credentials(make_server):
    origin = "http://localhost:3000"
    live = make_server(policy=Policy.of(cors_origins=[origin]))
    r = live.client.options("/v1/chat/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == origin
    assert "access-control-allow-credentials" not in r.headers
    r = live.client.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    assert live.client.post("/v1/chat/completions", json=CHAT).headers.get("access-control-allow-origin") is None


def test_a_wildcard_origin_cannot_be_configured():
    with pytest.raises(ValueError):
        ServerSettings(cors_origins=["*"])


# ---- T18: loopback ----


def test_the_socket_is_bound_to_loopback_only(make_server):
    live = make_server()
    assert live.runner._socket is not None and live.runner._socket.getsockname()[0] == "127.0.0.1"
    assert ServerSettings().bind == "loopback"
    # Another address of this machine does not reach it (when it has one).
    other = _non_loopback_address()
    if other is not None:
        with pytest.raises(OSError):
            socket.create_connection((other, live.runner.port), timeout=1).close()


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


# ---- T19: malformed requests ----


BAD_BODIES = [
    b"null",
    b'"string"',
    b"[123]",
    b"[{}]",
    b"{}",
    b"{bad json",
    json.dumps({"messages": [{"role": 123, "content": "x"}]}).encode(),
    json.dumps({"messages": [{"role": "user", "content": 123}]}).encode(),
    json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(),
    json.dumps({"messages": []}).encode(),
    json.dumps({**CHAT, "max_tokens": -1}).encode(),
    json.dumps({**CHAT, "max_tokens": 10**9}).encode(),
    json.dumps({**CHAT, "n": 5}).encode(),
    json.dumps({**CHAT, "temperature": 9}).encode(),
    json.dumps({**CHAT, "top_logprobs": 50}).encode(),
    json.dumps({**CHAT, "stop": ["x"] * 100}).encode(),
    json.dumps({**CHAT, "chat_template": "{{ 7*7 }}"}).encode(),
    json.dumps({**CHAT, "chat_template_kwargs": {"chat_template": "x"}}).encode(),
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_malformed_chat_bodies_are_400_in_openai_shape(make_server, body):
    live = make_server()
    r = live.client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert _error(r)["type"] == "invalid_request_error"
    assert live.client.post("/v1/chat/completions", json=CHAT).status_code == 200  # the next request is fine


def test_wrong_content_type_huge_body_and_many_headers(make_server):
    live = make_server()
    r = live.client.post("/v1/chat/completions", content=b"messages=hi", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and _error(r)
    r = live.client.post(
        "/v1/chat/completions", content=b"x" * (20 * 1024 * 1024), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 413 and _error(r)["type"] == "request_too_large"
    many = {f"x-h{i}": "v" for i in range(500)}
    r = live.client.post("/v1/chat/completions", json=CHAT, headers=many)
    assert r.status_code == 400 and _error(r)["code"] == "too_many_headers"

    def chunked():
        for _ in range(20):
            yield b"x" * (1024 * 1024)

    r = live.client.post("/v1/chat/completions", content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert live.client.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_an_unknown_route_and_a_wrong_method_answer_in_openai_shape(make_server):
    live = make_server()
    assert live.client.get("/v1/nothing").status_code == 404 and _error(live.client.get("/v1/nothing"))
    r = live.client.get("/v1/chat/completions")
    assert r.status_code == 405 and _error(r)
