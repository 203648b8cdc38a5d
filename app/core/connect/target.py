"""What a tool is pointed at: the server's URL (root and /v1 base), the key, the model and its context, and
the small renderers that put those values into each config language safely quoted.

The URL may be given either way (`http://127.0.0.1:8487` or `…/v1`): the OpenAI-style tools want the /v1
base, the Anthropic-style ones (Claude Code, the anthropic client) the root they append /v1/messages to,
and Ollama's clients the root they append /api/… to.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Route = Literal["chat", "responses", "messages", "ollama"]
ROUTE_PATHS: dict[Route, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "ollama": "/api/chat",
}
ROUTE_NAMES: dict[Route, str] = {
    "chat": "Chat Completions",
    "responses": "Responses",
    "messages": "Messages",
    "ollama": "Ollama chat",
}
OLLAMA_TAG = ":latest"

MODEL_PLACEHOLDER = "MODEL-ID"  # until the library has a ready model
KEY_PLACEHOLDER = "unused-on-loopback"  # every one of these clients insists on some key, even when none is checked
# For configs that cannot leave the context out (Zed): what Hearth loads when a model does not say.
FALLBACK_CONTEXT = 8192
MAX_OUTPUT_TOKENS = 8192  # the output budget offered where a config asks for one next to the context

# Coding agents send long system prompts and tool lists before the first word of the task (Claude Code and
# Codex: 10–30k tokens), so a smaller context fails or truncates on the first request.
AGENT_MIN_CONTEXT = 32768

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # as urlsplit gives the host, brackets dropped


@dataclass(frozen=True)
class Target:
    """The values every snippet is written from. `key` "" means none is required (a placeholder is sent);
    `model` "" means no model is ready yet; `context_length` None or 0 means unknown."""

    url: str
    key: str = ""
    model: str = ""
    context_length: int | None = None

    @property
    def root(self) -> str:
        """`http://host:port`, without /v1 and without a trailing slash."""
        return self.url.strip().rstrip("/").removesuffix("/v1").rstrip("/")

    @property
    def base(self) -> str:
        """`http://host:port/v1`, what OpenAI-style clients take as their base URL."""
        return self.root + "/v1"

    @property
    def api_key(self) -> str:
        return self.key or KEY_PLACEHOLDER

    @property
    def model_id(self) -> str:
        return self.model or MODEL_PLACEHOLDER

    @property
    def tagged_model(self) -> str:
        """The model as Ollama's /api/tags lists it (`NAME:latest` for a name without a tag): what a tool
        that picks from that list, or checks a typed name against it, must be given."""
        model = self.model_id
        return model if ":" in model else model + OLLAMA_TAG

    @property
    def context(self) -> int | None:
        return self.context_length if self.context_length and self.context_length > 0 else None

    @property
    def output_tokens(self) -> int:
        """A reply budget that leaves most of the context to the prompt."""
        return max(256, min(MAX_OUTPUT_TOKENS, (self.context or FALLBACK_CONTEXT) // 4))

    def with_host(self, host: str) -> Target:
        """The same server reached by another name (Docker's host.docker.internal); only a loopback host is
        replaced, since a LAN address already names this machine from anywhere."""
        parts = urlsplit(self.root)
        if (parts.hostname or "") not in LOOPBACK_HOSTS:
            return self
        netloc = host + (f":{parts.port}" if parts.port else "")
        return Target(urlunsplit(parts._replace(netloc=netloc)), self.key, self.model, self.context_length)


def context_warning(n_ctx: int | None) -> str:
    """One line for the Server page when the loaded model's context is too small for a coding agent."""
    if not n_ctx or n_ctx >= AGENT_MIN_CONTEXT:
        return ""
    return (
        f"The loaded model's context is {n_ctx:,} tokens. Coding agents such as Claude Code and Codex send "
        f"10–30k-token system prompts: load it with {AGENT_MIN_CONTEXT:,} or more (Context when a request loads "
        "it, below, or the chat's context length) before connecting one."
    )


# ---- quoting: each value goes into its language as a literal that parses back to exactly itself ----


def json_str(value: str) -> str:
    """A JSON string literal, readable (no \\u escapes for non-ASCII such as a masked key's dots)."""
    return json.dumps(value, ensure_ascii=False)


def toml_str(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except that TOML also forbids a raw DEL."""
    return json_str(value).replace("\x7f", "\\u007F")


def yaml_str(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML); quoting keeps `yes`, `1e3` or `a: b` text."""
    return json_str(value).replace("\x7f", "\\x7F")


def py_str(value: str) -> str:
    """A Python string literal: json.dumps of a str is one, quotes and escapes included."""
    return json_str(value)


def export_line(name: str, value: str) -> str:
    return f"export {name}={shlex.quote(value)}"


def json_text(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
