"""The tools that speak only Ollama's API: each one's configuration, read back as that tool reads it, names
the server's root (never /v1), the key where the tool can send one, and the model as the tool must see it
(`NAME:latest` where it picks from /api/tags); the Python script runs against a live server."""

from __future__ import annotations

import pytest

from app.core.connect import KEY_PLACEHOLDER, snippet_for
from app.server.security import Policy
from tests.core.connect.parse import fields, parse, python_call_kwargs, shell_commands
from tests.server.conftest import make_server  # noqa: F401 (the live-server fixture)

PORT = 48123
ROOT = f"http://127.0.0.1:{PORT}"
BASE = ROOT + "/v1"
DOCKER_ROOT = f"http://host.docker.internal:{PORT}"
KEY = "hearth-Zq9_x-unusual-KEY"
MODEL = "zz-org/Odd model v2"  # no tag: Ollama's clients list it as MODEL:latest
CTX = 23456


def snippet(tool: str, *, url: str = BASE, key: str = KEY, model: str = MODEL, ctx: int | None = CTX):
    return snippet_for(tool, url, key, model, ctx)


def test_home_assistant_gets_the_root_the_listed_model_and_a_docker_url():
    s = snippet("home-assistant")
    assert s.routes == ("ollama",) and s.api == "Ollama chat"
    here, docker = (fields(p.text) for p in s.parts)
    assert here == {"URL": ROOT, "API key": KEY, "Model": f"{MODEL}:latest", "Context window size": str(CTX)}
    assert docker == here | {"URL": DOCKER_ROOT}
    assert "LAN mode" in s.note and "host.docker.internal" in s.note and "no /v1" in s.note
    assert "Context window size" not in fields(snippet("home-assistant", ctx=None).parts[0].text)
    # A name with a tag is listed as it is; a LAN address already reaches this computer from a container.
    lan = snippet("home-assistant", url="http://192.168.1.20:9000/v1", model="qwen:Q4_K_M")
    assert [fields(p.text)["URL"] for p in lan.parts] == ["http://192.168.1.20:9000"] * 2
    assert fields(lan.parts[0].text)["Model"] == "qwen:Q4_K_M"


def test_vscode_copilot_sets_its_ollama_endpoint_and_says_it_sends_no_key():
    s = snippet("vscode-copilot")
    assert s.routes == ("ollama", "chat")  # /api/* to find the models, /v1/chat/completions to chat
    assert parse(s.part("settings.json")) == {"github.copilot.chat.byok.ollamaEndpoint": ROOT}
    assert fields(s.part("Model").text) == {"Provider": "Ollama", "Model": f"{MODEL}:latest"}
    assert all(KEY not in p.text and KEY_PLACEHOLDER not in p.text for p in s.parts)
    assert "sends no API key" in s.note


def test_open_webui_ollama_connection_reaches_the_root_from_docker_with_the_key_in_its_form():
    s = snippet("open-webui-ollama")
    desktop, linux = (shell_commands(s.part(t).text)[0] for t in ("Docker", "Linux host network"))
    assert desktop[:3] == ["docker", "run", "-d"] and desktop[-1].startswith("ghcr.io/open-webui/open-webui")
    assert f"OLLAMA_BASE_URL={DOCKER_ROOT}" in desktop and "--add-host=host.docker.internal:host-gateway" in desktop
    assert f"OLLAMA_BASE_URL={ROOT}" in linux and "--network=host" in linux
    assert f"DEFAULT_MODELS={MODEL}:latest" in desktop and f"DEFAULT_MODELS={MODEL}:latest" in linux
    assert not any("OPENAI" in word for word in desktop + linux)  # the Ollama connection, not the OpenAI one
    assert fields(s.part("Connection").text) == {"URL": DOCKER_ROOT, "Key": KEY}
    assert "LAN mode" in s.note


def test_obsidian_plugins_get_the_ollama_base_url_and_the_cors_advice():
    s = snippet("obsidian")
    copilot = fields(s.part("Copilot").text)
    assert copilot == {"Model Name": MODEL, "Provider": "Ollama", "Base URL": ROOT, "API Key": KEY}
    assert fields(s.part("Smart Connections").text) == {"Platform": "Ollama", "Host": ROOT, "Model": f"{MODEL}:latest"}
    assert "app://obsidian.md" in s.note and "CORS" in s.note


def test_the_ollama_python_script_names_the_root_and_sends_the_key_as_a_bearer_header():
    text = snippet("ollama-python").parts[0].text
    assert python_call_kwargs(text, "Client") == {"host": ROOT, "headers": {"Authorization": f"Bearer {KEY}"}}
    assert python_call_kwargs(text, "chat")["model"] == MODEL
    quoted = snippet("ollama-python", key="k'\"\\x", model='m"\\\n').parts[0].text
    assert python_call_kwargs(quoted, "Client")["headers"] == {"Authorization": "Bearer k'\"\\x"}
    assert python_call_kwargs(quoted, "chat")["model"] == 'm"\\\n'


@pytest.mark.parametrize("key_required", [False, True])
def test_the_ollama_python_script_runs_against_the_server(make_server, capsys, key_required):  # noqa: F811
    pytest.importorskip("ollama")
    key = "hearth-ollama-script-key"
    live = make_server(policy=Policy.of(api_key=key) if key_required else None, script="Hello from Hearth")
    text = snippet_for("ollama-python", live.url + "/v1", key if key_required else "", "alpha").parts[0].text
    exec(compile(text, "snippet.py", "exec"), {})  # the user's script, run as it is pasted
    assert capsys.readouterr().out == "Hello from Hearth\n"
