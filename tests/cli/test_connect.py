"""`hearth connect` as a user runs it: the tool list, one tool's configuration on stdout (parts on their own
with --part) naming the library's model, its context, the settings' port and key; clear errors, exit 2."""

from __future__ import annotations

import json
import tomllib

import pytest

from app.core.connect import KEY_PLACEHOLDER, TOOL_IDS
from app.core.library import ModelFile, open_library
from app.core.paths import app_paths
from app.core.runtime.resolve import ModelResolver
from app.core.settings import ServerSettings, Settings, SettingsStore
from tests.cli.helpers import hearth, isolated_env
from tests.core.connect.parse import exports

NOWHERE = "http://127.0.0.1:9"  # the Hub: never asked
PORT = 48111
KEY = "hearth-cli-Unusual_key-42"


@pytest.fixture
def env(tmp_path, hearth_home):
    return isolated_env(tmp_path, NOWHERE, home=hearth_home)


@pytest.fixture
def tiny_model(tmp_path, hearth_home):
    """A real (tiny) GGUF in the library, trained for an unusual context, and the context it loads with."""
    pytest.importorskip("gguf")
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    path = write_tiny_llama_gguf(tmp_path / "odd-tiny-Q8.gguf", n_ctx=3000)
    library = open_library()
    try:
        model = library.add(name="odd-tiny-Q8", format="gguf", path=path, files=[ModelFile(path, path.stat().st_size)])
        context = ModelResolver(library, max_context=ServerSettings().jit_context).context_length(model)
    finally:
        library.close()
    return model.name, context


def save_server(**fields) -> None:
    SettingsStore(app_paths().settings_file).save(Settings(server=ServerSettings(**fields)))


def test_with_no_tool_or_list_it_lists_the_tools(env):
    for args in ((), ("--list",)):
        proc = hearth("connect", *args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert [line.split()[0] for line in proc.stdout.splitlines()] == list(TOOL_IDS)
    assert "Responses" in proc.stdout.splitlines()[0] and "Messages" in proc.stdout.splitlines()[1]


def test_an_unknown_tool_is_exit_2_and_names_the_tools(env):
    proc = hearth("connect", "emacs", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no tool 'emacs'" in proc.stderr and "codex" in proc.stderr and "open-webui" in proc.stderr


def test_codex_names_the_library_model_its_context_and_the_settings_port_and_key(env, tiny_model):
    name, context = tiny_model
    save_server(port=PORT, api_key=KEY, require_api_key=True)
    proc = hearth("connect", "codex", "--part", "config.toml", env=env)
    assert proc.returncode == 0, proc.stderr
    config = tomllib.loads(proc.stdout)
    assert config["model"] == name and config["model_context_window"] == context
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == f"http://127.0.0.1:{PORT}/v1" and provider["wire_api"] == "responses"
    assert "~/.codex/config.toml" in proc.stderr  # where it goes: on stderr, out of the pipe

    shell = hearth("connect", "codex", "--part", "2", env=env)
    assert shell.returncode == 0, shell.stderr
    assert exports(shell.stdout) == {provider["env_key"]: KEY}

    both = hearth("connect", "codex", env=env)
    assert both.stdout == proc.stdout.rstrip("\n") + "\n\n" + shell.stdout


def test_the_flags_override_model_key_and_port(env, tiny_model):
    save_server(port=PORT, api_key=KEY, require_api_key=True)
    proc = hearth("connect", "opencode", "--model", "some/other:Q2_K", "--key", "k-flag", "--port", "48222", env=env)
    assert proc.returncode == 0, proc.stderr
    provider = json.loads(proc.stdout)["provider"]["hearth"]
    assert provider["options"] == {"baseURL": "http://127.0.0.1:48222/v1", "apiKey": "k-flag"}
    assert list(provider["models"]) == ["some/other:Q2_K"]
    assert "limit" not in provider["models"]["some/other:Q2_K"]  # not in the library: its context is unknown


def test_on_loopback_without_a_required_key_the_placeholder_fills_it(env, tiny_model):
    save_server(port=PORT, api_key=KEY, require_api_key=False)
    proc = hearth("connect", "claude-code", "--part", "Shell", env=env)
    assert proc.returncode == 0, proc.stderr
    env_vars = exports(proc.stdout)
    assert env_vars["ANTHROPIC_AUTH_TOKEN"] == KEY_PLACEHOLDER and env_vars["ANTHROPIC_MODEL"] == tiny_model[0]
    assert env_vars["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{PORT}"
    assert "No key is required" in proc.stderr


def test_with_an_empty_library_the_placeholder_model_is_named_and_said(env):
    proc = hearth("connect", "aider", "--part", ".aider.conf.yml", env=env)
    assert proc.returncode == 0, proc.stderr
    assert 'model: "openai/MODEL-ID"' in proc.stdout and "No model is ready" in proc.stderr


def test_a_part_the_tool_lacks_is_exit_2_and_lists_its_parts(env):
    proc = hearth("connect", "codex", "--part", "9", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "1: config.toml" in proc.stderr and "2: Shell" in proc.stderr
