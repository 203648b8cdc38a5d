"""Every tool's configuration parses in its own language and carries the real URL, key, model and context.
The values are unusual on purpose (a port nobody uses, quotes and a space in the model id) so that a
hard-coded default or a missing escape cannot pass."""

from __future__ import annotations

import pytest

from app.core.connect import (
    AGENT_MIN_CONTEXT,
    KEY_PLACEHOLDER,
    MODEL_PLACEHOLDER,
    TOOL_IDS,
    Target,
    UnknownTool,
    connect_snippets,
    context_warning,
    snippet_for,
)
from tests.core.connect.parse import exports, fields, parse, python_call_kwargs, shell_commands, strings

PORT = 48123
ROOT = f"http://127.0.0.1:{PORT}"
BASE = ROOT + "/v1"
KEY = "hearth-Zq9_x-unusual-KEY"
MODEL = 'zz-org/Odd "Model" v2:Q5_K_M'
CTX = 23456


def snippet(tool: str, *, url: str = BASE, key: str = KEY, model: str = MODEL, ctx: int | None = CTX):
    return snippet_for(tool, url, key, model, ctx)


# Copilot's Ollama provider sends no key (its note says so); every other tool carries the key.
KEYLESS = {"vscode-copilot"}


def model_forms(model: str) -> set[str]:
    """The ways a snippet may name `model`: as it is, behind a provider prefix, or with Ollama's tag."""
    return {model, f"openai/{model}", f"hearth/{model}", model if ":" in model else model + ":latest"}


def test_the_tools_are_the_named_ones_in_order():
    assert TOOL_IDS == (
        "codex", "claude-code", "continue", "opencode", "zed", "cline", "aider", "open-webui", "openai-python",
        "anthropic-python", "home-assistant", "vscode-copilot", "open-webui-ollama", "obsidian", "ollama-python",
    )  # fmt: skip
    assert [s.tool for s in connect_snippets(BASE, KEY, MODEL, CTX)] == list(TOOL_IDS)


@pytest.mark.parametrize("tool", TOOL_IDS)
def test_every_part_parses_and_the_snippet_names_the_url_key_and_model(tool):
    s = snippet(tool)
    assert s.parts and s.note and s.routes
    found: set[str] = set()
    for part in s.parts:
        assert part.where and part.title and part.text.strip()
        parse(part)  # raises when the text is not valid in its language
        found |= strings(part)
    assert (KEY not in found) if tool in KEYLESS else (KEY in found), tool
    assert found & model_forms(MODEL), tool
    assert found & {ROOT, BASE}, tool


@pytest.mark.parametrize("tool", TOOL_IDS)
def test_the_root_or_the_base_url_give_the_same_snippet(tool):
    assert snippet(tool, url=ROOT) == snippet(tool, url=BASE + "/") == snippet(tool)


@pytest.mark.parametrize("tool", TOOL_IDS)
def test_with_no_key_and_no_model_placeholders_stand_in(tool):
    s = snippet(tool, key="", model="")
    found = set().union(*(strings(p) for p in s.parts))
    assert (KEY_PLACEHOLDER in found) is (tool not in KEYLESS)
    assert found & model_forms(MODEL_PLACEHOLDER)


def test_codex_uses_responses_through_its_own_provider_and_reads_the_key_from_the_exported_variable():
    s = snippet("codex")
    assert s.routes == ("responses",)
    config = parse(s.part("config.toml"))
    assert config["model"] == MODEL and config["model_context_window"] == CTX
    provider = config["model_providers"][config["model_provider"]]
    assert config["model_provider"] != "openai"  # Codex ignores a redefined built-in provider
    assert provider["base_url"] == BASE and provider["wire_api"] == "responses"
    assert exports(s.part("Shell").text) == {provider["env_key"]: KEY}
    assert "model_context_window" not in parse(snippet("codex", ctx=None).part("config.toml"))


def test_claude_code_gets_the_root_without_v1_and_every_model_alias_is_the_model():
    s = snippet("claude-code")
    assert s.routes == ("messages",)
    env = exports(s.part("Shell").text)
    assert env["ANTHROPIC_BASE_URL"] == ROOT and env["ANTHROPIC_AUTH_TOKEN"] == KEY
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"):
        assert env[name] == MODEL
    assert parse(s.part("settings.json")) == {"env": env}  # the two forms say the same


def test_continue_is_a_whole_config_with_the_context_length():
    config = parse(snippet("continue").part("config.yaml"))
    assert {"name", "version", "schema"} <= set(config) and config["schema"] == "v1"
    (model,) = config["models"]
    assert (model["provider"], model["model"], model["apiBase"], model["apiKey"]) == ("openai", MODEL, BASE, KEY)
    assert model["defaultCompletionOptions"]["contextLength"] == CTX and "chat" in model["roles"]
    assert "defaultCompletionOptions" not in parse(snippet("continue", ctx=None).parts[0])["models"][0]


