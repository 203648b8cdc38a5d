"""Connecting other tools to Hearth's server: each tool's ready configuration with the real URL, key and
model (tools.py for the OpenAI- and Anthropic-style tools, ollama_tools.py for those that speak only
Ollama's API), and a test request through the route that tool calls (probe.py). Pure Python; the
Server page and `hearth connect` both show what this makes."""

from __future__ import annotations

from app.core.connect.ollama_tools import OLLAMA_BUILDERS
from app.core.connect.probe import ProbeResult, probe_route
from app.core.connect.snippet import Part, Snippet
from app.core.connect.target import (
    AGENT_MIN_CONTEXT,
    KEY_PLACEHOLDER,
    MODEL_PLACEHOLDER,
    ROUTE_NAMES,
    Route,
    Target,
    context_warning,
)
from app.core.connect.tools import BUILDERS as API_BUILDERS

# The order the Server page and `hearth connect --list` offer them: the Ollama-only tools after the rest.
BUILDERS = {**API_BUILDERS, **OLLAMA_BUILDERS}
TOOL_IDS: tuple[str, ...] = tuple(BUILDERS)


class UnknownTool(KeyError):
    def __init__(self, tool: str) -> None:
        super().__init__(tool)
        self.tool = tool

    def __str__(self) -> str:
        return f"no tool {self.tool!r}; the tools are: {', '.join(TOOL_IDS)}"


def snippet_for(tool: str, url: str, key: str = "", model: str = "", context_length: int | None = None) -> Snippet:
    """`tool`'s configuration for the server at `url` (its root or its /v1 base). `key` "" when none is
    required, `model` "" when none is ready: placeholders stand in. UnknownTool for an unknown id."""
    build = BUILDERS.get(tool)
    if build is None:
        raise UnknownTool(tool)
    return build(Target(url, key, model, context_length))


def connect_snippets(url: str, key: str = "", model: str = "", context_length: int | None = None) -> list[Snippet]:
    """Every tool's configuration, in TOOL_IDS order."""
    target = Target(url, key, model, context_length)
    return [build(target) for build in BUILDERS.values()]


TOOL_NAMES: dict[str, str] = {s.tool: s.name for s in connect_snippets("http://127.0.0.1")}

__all__ = [
    "AGENT_MIN_CONTEXT",
    "KEY_PLACEHOLDER",
    "MODEL_PLACEHOLDER",
    "ROUTE_NAMES",
    "TOOL_IDS",
    "TOOL_NAMES",
    "Part",
    "ProbeResult",
    "Route",
    "Snippet",
    "Target",
    "UnknownTool",
    "connect_snippets",
    "context_warning",
    "probe_route",
    "snippet_for",
]
