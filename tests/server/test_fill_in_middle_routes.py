"""`suffix` (fill in the middle) on Ollama's /api/generate and OpenAI's /v1/completions, over the FakeEngine:
the prompt and suffix reach the engine as one FIM request, through the official client too; a model without
FIM tokens is a 400 naming `suffix` in each route's shape, and the engine stays free."""

from __future__ import annotations

import pytest

ollama = pytest.importorskip("ollama")

# The FakeEngine's FIM prompt is the words of "<fim_prefix> PROMPT <fim_suffix> SUFFIX <fim_middle>".
BEFORE, AFTER = "def add(a, b): return", "print(add(1, 2))"
FIM_WORDS = len(f"<fim_prefix> {BEFORE} <fim_suffix> {AFTER} <fim_middle>".split())


def test_generate_with_a_suffix_sends_one_fim_request(make_server):
    live = make_server(script="a + b")
    reply = ollama.Client(host=live.url).generate(
        "alpha", prompt=BEFORE, suffix=AFTER, system="ignored by FIM", options={"temperature": 0}
    )
    assert reply.response == "a + b" and reply.done_reason == "stop"
    assert reply.prompt_eval_count == FIM_WORDS  # the system prompt is not part of a FIM prompt
    sent = live.engines[0].generations[-1]
    assert (sent.prompt, sent.suffix, sent.messages) == (BEFORE, AFTER, None)


def test_an_empty_suffix_is_a_plain_generate(make_server):
    live = make_server(script="ok")
    live.client.post("/api/generate", json={"model": "alpha", "prompt": "hi", "suffix": "", "stream": False})
    assert live.engines[0].generations[-1].suffix is None


def test_completions_take_a_suffix_too(make_server):
    live = make_server(script="a + b")
    body = {"model": "alpha", "prompt": BEFORE, "suffix": AFTER, "max_tokens": 8, "temperature": 0}
    r = live.client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["text"] == "a + b" and r.json()["usage"]["prompt_tokens"] == FIM_WORDS
    assert live.client.post("/v1/completions", json={**body, "suffix": ""}).json()["usage"]["prompt_tokens"] == len(
        BEFORE.split()
    )


@pytest.mark.parametrize("path", ["/api/generate", "/v1/completions"])
def test_a_model_without_fim_tokens_is_a_400_naming_suffix(make_server, path):
    live = make_server(script="ok", fim=False)
    body = {"model": "alpha", "prompt": BEFORE, "suffix": AFTER, "stream": False}
    r = live.client.post(path, json=body)
    assert r.status_code == 400, r.text[:300]
    if path.startswith("/api/"):
        assert set(r.json()) == {"error"} and "does not support insert" in r.json()["error"]
    else:
        error = r.json()["error"]
        assert error["code"] == "unsupported" and error["param"] == "suffix" and "insert" in error["message"]
    ok = live.client.post(path, json={"model": "alpha", "prompt": "hi", "stream": False})
    assert ok.status_code == 200, ok.text[:300]


def test_show_lists_insert_only_for_a_gguf_that_names_its_fim_tokens(make_server, tmp_path):
    from app.core.library import import_path
    from tests.core.engines.inputs.test_fill_in_middle import FIM_METADATA
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    live = make_server()
    assert "insert" not in ollama.Client(host=live.url).show("alpha").capabilities
    coder = write_tiny_llama_gguf(tmp_path / "coder" / "tiny-coder-F16.gguf", metadata=FIM_METADATA)
    model = import_path(live.context.library, coder).imported[0]
    assert "insert" in ollama.Client(host=live.url).show(model.name).capabilities