def test_opencode_declares_an_openai_compatible_provider_with_the_context_limit():
    config = parse(snippet("opencode").parts[0])
    provider = config["provider"]["hearth"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": BASE, "apiKey": KEY}
    limit = provider["models"][MODEL]["limit"]
    assert limit["context"] == CTX and 0 < limit["output"] < CTX
    assert config["model"] == f"hearth/{MODEL}"
    assert "limit" not in parse(snippet("opencode", ctx=None).parts[0])["provider"]["hearth"]["models"][MODEL]


def test_zed_keeps_the_key_out_of_settings_and_names_the_variable_it_derives():
    s = snippet("zed")
    settings = parse(s.part("settings.json"))
    (name, provider), *_ = settings["language_models"]["openai_compatible"].items()
    assert provider["api_url"] == BASE
    assert provider["available_models"][0]["name"] == MODEL and provider["available_models"][0]["max_tokens"] == CTX
    assert KEY not in s.part("settings.json").text
    assert exports(s.part("API key").text) == {f"{name.upper()}_API_KEY": KEY}
    assert parse(snippet("zed", ctx=None).parts[0])["language_models"]["openai_compatible"][name]["available_models"][
        0
    ]["max_tokens"]  # Zed requires one: a fallback, never missing


def test_cline_lists_the_provider_fields_and_their_stored_names():
    s = snippet("cline")
    shown = fields(s.part("Fields").text)
    assert shown == {
        "API Provider": "OpenAI Compatible",
        "Base URL": BASE,
        "API Key": KEY,
        "Model ID": MODEL,
        "Context Window Size": str(CTX),
    }
    stored = parse(s.part("JSON"))
    assert (stored["openAiBaseUrl"], stored["openAiApiKey"], stored["openAiModelId"]) == (BASE, KEY, MODEL)
    assert stored["openAiCustomModelInfo"]["contextWindow"] == CTX


def test_aider_config_metadata_and_env_agree():
    s = snippet("aider")
    conf = parse(s.part(".aider.conf.yml"))
    assert conf == {"openai-api-base": BASE, "openai-api-key": KEY, "model": f"openai/{MODEL}"}
    meta = parse(s.part(".aider.model.metadata.json"))[f"openai/{MODEL}"]
    assert meta["max_input_tokens"] == CTX and meta["litellm_provider"] == "openai"
    shell = s.part("Shell").text
    assert exports(shell) == {"OPENAI_API_BASE": BASE, "OPENAI_API_KEY": KEY}
    assert shell_commands(shell)[-1] == ["aider", "--model", f"openai/{MODEL}"]
    assert [p.title for p in snippet("aider", ctx=None).parts] == [".aider.conf.yml", "Shell"]


def test_open_webui_reaches_the_host_from_docker_and_says_what_that_needs():
    s = snippet("open-webui")
    desktop, linux = (shell_commands(p.text)[0] for p in s.parts)
    assert desktop[:3] == ["docker", "run", "-d"] and desktop[-1].startswith("ghcr.io/open-webui/open-webui")
    assert f"OPENAI_API_BASE_URL=http://host.docker.internal:{PORT}/v1" in desktop
    assert "--add-host=host.docker.internal:host-gateway" in desktop and f"OPENAI_API_KEY={KEY}" in desktop
    assert "--network=host" in linux and f"OPENAI_API_BASE_URL={BASE}" in linux
    assert "LAN mode" in s.note and "127.0.0.1 is the container" in s.note


def test_a_lan_address_is_kept_inside_docker():
    assert Target("http://192.168.1.20:9000/v1").with_host("host.docker.internal").root == "http://192.168.1.20:9000"
    assert Target("http://localhost:9000").with_host("h.internal").base == "http://h.internal:9000/v1"


def test_the_python_clients_get_the_base_or_the_root_their_api_wants():
    s = snippet("openai-python")
    assert s.routes == ("chat", "responses")
    for part in s.parts:
        assert python_call_kwargs(part.text, "OpenAI") == {"base_url": BASE, "api_key": KEY}
    assert python_call_kwargs(s.part("Responses").text, "create")["model"] == MODEL
    a = snippet("anthropic-python")
    assert a.routes == ("messages",)
    assert python_call_kwargs(a.parts[0].text, "Anthropic") == {"base_url": ROOT, "api_key": KEY}
    assert python_call_kwargs(a.parts[0].text, "create")["model"] == MODEL


def test_an_unknown_tool_names_the_tools():
    with pytest.raises(UnknownTool) as err:
        snippet_for("emacs", BASE)
    assert "emacs" in str(err.value) and "codex" in str(err.value) and "anthropic-python" in str(err.value)


def test_the_context_warning_is_for_contexts_below_what_agents_need():
    assert AGENT_MIN_CONTEXT == 32768
    assert context_warning(AGENT_MIN_CONTEXT) == "" and context_warning(131072) == "" and context_warning(None) == ""
    text = context_warning(8192)
    assert "8,192" in text and "32,768" in text and "Claude Code" in text and "Codex" in text
