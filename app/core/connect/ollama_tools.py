"""The tools that speak only Ollama's API (/api/tags, /api/show, /api/chat at the server's root), each
configured from that tool's own documented settings; the OpenAI- and Anthropic-style tools are in tools.py.

Ollama's clients list models as `NAME:latest`. A tool that picks the model from that list, or checks a typed
name against it (Home Assistant pulls a model it does not find there, which Hearth does not do), is given
`Target.tagged_model`; one that only sends the name on is given the library id as it is.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from app.core.connect.snippet import Part, Snippet
from app.core.connect.target import Target, json_text, py_str
from app.core.connect.tools import DOCKER_HOST, OPEN_WEBUI_IMAGE

COPILOT_ENDPOINT_SETTING = "github.copilot.chat.byok.ollamaEndpoint"
LAN_NOTE = (
    f"Inside a container 127.0.0.1 is the container itself: {DOCKER_HOST} reaches Hearth once Server → Listen "
    "on is the local network (LAN mode, where the key is always required)"
)


def _fields(rows: list[tuple[str, str]]) -> str:
    """`Label: value` lines, the values aligned, as a form shows them."""
    width = max(len(label) for label, _ in rows) + 1
    return "\n".join(f"{label + ':':<{width}} {value}" for label, value in rows)


def home_assistant(t: Target) -> Snippet:
    def rows(target: Target) -> list[tuple[str, str]]:
        out = [("URL", target.root), ("API key", target.api_key), ("Model", target.tagged_model)]
        if target.context:  # HA's "Context window size" (num_ctx); more than is loaded only truncates later
            out.append(("Context window size", str(target.context)))
        return out

    where = "Settings → Devices & services → Add integration → Ollama; the model and context in its agent's options"
    return Snippet(
        "home-assistant",
        "Home Assistant",
        ("ollama",),
        (
            Part(
                "This computer",
                "HA on this computer, or in Docker with --network=host: " + where,
                "text",
                _fields(rows(t)),
            ),
            Part(
                "Docker",
                "HA in a Docker container (bridge network): " + where,
                "text",
                _fields(rows(t.with_host(DOCKER_HOST))),
            ),
        ),
        "The URL has no /v1. Pick the model from HA's list: HA tries to download a name it does not find there. "
        f"{LAN_NOTE}; HA on another machine (Home Assistant OS) needs LAN mode and this computer's LAN address. "
        "Older HA releases have no API key field and so reach only a server that requires none.",
    )


def vscode_copilot(t: Target) -> Snippet:
    settings = json_text({COPILOT_ENDPOINT_SETTING: t.root})
    picker = _fields([("Provider", "Ollama"), ("Model", t.tagged_model)])
    return Snippet(
        "vscode-copilot",
        "VS Code Copilot",
        # It lists and inspects models through Ollama's /api/tags and /api/show, then chats through
        # /v1/chat/completions at the same root: a Test tries both APIs.
        ("ollama", "chat"),
        (
            Part(
                "settings.json",
                "VS Code → Preferences: Open User Settings (JSON); merge into the existing object",
                "json",
                settings,
            ),
            Part("Model", "Copilot Chat → model picker → Manage Models → Ollama", "text", picker),
        ),
        "Copilot's Ollama provider sends no API key: it reaches Hearth only while the server requires none "
        "(Listen on this computer, Require a key off). The endpoint has no /v1.",
    )


def open_webui_ollama(t: Target) -> Snippet:
    inside = t.with_host(DOCKER_HOST)
    desktop = _docker(["-p 3000:8080", f"--add-host={DOCKER_HOST}:host-gateway"], inside)
    linux = _docker(["--network=host"], t)
    # Open WebUI's Ollama connection takes its key only in the admin form (sent as a Bearer token).
    connection = _fields([("URL", inside.root), ("Key", inside.api_key)])
    return Snippet(
        "open-webui-ollama",
        "Open WebUI (Ollama)",
        ("ollama",),
        (
            Part("Docker", "a terminal with Docker; Open WebUI is then at http://localhost:3000", "shell", desktop),
            Part("Linux host network", "a Linux terminal; Open WebUI is then at http://localhost:8080", "shell", linux),
            Part(
                "Connection",
                "Open WebUI → Admin Panel → Settings → Connections → Ollama API (edit)",
                "text",
                connection,
            ),
        ),
        f"{LAN_NOTE}, so type the key into the connection's Key field; on Linux the host-network form reaches "
        "loopback directly (then the URL is 127.0.0.1's).",
    )


def _docker(options: list[str], t: Target) -> str:
    env = {"OLLAMA_BASE_URL": t.root, "DEFAULT_MODELS": t.tagged_model}  # as Open WebUI lists it from /api/tags
    lines = [
        "docker run -d " + " ".join(options),
        *(f"-e {shlex.quote(f'{name}={value}')}" for name, value in env.items()),
        f"-v open-webui:/app/backend/data --name open-webui {OPEN_WEBUI_IMAGE}",
    ]
    return " \\\n  ".join(lines)


def obsidian(t: Target) -> Snippet:
    copilot = _fields(
        [("Model Name", t.model_id), ("Provider", "Ollama"), ("Base URL", t.root), ("API Key", t.api_key)]
    )
    smart = _fields([("Platform", "Ollama"), ("Host", t.root), ("Model", t.tagged_model)])
    return Snippet(
        "obsidian",
        "Obsidian (Copilot, Smart Connections)",
        ("ollama",),
        (
            Part("Copilot", "Obsidian → Settings → Copilot → Model → Add Custom Model", "text", copilot),
            Part("Smart Connections", "Obsidian → Settings → Smart Connections → chat model → Ollama", "text", smart),
        ),
        "The base URL has no /v1. Obsidian's requests come from app://obsidian.md, an origin the server's "
        "allowed-origins list cannot hold: turn on the custom model's CORS option in Copilot.",
    )


def ollama_python(t: Target) -> Snippet:
    headers = f"{{{py_str('Authorization')}: {py_str('Bearer ' + t.api_key)}}}"
    text = "\n".join(
        [
            "from ollama import Client",
            "",
            # The key as a Bearer token: ignored when the server requires none, checked when it does.
            f"client = Client(host={py_str(t.root)}, headers={headers})",
            "reply = client.chat(",
            f"    model={py_str(t.model_id)},",
            '    messages=[{"role": "user", "content": "Hello!"}],',
            ")",
            "print(reply.message.content)",
        ]
    )
    return Snippet(
        "ollama-python",
        "Python ollama",
        ("ollama",),
        (Part("Chat", "a Python script (pip install ollama)", "python", text),),
        "host is the root, without /v1: the client adds /api/chat. It also reads OLLAMA_HOST when host is left out.",
    )


# Appended after tools.BUILDERS in the Server page's list, in this order.
OLLAMA_BUILDERS: dict[str, Callable[[Target], Snippet]] = {
    "home-assistant": home_assistant,
    "vscode-copilot": vscode_copilot,
    "open-webui-ollama": open_webui_ollama,
    "obsidian": obsidian,
    "ollama-python": ollama_python,
}
