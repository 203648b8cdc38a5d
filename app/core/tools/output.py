"""One parser for a whole reply: reasoning split first, then tool calls in the answer text."""

from __future__ import annotations

from app.core.tools.reasoning import ReasoningSplitter
from app.core.tools.scanner import ToolCallParser
from app.core.tools.types import OutputEvent, ParsedOutput, ReasoningDelta, collect

__all__ = ["OutputParser"]


class OutputParser:
    """`feed(text)` → events (ReasoningDelta, TextDelta, ToolCallStart, ToolCallArgs); `finish()` at the end.

    Calls are looked for only in the answer, never inside reasoning.
    """

    def __init__(self, calls: ToolCallParser, reasoning: ReasoningSplitter | None = None) -> None:
        self._calls = calls
        self._reasoning = reasoning

    @property
    def limit_reached(self) -> bool:
        """The reply has all the calls it may have (parallel_tool_calls=false): generation may stop."""
        return self._calls.limit_reached

    def feed(self, text: str) -> list[OutputEvent]:
        if self._reasoning is None:
            return self._calls.feed(text)
        out: list[OutputEvent] = []
        for delta in self._reasoning.feed(text):
            out.extend([delta] if isinstance(delta, ReasoningDelta) else self._calls.feed(delta.text))
        return out

    def finish(self, truncated: bool = False) -> list[OutputEvent]:
        """`truncated`: the reply was cut off by the token limit (a call it had begun is dropped)."""
        out: list[OutputEvent] = []
        if self._reasoning is not None:
            for delta in self._reasoning.finish():
                out.extend([delta] if isinstance(delta, ReasoningDelta) else self._calls.feed(delta.text))
        out.extend(self._calls.finish(truncated))
        return out

    def parse(self, text: str, truncated: bool = False) -> ParsedOutput:
        """The whole reply at once (this parser must be fresh)."""
        return collect(self.feed(text) + self.finish(truncated))
