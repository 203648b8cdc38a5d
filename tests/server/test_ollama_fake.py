"""Ollama's routes over the FakeEngine: the wire format of every field, through the official `ollama`
client where it reads them and raw httpx where the bytes matter."""

from __future__ import annotations

import json

import pytest

from tests.server.test_tools_api import CALL, WEATHER

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


ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_has_object_arguments_and_the_result_goes_back(make_server, stream):
    live = make_server(script=CALL)
    c = client(live)
    if stream:
        parts = list(c.chat("alpha", messages=ASK, tools=[WEATHER], stream=True))
        calls = [tc for p in parts for tc in p.message.tool_calls or []]
        text = "".join(p.message.content or "" for p in parts)
    else:
        reply = c.chat("alpha", messages=ASK, tools=[WEATHER])
        calls, text = list(reply.message.tool_calls or []), reply.message.content
    assert [(tc.function.name, dict(tc.function.arguments)) for tc in calls] == [("get_weather", {"city": "Paris"})]
    assert "tool_call" not in text
    live.engines[0].script = "It is 18 degrees in Paris.".split()
    asked = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    follow = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [asked]},
        {"role": "tool", "content": "18 degrees", "tool_name": "get_weather"},
    ]
    final = c.chat("alpha", messages=follow, tools=[WEATHER])
    assert "18 degrees" in final.message.content and final.done_reason == "stop"
    sent = live.engines[0].generations[-1].messages
    assert sent[1].tool_calls[0].arguments == '{"city": "Paris"}'
    assert sent[2].role == "tool" and sent[2].tool_call_id == sent[1].tool_calls[0].id


def test_a_call_cut_off_by_the_token_limit_is_dropped_and_says_length(make_server):
    live = make_server(script=CALL + " " + CALL)  # a second call, cut off by num_predict
    for stream in (False, True):
        body = {"model": "alpha", "messages": ASK, "tools": [WEATHER], "stream": stream, "options": {"num_predict": 12}}
        r = live.client.post("/api/chat", json=body)
        lines = [json.loads(x) for x in r.text.splitlines()]
        assert lines[-1]["done_reason"] == "length", lines[-1]
        calls = [c for x in lines for c in x["message"].get("tool_calls") or []]
        assert [c["function"]["arguments"] for c in calls] == [{"city": "Paris"}]  # the whole first call only
        assert "tool_call" not in "".join(x["message"]["content"] for x in lines)


def test_thinking_is_split_unless_think_is_false(make_server):
    live = make_server(script="<think> it is in France </think> Paris.")
    c = client(live)
    reply = c.chat("alpha", messages=[{"role": "user", "content": "Where is Paris?"}], think=True)
    assert reply.message.thinking.strip() == "it is in France" and reply.message.content.strip() == "Paris."
    quiet = c.chat("alpha", messages=[{"role": "user", "content": "Where is Paris?"}], think=False)
    assert not quiet.message.thinking and quiet.message.content.strip() == "Paris."
    streamed = list(c.generate("alpha", "Where is Paris?", think=True, stream=True))
    assert "".join(p.thinking or "" for p in streamed).strip() == "it is in France"


def test_format_schema_reaches_the_engine(make_server):
    live = make_server(script='{"city": "Paris"}')
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    reply = client(live).chat("alpha", messages=ASK, format=schema)
    assert json.loads(reply.message.content) == {"city": "Paris"}
    assert live.engines[0].generations[-1].json_schema == schema
    client(live).generate("alpha", "x", format="json")
    assert live.engines[0].generations[-1].json_schema == {"type": "object"}


