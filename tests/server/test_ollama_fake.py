"""Ollama's routes over the FakeEngine: the wire format of every field, through the official `ollama`
client where it reads them and raw httpx where the bytes matter."""

from __future__ import annotations

import json

import pytest

ollama = pytest.importorskip("ollama")


def client(live):
    return ollama.Client(host=live.url)


def test_version_tags_and_show(make_server):
    live = make_server()
    c = client(live)
    assert tuple(int(x) for x in c._client.get("/api/version").json()["version"].split(".")) >= (0, 6, 4)
    names = [m.model for m in c.list().models]
    assert sorted(names) == ["alpha:latest", "beta:latest"]
    shown = c.show("alpha")
    assert "completion" in shown.capabilities and "tools" in shown.capabilities
    assert c.show("alpha:latest").details.format


def test_chat_whole_and_streamed_agree(make_server):
    live = make_server(script="Hello there from the fake engine")
    c = client(live)
    whole = c.chat("alpha", messages=[{"role": "user", "content": "hi"}], stream=False, options={"temperature": 0})
    assert whole.message.content == "Hello there from the fake engine"
    assert whole.done and whole.done_reason == "stop"
    assert whole.eval_count > 0 and whole.prompt_eval_count > 0 and whole.total_duration > 0
    parts = list(c.chat("alpha:latest", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done and parts[-1].done_reason == "stop"


def test_generate_and_raw_ndjson(make_server):
    live = make_server(script="one two three")
    r = live.client.post("/api/generate", json={"model": "alpha", "prompt": "count", "options": {"num_predict": 2}})
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert all("response" in x for x in lines) and lines[-1]["done"] is True
    assert lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 2


def test_errors_are_ollama_shaped(make_server):
    live = make_server()
    r = live.client.post("/api/chat", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and set(r.json()) == {"error"}
    r = live.client.post("/api/chat", json={"model": "alpha", "messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and "messages" in r.json()["error"]
    with pytest.raises(ollama.ResponseError) as err:
        client(live).chat("nope", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 404
