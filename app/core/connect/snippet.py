"""A tool's ready configuration: one or more parts (a file's content, shell lines, fields to type), each
saying where it goes and in which language it is written, and the API routes the tool calls."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.connect.target import ROUTE_NAMES, Route

Language = str  # "toml" | "json" | "yaml" | "shell" | "python" | "text": how to show (and check) the text


@dataclass(frozen=True)
class Part:
    title: str  # short, for a tab: "config.toml", "Shell"
    where: str  # where it goes, with the path per OS where that differs
    language: Language
    text: str


@dataclass(frozen=True)
class Snippet:
    tool: str  # the tool's id, as `hearth connect TOOL` takes it
    name: str  # as the tool calls itself
    routes: tuple[Route, ...]  # the API routes it calls, the main one first (what a Test sends)
    parts: tuple[Part, ...]
    note: str  # one line: what to know before pasting

    @property
    def route(self) -> Route:
        return self.routes[0]

    @property
    def api(self) -> str:
        return " and ".join(ROUTE_NAMES[r] for r in self.routes)

    def part(self, which: str | int) -> Part:
        """By index, or by title (case-insensitive); IndexError/KeyError when there is no such part."""
        if isinstance(which, int):
            return self.parts[which]
        for part in self.parts:
            if part.title.lower() == which.lower():
                return part
        raise KeyError(which)
