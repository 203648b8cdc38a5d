"""Models loaded and unloaded over HTTP in llama-server's router shape (GET /models, POST /models/load,
POST /models/unload), behind the same front door as every route."""

from __future__ import annotations

from app.server.security import Policy


def _statuses(live) -> dict[str, str]:
    r = live.client.get("/models")
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "list"
    return {m["id"]: m["status"]["value"] for m in r.json()["data"]}


def test_models_list_each_library_model_with_its_status(make_server):
    live = make_server(load="alpha")
    assert _statuses(live) == {"alpha": "loaded", "beta": "unloaded"}


def test_load_swaps_the_model_and_unload_frees_it(make_server):
    live = make_server(load="alpha")
    r = live.client.post("/models/load", json={"model": "beta"})
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    assert _statuses(live) == {"alpha": "unloaded", "beta": "loaded"}
    assert live.client.post("/models/load", json={"model": "beta"}).json() == {"success": True}  # already loaded
    reply = live.client.post(
        "/v1/chat/completions", json={"model": "beta", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert reply.status_code == 200, reply.text
    r = live.client.post("/models/unload", json={"model": "beta"})
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    assert _statuses(live) == {"alpha": "unloaded", "beta": "unloaded"}
    assert live.host.state.model is None


def test_bad_requests_are_4xx_naming_the_model(make_server):
    live = make_server(load="alpha")
    r = live.client.post("/models/load", json={"model": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = live.client.post("/models/unload", json={"model": "beta"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_loaded"
    for body in ({}, {"model": ""}, {"model": "alpha", "ttl": 5}):
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
    assert live.host.state.model.n_ctx == 512
    assert _statuses(live)["beta"] == "loaded"
    r = live.client.post("/api/v1/models/unload", json={"instance_id": "beta"})
    assert r.status_code == 200 and r.json() == {"instance_id": "beta"}, r.text
    assert live.host.state.model is None
    r = live.client.post("/api/v1/models/unload", json={"instance_id": "beta"})
    assert r.status_code == 400
    r = live.client.post("/api/v1/models/load", json={"model": "alpha", "context_length": 4})
    assert r.status_code == 400 and live.host.state.model is None  # under the smallest context: nothing loaded