def test_options_become_sampling(make_server):
    live = make_server(script="ok")
    options = {"temperature": 0.3, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "repeat_penalty": 1.2, "seed": 5,
               "num_predict": 3, "stop": ["END"], "num_gpu": 99, "mirostat": 2}  # fmt: skip
    client(live).chat("alpha", messages=ASK, options=options)
    s = live.engines[0].generations[-1].sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.seed, s.max_tokens, s.stop) == (
        0.3, 0.5, 7, 0.1, 1.2, 5, 3, ["END"],
    )  # fmt: skip
    bad = live.client.post("/api/chat", json={"model": "alpha", "messages": ASK, "options": {"temperature": "hot"}})
    assert bad.status_code == 400 and "temperature" in bad.json()["error"]


def test_keep_alive_zero_unloads_after_the_reply_and_ps_lists_what_is_loaded(make_server):
    live = make_server(script="ok", load=None)
    c = client(live)
    c.chat("beta", messages=ASK, keep_alive="10m")
    (running,) = c.ps().models
    assert running.model == "beta:latest" and running.context_length > 0 and running.expires_at is not None
    c.chat("beta", messages=ASK, keep_alive=0)
    assert wait(lambda: not c.ps().models)
    forever = c.generate("alpha", "", keep_alive=-1)  # nothing to generate: Ollama's way to load a model
    assert forever.done and forever.done_reason == "load"
    assert [m.model for m in c.ps().models] == ["alpha:latest"] and c.ps().models[0].expires_at.year > 2200
    gone = c.generate("alpha", "", keep_alive=0)
    assert gone.done_reason == "unload" and not c.ps().models


def test_embed_with_dimensions_and_the_legacy_route(make_server):
    live = make_server()
    c = client(live)
    out = c.embed("alpha", ["red apple", "green pear"])
    assert len(out.embeddings) == 2 and len(out.embeddings[0]) == 16 and out.prompt_eval_count > 0
    short = c.embed("alpha", "red apple", dimensions=4).embeddings[0]
    assert len(short) == 4 and abs(sum(v * v for v in short) - 1) < 1e-6
    legacy = live.client.post("/api/embeddings", json={"model": "alpha", "prompt": "red apple"}).json()
    assert legacy["embedding"] == out.embeddings[0]
    empty = live.client.post("/api/embed", json={"model": "alpha", "input": ["a", ""]})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]


def test_delete_forgets_the_model(make_server):
    live = make_server()
    c = client(live)
    c.delete("beta")
    assert [m.model for m in c.list().models] == ["alpha:latest"]
    with pytest.raises(ollama.ResponseError) as err:
        c.delete("beta")
    assert err.value.status_code == 404


def test_what_hearth_does_not_do_is_refused_clearly(make_server):
    live = make_server()
    for path in ("/api/copy", "/api/create", "/api/push"):
        r = live.client.post(path, json={"model": "alpha", "source": "alpha", "destination": "x"})
        assert r.status_code == 501 and r.json()["error"]
    template = live.client.post("/api/generate", json={"model": "alpha", "prompt": "x", "template": "{{ .Prompt }}"})
    assert template.status_code == 400 and "template" in template.json()["error"]
    assert live.engines[0].generations == []  # nothing reached the engine
    image = live.client.post("/api/chat", json={"model": "alpha", "messages": [{**ASK[0], "images": ["aGk="]}]})
    assert image.status_code == 400 and "vision" in image.json()["error"]  # a text model: refused before it runs


def test_a_larger_num_ctx_reloads_the_model_with_it(make_server):
    live = make_server(script="ok", n_ctx=256)
    client(live).chat("alpha", messages=ASK, options={"num_ctx": 1024})
    assert live.host.residents()[0].state.model.n_ctx == 1024
    client(live).chat("alpha", messages=ASK, options={"num_ctx": 512})  # less than loaded: used as it is
    assert live.host.residents()[0].state.model.n_ctx == 1024


