"""What a newcomer from Ollama meets first: Ollama's own curl examples (`curl …/api/chat -d '{…}'`, which
curl labels application/x-www-form-urlencoded) answered as Ollama answers them, with every front-door check
still in place; `GET /` and `HEAD /` saying "Ollama is running" without the key, as Ollama's clients probe
it; and `/api/show` naming the model, never the file's path on the user's disk."""

from __future__ import annotations

import json

import httpx
import pytest

from app.server.security import Policy
from tests.helpers import wait_until

FORM = {"Content-Type": "application/x-www-form-urlencoded"}  # what `curl -d` sends
ASK = [{"role": "user", "content": "hi"}]


def _curl(client: httpx.Client, method: str, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return client.request(method, path, content=json.dumps(body).encode(), headers={**FORM, **(headers or {})})


# Ollama's own examples, each as `curl -d` sends it.
EXAMPLES = [
    ("POST", "/api/chat", {"model": "alpha", "messages": ASK, "stream": False}),
    ("POST", "/api/generate", {"model": "alpha", "prompt": "Why is the sky blue?", "stream": False}),
    ("POST", "/api/embed", {"model": "alpha", "input": "Why is the sky blue?"}),
    ("POST", "/api/embeddings", {"model": "alpha", "prompt": "Why is the sky blue?"}),
    ("POST", "/api/show", {"model": "alpha"}),
    ("DELETE", "/api/delete", {"model": "beta"}),
]


@pytest.mark.parametrize(("method", "path", "body"), EXAMPLES, ids=[p for _, p, _ in EXAMPLES])
def test_ollamas_curl_examples_are_read_as_json_whatever_their_content_type(make_server, method, path, body):
    live = make_server(script="Because of Rayleigh scattering")
    r = _curl(live.client, method, path, body)
    assert r.status_code == 200, r.text[:300]
    if path in ("/api/chat", "/api/generate"):
        reply = r.json()
        assert (reply.get("message", {}).get("content") or reply.get("response")) == "Because of Rayleigh scattering"
        # The route's model still reaches the request log (recorded once the response is sent).
        assert wait_until(lambda: any(rec.path == path and rec.model == "alpha" for rec in live.context.log.items()), 5)
    if path == "/api/delete":
        assert [m["name"] for m in live.client.get("/api/tags").json()["models"]] == ["alpha:latest"]
    # A text/plain body, as some other tools send it, is read the same way.
    if method == "POST":
        assert _curl(live.client, method, path, body, {"Content-Type": "text/plain"}).status_code == 200


def test_a_body_that_is_not_json_is_still_an_ollama_shaped_400(make_server):
    live = make_server()
    r = live.client.post("/api/chat", content=b"model=alpha&messages=hi", headers=FORM)
    assert r.status_code == 400 and set(r.json()) == {"error"}
    assert live.engines[0].generations == []


def test_the_front_door_still_guards_a_form_typed_ollama_body(make_server):
    live = make_server(policy=Policy(api_key="hearth-secret"))
    bare = httpx.Client(base_url=live.url)
    body = {"model": "alpha", "messages": ASK, "stream": False}
    assert _curl(bare, "POST", "/api/chat", body).status_code == 401  # no key
    assert _curl(live.client, "POST", "/api/chat", body).status_code == 200  # the key
    # A web page's form post carries its Origin: refused before the body is read, as any foreign origin is.
    page = _curl(live.client, "POST", "/api/chat", body, {"Origin": "https://evil.example"})
    assert page.status_code == 403
    assert _curl(live.client, "POST", "/api/chat", body, {"Host": "evil.example"}).status_code == 403
    huge = live.client.post("/api/chat", content=b"x" * (9 * 1024 * 1024), headers=FORM)
    assert huge.status_code == 413 and set(huge.json()) == {"error"}
    # OpenAI's routes keep asking for JSON's content type, as OpenAI's API does.
    openai = live.client.post(
        "/v1/chat/completions", content=json.dumps({"model": "alpha", "messages": ASK}).encode(), headers=FORM
    )
    assert openai.status_code == 400
    assert live.engines[0].generations and len(live.engines[0].generations) == 1


def test_the_root_says_ollama_is_running_to_a_client_without_the_key(make_server):
    live = make_server(policy=Policy(api_key="hearth-secret"))
    bare = httpx.Client(base_url=live.url)
    r = bare.get("/")
    assert r.status_code == 200 and r.text == "Ollama is running"
    assert r.headers["content-type"].startswith("text/plain")
    head = bare.head("/")
    assert head.status_code == 200 and head.content == b""
    # Open like /health and /api/version: a fixed string. Everything else still needs the key and the Host.
    assert bare.get("/api/tags").status_code == 401
    assert bare.get("/", headers={"Host": "evil.example"}).status_code == 403


def test_show_names_the_model_and_never_its_path_on_disk(make_server, tmp_path):
    live = make_server()
    shown = live.client.post("/api/show", json={"model": "alpha"})
    assert shown.status_code == 200
    assert "FROM alpha:latest" in shown.json()["modelfile"]
    assert str(tmp_path) not in shown.text and ".fake" not in shown.text
    verbose = live.client.post("/api/show", json={"model": "alpha", "verbose": True})
    assert str(tmp_path) not in verbose.text


@pytest.mark.parametrize("stop", [3, True, {"a": 1}])
def test_a_stop_that_is_not_text_is_a_400_naming_it(make_server, stop):
    """Found by the T42 walk: a number for options.stop reached len() in the validator (a 500)."""
    live = make_server()
    body = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "options": {"stop": stop}}
    reply = live.client.post("/api/chat", json=body)
    assert reply.status_code == 400 and "stop" in reply.json()["error"]
