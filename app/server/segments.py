"""A reply as the agent APIs carry it: a list of segments (reasoning, answer text, tool calls), each
opened, appended to and closed in order. The Responses API calls them output items, Anthropic content
blocks; both are made from the same parser events, so a stream and a whole reply always agree.

Whitespace a model writes between segments (the blank line after a reasoning block, before a call) is
held back and given to the next text segment, never made into an item of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.core.tools import OutputEvent, ReasoningDelta, TextDelta, ToolCallArgs, ToolCallStart

Kind = Literal["reasoning", "text", "tool"]


@dataclass
class Segment:
    """One part of the reply; `index` is its place among the reply's segments (from 0)."""

    kind: Kind
    index: int
    text: str = ""  # the reasoning or answer text, or a call's arguments JSON
    call_id: str = ""
    name: str = ""
    done: bool = False


@dataclass(frozen=True)
class Opened:
    segment: Segment


@dataclass(frozen=True)
class Appended:
    segment: Segment
    text: str


@dataclass(frozen=True)
class Closed:
    segment: Segment


Op = Opened | Appended | Closed


@dataclass
class Segmenter:
    """Folds parser events into segments; `feed` and `finish` say what happened, in order."""

    segments: list[Segment] = field(default_factory=list)
    _open: Segment | None = None
    _calls: dict[int, Segment] = field(default_factory=dict)  # parser call index → its segment
    _held: str = ""  # whitespace waiting for the text it precedes
    _held_kind: Kind | None = None

    def feed(self, events: list[OutputEvent]) -> list[Op]:
        ops: list[Op] = []
        for event in events:
            if isinstance(event, (TextDelta, ReasoningDelta)):
                kind: Kind = "text" if isinstance(event, TextDelta) else "reasoning"
                self._text(kind, event.text, ops)
            elif isinstance(event, ToolCallStart):
                self._close(ops)
                segment = self._new("tool", ops)
                segment.call_id, segment.name = event.id, event.name
                self._calls[event.index] = segment
            elif isinstance(event, ToolCallArgs):
                call = self._calls.get(event.index)
                if call is not None and event.fragment:
                    call.text += event.fragment
                    ops.append(Appended(call, event.fragment))
        return ops

    def finish(self) -> list[Op]:
        ops: list[Op] = []
        self._close(ops)
        self._held, self._held_kind = "", None
        return ops

    def _text(self, kind: Kind, text: str, ops: list[Op]) -> None:
        if not text:
            return
        current = self._open
        if current is not None and current.kind == kind:
            current.text += text
            ops.append(Appended(current, text))
            return
        if not text.strip():
            # Between segments: keep it for the next text of this kind; any other segment drops it.
            if self._held_kind != kind:
                self._held = ""
            self._held, self._held_kind = self._held + text, kind
            return
        self._close(ops)
        held = self._held if self._held_kind == kind else ""
        self._held, self._held_kind = "", None
        segment = self._new(kind, ops)
        segment.text = held + text
        ops.append(Appended(segment, segment.text))

    def _new(self, kind: Kind, ops: list[Op]) -> Segment:
        segment = Segment(kind, len(self.segments))
        self.segments.append(segment)
        self._open = segment
        ops.append(Opened(segment))
        return segment

    def _close(self, ops: list[Op]) -> None:
        if self._open is not None:
            self._open.done = True
            ops.append(Closed(self._open))
            self._open = None


def segments_of(events: list[OutputEvent]) -> list[Segment]:
    """A whole reply's segments, as a stream of the same events would have made them."""
    segmenter = Segmenter()
    segmenter.feed(events)
    segmenter.finish()
    return segmenter.segments