def test_a_client_that_leaves_frees_the_host_and_the_log_shows_the_route(make_server):
    live = make_server(tok_s=50)
    body = {"model": "alpha", "messages": ASK, "options": {"num_predict": 10_000}}
    with live.client.stream("POST", "/api/chat", json=body) as r:
        for line in r.iter_lines():
            if json.loads(line)["message"]["content"]:
                break
    assert wait(lambda: live.host.state.status == "ready", 2)
    assert wait(lambda: any(rec.path == "/api/chat" for rec in live.context.log.items()), 5)


def wait(predicate, timeout: float = 5.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_the_front_door_guards_ollama_routes_and_answers_in_their_shape(make_server):
    from app.server.security import Policy

    live = make_server(policy=Policy(api_key="hearth-secret"))
    bare = __import__("httpx").Client(base_url=live.url)
    assert bare.get("/api/version").status_code == 200  # open, like /health: only the version
    refused = bare.post("/api/chat", json={"model": "alpha", "messages": ASK})
    assert refused.status_code == 401 and set(refused.json()) == {"error"}
    keyed = ollama.Client(host=live.url, headers={"Authorization": "Bearer hearth-secret"})
    assert [m.model for m in keyed.list().models]
    foreign = bare.get("/api/tags", headers={"Host": "evil.example"})
    assert foreign.status_code == 403


def test_an_unknown_path_names_the_routes(make_server):
    live = make_server()
    for path in ("/api/nothing", "/v1/nothing"):
        r = live.client.get(path)
        assert r.status_code == 404
        text = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
        assert "/v1/chat/completions" in text and "/api/chat" in text


def test_openai_embeddings_refuse_empty_input_and_shorten_to_dimensions(make_server):
    live = make_server()
    for bad in ("", ["a", ""]):
        r = live.client.post("/v1/embeddings", json={"model": "alpha", "input": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    full = live.client.post("/v1/embeddings", json={"model": "alpha", "input": "red apple"}).json()
    short = live.client.post("/v1/embeddings", json={"model": "alpha", "input": "red apple", "dimensions": 4}).json()
    vector = short["data"][0]["embedding"]
    assert len(vector) == 4 and abs(sum(v * v for v in vector) - 1) < 1e-6
    assert len(full["data"][0]["embedding"]) == 16
    over = live.client.post("/v1/embeddings", json={"model": "alpha", "input": "red apple", "dimensions": 99})
    assert over.status_code == 400 and "16" in over.json()["error"]["message"]


def test_tool_choice_is_taken_as_an_extension(make_server):
    live = make_server(script=CALL)
    body = {"model": "alpha", "messages": ASK, "tools": [WEATHER], "stream": False}
    bad = live.client.post(
        "/api/chat", json={**body, "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    )
    assert bad.status_code == 400 and "nope" in bad.json()["error"]
    forced = live.client.post("/api/chat", json={**body, "tool_choice": "required"})
    assert forced.status_code == 200 and forced.json()["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_the_tagged_and_hub_names_reach_the_model_on_every_route(make_server):
    """What /api/tags lists (NAME:latest) works on the OpenAI routes too: VS Code Copilot lists models there
    and chats on /v1/chat/completions."""
    live = make_server(script="ok")
    for name in ("alpha:latest", "alpha"):
        r = live.client.post("/v1/chat/completions", json={"model": name, "messages": ASK, "max_tokens": 2})
        assert r.status_code == 200, r.text
    r = live.client.post("/v1/chat/completions", json={"model": "gamma:latest", "messages": ASK})
    assert r.status_code == 404


def test_a_missing_model_points_to_the_ollama_listing(make_server):
    live = make_server()
    r = live.client.post("/api/chat", json={"model": "gamma", "messages": ASK})
    assert r.status_code == 404 and "/api/tags" in r.json()["error"] and "/v1/models" not in r.json()["error"]


def test_num_predict_zero_is_a_clear_400(make_server):
    live = make_server()
    r = live.client.post("/api/chat", json={"model": "alpha", "messages": ASK, "options": {"num_predict": 0}})
    assert r.status_code == 400 and "num_predict" in r.json()["error"]
