"""Each tool's configuration for Hearth's server, written from that tool's own documented format.

Every builder takes a `Target` and returns a `Snippet`; all values go in through the quoting helpers in
target.py, so an odd model name or key still parses back to itself. Where a tool's config can carry the
context length, it does, since an agent that thinks the window is larger than what is loaded fails late.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from app.core.connect.snippet import Part, Snippet
from app.core.connect.target import FALLBACK_CONTEXT, Target, export_line, json_text, py_str, toml_str, yaml_str

PROVIDER_ID = "hearth"  # the provider's key in configs that name one
PROVIDER_NAME = "Hearth"
KEY_ENV = "HEARTH_API_KEY"  # Codex reads it through env_key; Zed derives the same name from "Hearth"
DOCKER_HOST = "host.docker.internal"
OPEN_WEBUI_IMAGE = "ghcr.io/open-webui/open-webui:main"
SHELL_WHERE = "your shell, or its profile (~/.bashrc, ~/.zshrc); PowerShell: $env:NAME = 'value'"


def codex(t: Target) -> Snippet:
    lines = [f"model = {toml_str(t.model_id)}", f"model_provider = {toml_str(PROVIDER_ID)}"]
    if t.context:
        lines.append(f"model_context_window = {t.context}")
    lines += [
        "",
        f"[model_providers.{PROVIDER_ID}]",
        f"name = {toml_str(PROVIDER_NAME)}",
        f"base_url = {toml_str(t.base)}",
        f"env_key = {toml_str(KEY_ENV)}",
        'wire_api = "responses"',
    ]
    return Snippet(
        "codex",
        "Codex CLI",
        ("responses",),
        (
            Part(
                "config.toml",
                r"~/.codex/config.toml (Windows: %USERPROFILE%\.codex\config.toml)",
                "toml",
                "\n".join(lines),
            ),
            Part("Shell", SHELL_WHERE, "shell", export_line(KEY_ENV, t.api_key)),
        ),
        "The top-level keys go above any [table] already in the file; Codex reads the key from "
        f"{KEY_ENV} and talks to /v1/responses.",
    )


CLAUDE_MODEL_VARS = (
    "ANTHROPIC_MODEL",
    # Claude Code asks for its aliases (subagents, /model, background work) by these; unset, it would ask
    # Hearth for Anthropic's own model ids.
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",  # the older name of the haiku one, still read by older releases
)


def claude_code(t: Target) -> Snippet:
    env = {"ANTHROPIC_BASE_URL": t.root, "ANTHROPIC_AUTH_TOKEN": t.api_key}
    env |= dict.fromkeys(CLAUDE_MODEL_VARS, t.model_id)
    shell = "\n".join(export_line(name, value) for name, value in env.items())
    return Snippet(
        "claude-code",
        "Claude Code",
        ("messages",),
        (
            Part("Shell", SHELL_WHERE, "shell", shell),
            Part(
                "settings.json",
                r"~/.claude/settings.json (Windows: %USERPROFILE%\.claude\settings.json)",
                "json",
                json_text({"env": env}),
            ),
        ),
        "Either form: the URL has no /v1 (Claude Code adds /v1/messages); merge the env block into an "
        "existing settings.json.",
    )


def continue_dev(t: Target) -> Snippet:
    lines = [
        f"name: {yaml_str(PROVIDER_NAME)}",
        "version: 0.0.1",
        "schema: v1",
        "models:",
        f"  - name: {yaml_str(f'{t.model_id} (Hearth)')}",
        "    provider: openai",
        f"    model: {yaml_str(t.model_id)}",
        f"    apiBase: {yaml_str(t.base)}",
        f"    apiKey: {yaml_str(t.api_key)}",
        "    roles: [chat, edit, apply]",
        "    capabilities: [tool_use]",  # Continue cannot guess tool support for a model it does not know
    ]
    if t.context:
        lines += ["    defaultCompletionOptions:", f"      contextLength: {t.context}"]
    return Snippet(
        "continue",
        "Continue",
        ("chat",),
        (
            Part(
                "config.yaml",
                r"~/.continue/config.yaml (Windows: %USERPROFILE%\.continue\config.yaml)",
                "yaml",
                "\n".join(lines),
            ),
        ),
        "A whole config.yaml; with one already there, add just the entry under models.",
    )


def opencode(t: Target) -> Snippet:
    model: dict[str, object] = {"name": f"{t.model_id} (Hearth)"}
    if t.context:
        model["limit"] = {"context": t.context, "output": t.output_tokens}  # opencode wants both or neither
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER_NAME,
                "options": {"baseURL": t.base, "apiKey": t.api_key},
                "models": {t.model_id: model},
            }
        },
        "model": f"{PROVIDER_ID}/{t.model_id}",
    }
    return Snippet(
        "opencode",
        "opencode",
        ("chat",),
        (
            Part(
                "opencode.json",
                "~/.config/opencode/opencode.json, or opencode.json at a project's root",
                "json",
                json_text(config),
            ),
        ),
        "Merge into an existing opencode.json; the model is picked as hearth/<model id>.",
    )


def zed(t: Target) -> Snippet:
    config = {
        "language_models": {
            "openai_compatible": {
                PROVIDER_NAME: {
                    "api_url": t.base,
                    "available_models": [
                        {
                            "name": t.model_id,
                            "display_name": f"{t.model_id} (Hearth)",
                            "max_tokens": t.context or FALLBACK_CONTEXT,  # Zed requires one
                        }
                    ],
                }
            }
        }
    }
    return Snippet(
        "zed",
        "Zed",
        ("chat",),
        (
            Part(
                "settings.json",
                r"~/.config/zed/settings.json (Windows: %APPDATA%\Zed\settings.json)",
                "json",
                json_text(config),
            ),
            Part(
                "API key",
                "Agent settings → LLM Providers → Hearth, or the shell Zed starts from",
                "shell",
                export_line(KEY_ENV, t.api_key),
            ),
        ),
        f"Zed never reads a key from settings.json: paste it into the provider's API key field, or set {KEY_ENV} "
        "(Zed names it after the provider).",
    )


def cline(t: Target) -> Snippet:
    fields = [
        ("API Provider", "OpenAI Compatible"),
        ("Base URL", t.base),
        ("API Key", t.api_key),
        ("Model ID", t.model_id),
    ]
    if t.context:
        fields.append(("Context Window Size", str(t.context)))
    width = max(len(label) for label, _ in fields) + 1
    text = "\n".join(f"{label + ':':<{width}} {value}" for label, value in fields)
    stored: dict[str, object] = {
        "apiProvider": "openai",  # the id both extensions store for "OpenAI Compatible"
        "openAiBaseUrl": t.base,
        "openAiApiKey": t.api_key,
        "openAiModelId": t.model_id,
    }
    if t.context:
        stored["openAiCustomModelInfo"] = {"contextWindow": t.context, "maxTokens": t.output_tokens}
    return Snippet(
        "cline",
        "Cline / Roo Code",
        ("chat",),
        (
            Part("Fields", "Cline or Roo Code → Settings → API Provider: OpenAI Compatible", "text", text),
            Part("JSON", "the same values under the names the extensions store them by", "json", json_text(stored)),
        ),
        "Type the fields into the provider form; the context window is under Model Configuration.",
    )


def aider(t: Target) -> Snippet:
    model = f"openai/{t.model_id}"  # litellm's prefix for "an OpenAI-compatible server at openai-api-base"
    conf = "\n".join(
        [
            f"openai-api-base: {yaml_str(t.base)}",
            f"openai-api-key: {yaml_str(t.api_key)}",
            f"model: {yaml_str(model)}",
        ]
    )
    exports = [export_line("OPENAI_API_BASE", t.base), export_line("OPENAI_API_KEY", t.api_key)]
    shell = "\n".join([*exports, f"aider --model {shlex.quote(model)}"])
    parts = [Part(".aider.conf.yml", "~/.aider.conf.yml, or .aider.conf.yml at the root of a git repo", "yaml", conf)]
    if t.context:
        meta = {
            model: {
                "max_tokens": t.output_tokens,
                "max_input_tokens": t.context,
                "max_output_tokens": t.output_tokens,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
        parts.append(
            Part(
                ".aider.model.metadata.json",
                "~/.aider.model.metadata.json, or next to .aider.conf.yml",
                "json",
                json_text(meta),
            )
        )
    parts.append(Part("Shell", "instead of the config file: " + SHELL_WHERE, "shell", shell))
    return Snippet(
        "aider",
        "Aider",
        ("chat",),
        tuple(parts),
        "The metadata file tells aider the context size, which it cannot know for a local model.",
    )


def open_webui(t: Target) -> Snippet:
    inside = t.with_host(DOCKER_HOST)
    desktop = _docker(["-p 3000:8080", f"--add-host={DOCKER_HOST}:host-gateway"], inside)
    linux = _docker(["--network=host"], t)
    return Snippet(
        "open-webui",
        "Open WebUI",
        ("chat",),
        (
            Part("Docker", "a terminal with Docker; Open WebUI is then at http://localhost:3000", "shell", desktop),
            Part("Linux host network", "a Linux terminal; Open WebUI is then at http://localhost:8080", "shell", linux),
        ),
        f"Inside a container 127.0.0.1 is the container itself: {DOCKER_HOST} reaches Hearth once Server → "
        "Listen on is the local network (LAN mode, where the key is always required); on Linux the "
        "host-network form reaches loopback directly.",
    )


def _docker(options: list[str], t: Target) -> str:
    env = {"OPENAI_API_BASE_URL": t.base, "OPENAI_API_KEY": t.api_key, "DEFAULT_MODELS": t.model_id}
    lines = [
        "docker run -d " + " ".join(options),
        *(f"-e {shlex.quote(f'{name}={value}')}" for name, value in env.items()),
        f"-v open-webui:/app/backend/data --name open-webui {OPEN_WEBUI_IMAGE}",
    ]
    return " \\\n  ".join(lines)


HELLO = '[{"role": "user", "content": "Hello!"}]'


def openai_python(t: Target) -> Snippet:
    client = f"client = OpenAI(base_url={py_str(t.base)}, api_key={py_str(t.api_key)})"
    chat = "\n".join(
        [
            "from openai import OpenAI",
            "",
            client,
            "reply = client.chat.completions.create(",
            f"    model={py_str(t.model_id)},",
            f"    messages={HELLO},",
            ")",
            "print(reply.choices[0].message.content)",
        ]
    )
    responses = "\n".join(
        [
            "from openai import OpenAI",
            "",
            client,
            f'reply = client.responses.create(model={py_str(t.model_id)}, input="Hello!")',
            "print(reply.output_text)",
        ]
    )
    where = "a Python script (pip install openai)"
    return Snippet(
        "openai-python",
        "Python openai",
        ("chat", "responses"),
        (Part("Chat Completions", where, "python", chat), Part("Responses", where, "python", responses)),
        "The same client reaches both APIs; base_url ends in /v1.",
    )


def anthropic_python(t: Target) -> Snippet:
    text = "\n".join(
        [
            "import anthropic",
            "",
            f"client = anthropic.Anthropic(base_url={py_str(t.root)}, api_key={py_str(t.api_key)})",
            "reply = client.messages.create(",
            f"    model={py_str(t.model_id)},",
            "    max_tokens=256,",
            f"    messages={HELLO},",
            ")",
            "print(reply.content[0].text)",
        ]
    )
    return Snippet(
        "anthropic-python",
        "Python anthropic",
        ("messages",),
        (Part("Messages", "a Python script (pip install anthropic)", "python", text),),
        "base_url has no /v1: the client adds /v1/messages and sends the key as x-api-key.",
    )


# In the order the Server page and `hearth connect --list` offer them: agents first, then apps and code.
BUILDERS: dict[str, Callable[[Target], Snippet]] = {
    "codex": codex,
    "claude-code": claude_code,
    "continue": continue_dev,
    "opencode": opencode,
    "zed": zed,
    "cline": cline,
    "aider": aider,
    "open-webui": open_webui,
    "openai-python": openai_python,
    "anthropic-python": anthropic_python,
}
