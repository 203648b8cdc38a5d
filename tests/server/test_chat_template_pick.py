"""A chat template picked for a model (My Models, the chat's Advanced) is saved with the settings, read back
from disk, and applied where the API loads and renders that model: the prompt it evaluates is in the picked
format, and /api/show shows the template it runs with and why. A bad pasted template is refused, clearly,
and nothing is saved."""

from __future__ import annotations

import httpx
import pytest

from app.core.engines.chat_templates.formats import FORMATS
from app.core.library import Library, import_path
from app.core.runtime.chat_templates import TemplateError, TemplatePrefs
from app.core.runtime.resolve import ModelResolver
from app.core.settings import SettingsStore
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread
from tests.core.engines.fixtures import load_llamacpp

pytest.importorskip("gguf", reason="the gguf package writes the tiny GGUF models")

GEMMA_PROMPT = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
CHATML_PROMPT = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_a_saved_pick_is_read_back_from_disk_and_a_bad_template_is_refused(tmp_path, tiny_gguf_f16):
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, tiny_gguf_f16).imported[0]
    store = SettingsStore(tmp_path / "settings.json")
    current = {"settings": store.load()}

    def save(settings):
        store.save(settings)
        current["settings"] = settings

    prefs = TemplatePrefs(lambda: current["settings"], save)
    try:
        assert prefs.picked(model.id) is None
        assert prefs.remember(model.id, "gemma") == "gemma"
        assert SettingsStore(tmp_path / "settings.json").load().chat_templates == {model.id: "gemma"}
        before = (tmp_path / "settings.json").read_text()
        with pytest.raises(TemplateError, match=r"does not render a conversation \(line 1\)"):
            prefs.remember(model.id, "{% for m in messages %}{{ m['content'] }")
        with pytest.raises(TemplateError, match="unsafe"):
            prefs.remember(model.id, "{{ messages[0]['content'] }}{{ cycler.__init__.__globals__ }}")
        assert (tmp_path / "settings.json").read_text() == before  # nothing kept
        pasted = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        assert prefs.remember(model.id, pasted) == pasted
        assert SettingsStore(tmp_path / "settings.json").load().chat_templates[model.id] == pasted
        assert prefs.remember(model.id, "Auto") == "" and prefs.picked(model.id) is None
        assert SettingsStore(tmp_path / "settings.json").load().chat_templates == {}
    finally:
        library.close()


@pytest.fixture
def picked_server(tmp_path, tiny_gguf_f16):
    """The tiny llama (ChatML in its file) in a library, with Gemma's format picked for it and saved; a
    server whose resolver reads the pick from the settings as loaded again from disk."""
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.runtime.engine_host import EngineHost

    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, tiny_gguf_f16).imported[0]
    store = SettingsStore(tmp_path / "settings.json")
    TemplatePrefs(store.load, store.save).remember(model.id, "gemma")
    settings = SettingsStore(tmp_path / "settings.json").load()  # as `hearth serve` reads it on start
    resolver = ModelResolver(library, machine=lambda: None, template_for=lambda m: settings.chat_templates.get(m.id))
    host = EngineHost(default_registry(), resolver=resolver, name="test-template-host")
    context = ServerContext(host, library, resolver)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    client = httpx.Client(base_url=runner.url, timeout=60)
    yield client, model, host
    client.close()
    runner.stop(5)
    host.shutdown(10)
    library.close()


def test_the_api_renders_with_the_picked_template(picked_server, tiny_gguf_f16):
    client, model, host = picked_server
    counter = load_llamacpp(tiny_gguf_f16, n_ctx=256)
    try:
        gemma = len(counter.tokenize(GEMMA_PROMPT, special=True))
        chatml = len(counter.tokenize(CHATML_PROMPT, special=True))
    finally:
        counter.unload()
    assert gemma != chatml
    body = {"model": model.name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["usage"]["prompt_tokens"] == gemma
    ollama = client.post("/api/chat", json={**body, "stream": False, "options": {"num_predict": 2}})
    assert ollama.status_code == 200, ollama.text[:300]
    assert ollama.json()["prompt_eval_count"] == gemma
    loaded = host.state.model
    assert loaded is not None and loaded.extra["chat_template"] == "gemma"
    shown = client.post("/api/show", json={"model": model.name}).json()
    assert shown["template"] == FORMATS["gemma"].source
    assert shown["model_info"]["hearth.chat_template"] == "using Gemma's format, as picked"
