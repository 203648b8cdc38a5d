"""The Ollama route's test request against a live server over the FakeEngine: the reply's text, the key
it carries, and Ollama's own error shape for a model the server does not have or a wrong key."""

from __future__ import annotations

import socket

from app.core.connect import probe_route
from app.server.security import Policy
from tests.server.conftest import make_server  # noqa: F401 (the live-server fixture)

KEY = "hearth-probe-live-key"


def test_the_ollama_route_reads_the_reply_and_sends_one_whole_request(make_server):  # noqa: F811
    live = make_server(policy=Policy.of(api_key=KEY), script="Hi from the fake engine")
    result = probe_route(live.url + "/v1", KEY, "alpha", "ollama")
    assert (result.ok, result.status, result.text) == (True, 200, "Hi from the fake engine")
    assert result.summary().startswith("Ollama chat: OK — “Hi from the fake engine”")
    # The tagged name Ollama's clients list is the same model.
    assert probe_route(live.url, KEY, "alpha:latest", "ollama").ok


def test_a_model_the_server_lacks_and_a_wrong_key_are_ollama_shaped_failures(make_server):  # noqa: F811
    live = make_server(policy=Policy.of(api_key=KEY))
    raw = live.client.post("/api/chat", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert raw.status_code == 404 and set(raw.json()) == {"error"}  # Ollama's shape: a bare string
    missing = probe_route(live.url, KEY, "nope", "ollama")
    assert (missing.ok, missing.status, missing.text) == (False, 404, raw.json()["error"])
    assert "'nope'" in missing.text and missing.summary() == f"Ollama chat: 404 — {missing.text}"
    wrong = probe_route(live.url, "not-the-key", "alpha", "ollama")
    assert not wrong.ok and wrong.status == 401 and wrong.text


def test_with_the_server_down_nothing_listens():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = probe_route(f"http://127.0.0.1:{port}", KEY, "alpha", "ollama")
    assert (result.ok, result.status) == (False, None)
    assert (
        result.summary()
        == f"Ollama chat: failed — nothing is listening at http://127.0.0.1:{port}: start the server first"
    )
