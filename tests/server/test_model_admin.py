"""Models loaded and unloaded over HTTP in llama-server's router shape (GET /models, POST /models/load,
POST /models/unload), behind the same front door as every route."""

from __future__ import annotations

from app.server.security import Policy
from tests.helpers import wait_until


def _statuses(live) -> dict[str, str]:
    r = live.client.get("/models")
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "list"
    return {m["id"]: m["status"]["value"] for m in r.json()["data"]}


def test_models_list_each_library_model_with_its_status(make_server):
    live = make_server(load="alpha")
    assert _statuses(live) == {"alpha": "loaded", "beta": "unloaded"}


def test_load_adds_beside_the_loaded_model_and_unload_frees_it(make_server):
    live = make_server(load="alpha")
    r = live.client.post("/models/load", json={"model": "beta"})
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    assert _statuses(live) == {"alpha": "loaded", "beta": "loaded"}
    assert live.client.post("/models/load", json={"model": "beta"}).json() == {"success": True}  # already loaded
    assert live.engines[-1].loads == 1
    # An API load does not take the chat's focus: what names no model still runs on alpha.
    assert live.host.state.model is not None and live.host.state.model.path.name.startswith("alpha")
    reply = live.client.post(
        "/v1/chat/completions", json={"model": "beta", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert reply.status_code == 200, reply.text
    r = live.client.post("/models/unload", json={"model": "beta"})
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    assert _statuses(live) == {"alpha": "loaded", "beta": "unloaded"}
    assert live.client.post("/models/unload", json={"model": "alpha"}).status_code == 200
    assert live.host.state.model is None


def test_the_status_says_memory_time_to_live_and_pin(make_server):
    live = make_server(load="alpha", idle_ttl_s=600)
    r = live.client.post("/models/load", json={"model": "beta", "ttl": 30, "pin": False})
    assert r.status_code == 200, r.text
    data = {m["id"]: m["status"] for m in live.client.get("/models").json()["data"]}
    assert data["alpha"]["ttl_s"] == 600 and data["alpha"]["pinned"] is False
    assert data["beta"]["ttl_s"] == 30 and 0 < data["beta"]["idle_left_s"] <= 30
    assert data["beta"]["context_length"] == 4096 and data["beta"]["memory_bytes"] == 0  # the fake plans nothing
    # Loaded already: the keep changes, nothing reloads.
    assert live.client.post("/models/load", json={"model": "beta", "pin": True}).status_code == 200
    beta = {m["id"]: m["status"] for m in live.client.get("/models").json()["data"]}["beta"]
    assert beta["pinned"] is True and beta["ttl_s"] is None and beta["idle_left_s"] is None
    assert live.client.post("/models/load", json={"model": "alpha", "ttl": -1}).status_code == 200
    alpha = {m["id"]: m["status"] for m in live.client.get("/models").json()["data"]}["alpha"]
    assert alpha["ttl_s"] is None and alpha["pinned"] is False
    assert sum(e.loads for e in live.engines) == 2


def test_a_request_ttl_unloads_its_model_when_idle(make_server):
    live = make_server(load="alpha")
    reply = live.client.post(
        "/v1/chat/completions", json={"model": "beta", "ttl": 0, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert reply.status_code == 200, reply.text
    wait_until(lambda: _statuses(live) == {"alpha": "loaded", "beta": "unloaded"}, 5)
    r = live.client.post("/v1/embeddings", json={"model": "beta", "ttl": -2, "input": "hi"})
    assert r.status_code == 400


def test_bad_requests_are_4xx_naming_the_model(make_server):
    live = make_server(load="alpha")
    r = live.client.post("/models/load", json={"model": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = live.client.post("/models/unload", json={"model": "beta"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_loaded"
    for body in ({}, {"model": ""}, {"model": "alpha", "ttl": -2}, {"model": "alpha", "keep": 1}):
        r = live.client.post("/models/load", json=body)
        assert r.status_code == 400, (body, r.text)
    assert _statuses(live)["alpha"] == "loaded"  # nothing changed


def test_the_admin_routes_need_the_key(make_server):
    live = make_server(policy=Policy(api_key="k" * 32))
    live.client.headers.pop("Authorization")
    assert live.client.get("/models").status_code == 401
    assert live.client.post("/models/unload", json={"model": "alpha"}).status_code == 401
    assert live.host.state.model is not None


def test_lm_studio_load_applies_its_options_and_unload_takes_the_instance_id(make_server):
    live = make_server(load="alpha")
    r = live.client.post(
        "/api/v1/models/load",
        json={"model": "beta", "context_length": 512, "flash_attention": True, "echo_load_config": True},
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["type"] == "llm" and answer["status"] == "loaded" and answer["instance_id"] == "beta"
    assert answer["load_time_seconds"] >= 0
    assert answer["load_config"]["context_length"] == 512 and answer["load_config"]["flash_attention"] is True
    [beta] = [r for r in live.host.residents() if r.name.startswith("beta")]
    assert beta.state.model is not None and beta.state.model.n_ctx == 512
    assert _statuses(live) == {"alpha": "loaded", "beta": "loaded"}
    r = live.client.post("/api/v1/models/unload", json={"instance_id": "beta"})
    assert r.status_code == 200 and r.json() == {"instance_id": "beta"}, r.text
    assert _statuses(live) == {"alpha": "loaded", "beta": "unloaded"}
    r = live.client.post("/api/v1/models/unload", json={"instance_id": "beta"})
    assert r.status_code == 400
    r = live.client.post("/api/v1/models/load", json={"model": "beta", "context_length": 4})
    assert r.status_code == 400 and _statuses(live)["beta"] == "unloaded"  # under the smallest context
