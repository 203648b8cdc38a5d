"""The streaming machine every tool-call family shares; a family only says how one call block parses.

Rules (the same for whole and streamed output, because `parse` is `feed(all)` + `finish()`):
- text passes through at once, except a tail that may begin a call marker (held until ruled in or
  out) and trailing whitespace (held: whitespace next to calls is kept only between two pieces of
  text, so a reply that is only calls has empty content, and "text <call> text" keeps its gap);
- a block that parses becomes `ToolCallStart` + one `ToolCallArgs` per call, sent when the block is
  complete, so a block that turns out malformed (bad JSON, unknown shape, unterminated at the end)
  can still come back as text, marker and all; it never raises;
- calls past `max_calls` (parallel_tool_calls=false → 1) are dropped and logged, not shown as text:
  a client that asked for one call should not get raw call markup as the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from app.core.tools.spec import FunctionSpec
from app.core.tools.textscan import NAME_RE, partial_suffix
from app.core.tools.types import (
    IdFactory,
    OutputEvent,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    arguments_json,
    collect,
    new_call_id,
)

logger = logging.getLogger(__name__)

__all__ = ["FAIL", "PENDING", "BlockResult", "Done", "Family", "RawCall", "ToolCallParser"]

Schemas = Mapping[str, dict[str, Any]]


@dataclass(frozen=True)
class RawCall:
    name: str
    arguments: dict[str, Any]
    id: str | None = None  # when the model wrote one (Mistral's list form)


class _Pending:
    """The block is not complete yet."""


class _Fail:
    """The text at the marker is not a call; it stays text."""


PENDING = _Pending()
FAIL = _Fail()


@dataclass(frozen=True)
class Done:
    end: int  # index just after the block in the text handed to parse_block
    calls: tuple[RawCall, ...]


BlockResult = _Pending | _Fail | Done


class Family:
    """One tool-call format. Subclasses set the markers and implement `parse_block`.

    `parse_block(text, opener, final, schemas)` sees the text from the marker on. It must decide
    the same way for every prefix it answers on (PENDING until sure), and never answer PENDING
    when `final` is true: that is what makes streamed and whole parsing agree.
    """

    name: ClassVar[str] = ""
    openers: ClassVar[tuple[str, ...]] = ()  # markers that open a call anywhere
    start_openers: ClassVar[tuple[str, ...]] = ()  # markers that open a call only as the reply's start

    def parse_block(self, text: str, opener: str, final: bool, schemas: Schemas) -> BlockResult:
        raise NotImplementedError

    def grammar(self, specs: list[FunctionSpec], *, parallel: bool, variant: str = "") -> str:
        """GBNF that forces one call to one of `specs` (`parallel`: one or more), in this format."""
        raise NotImplementedError

    def new_id(self) -> str:
        return new_call_id()

    def stream(
        self, *, schemas: Schemas | None = None, max_calls: int | None = None, new_id: IdFactory | None = None
    ) -> ToolCallParser:
        return ToolCallParser(self, schemas=schemas, max_calls=max_calls, new_id=new_id)

    def parse(
        self,
        text: str,
        *,
        schemas: Schemas | None = None,
        max_calls: int | None = None,
        new_id: IdFactory | None = None,
    ) -> tuple[str, list[ToolCall]]:
        """Whole output → (content text, calls)."""
        parser = self.stream(schemas=schemas, max_calls=max_calls, new_id=new_id)
        result = collect(parser.feed(text) + parser.finish())
        return result.content, result.tool_calls


class ToolCallParser:
    """Feed model text (answer text, after any reasoning split), get events. `family=None` parses nothing."""

    def __init__(
        self,
        family: Family | None,
        *,
        schemas: Schemas | None = None,
        max_calls: int | None = None,
        new_id: IdFactory | None = None,
    ) -> None:
        self._family = family
        self._openers = family.openers if family else ()
        self._start_openers = family.start_openers if family else ()
        self._schemas: Schemas = dict(schemas or {})
        self._max = max_calls
        self._new_id: IdFactory = new_id or (family.new_id if family else new_call_id)
        self._buf = ""
        self._opener: str | None = None  # set while inside a possible call block
        self._held_ws = ""  # whitespace before the block: dropped if it is a call, text if not
        self._at_start = True  # only whitespace so far
        self._after_call = False  # the whitespace that follows a call goes to the gap
        self._gap = ""  # whitespace around calls since the last text: sent only if text follows
        self._has_text = False
        self._count = 0
        self._ids: set[str] = set()
        self._finished = False

    @property
    def calls_made(self) -> int:
        return self._count

    @property
    def limit_reached(self) -> bool:
        """No further call will be kept: a caller may stop the generation here."""
        return self._max is not None and self._count >= self._max

    def feed(self, text: str) -> list[OutputEvent]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        out: list[OutputEvent] = []
        if self._family is None:
            self._emit_text(out, text)
            return out
        self._buf += text
        self._run(out, final=False)
        return out

    def finish(self, truncated: bool = False) -> list[OutputEvent]:
        """The end of the output: an open block is settled (usually as text), held text is released.
        `truncated`: the output was cut off (the token limit), so a block still open is a call that never
        finished: it is dropped, never shown as text."""
        if self._finished:
            return []
        out: list[OutputEvent] = []
        if truncated and (self._opener is not None or self._partial_opener()):
            self._buf = self._held_ws = ""
            self._opener = None
        if self._family is not None:
            self._run(out, final=True)
        rest, self._buf = self._buf, ""
        self._emit_text(out, rest.lstrip() if self._after_call else rest)
        self._finished = True
        return out

    def _partial_opener(self) -> bool:
        """The held text is the start of a call marker the output stopped inside of."""
        tail = self._buf.lstrip()
        return bool(tail) and any(o.startswith(tail) for o in (*self._openers, *self._start_openers))

    # -- the machine ----------------------------------------------------------------------------

    def _run(self, out: list[OutputEvent], final: bool) -> None:
        assert self._family is not None
        while True:
            if self._opener is not None:
                result = self._family.parse_block(self._buf, self._opener, final, self._schemas)
                if isinstance(result, _Pending):
                    return
                opener, self._opener = self._opener, None
                if isinstance(result, _Fail):
                    self._emit_text(out, self._held_ws + opener)
                    self._held_ws = ""
                    self._buf = self._buf[len(opener) :]
                    continue
                self._gap += self._held_ws
                self._held_ws = ""
                self._emit_calls(out, result.calls)
                self._buf = self._buf[result.end :]
                self._after_call, self._at_start = True, False
                continue
            if self._after_call:
                body = self._buf.lstrip()
                self._gap += self._buf[: len(self._buf) - len(body)]
                self._buf = body
                if not body:
                    return
                self._after_call = False
            if self._at_start and self._start_openers and not self._start_check(final):
                return
            if self._opener is not None:
                continue
            if not self._scan_text(out, final):
                return

    def _start_check(self, final: bool) -> bool:
        """At the reply's start: enter a start-only block, or rule it out. False: wait for more text."""
        body = self._buf.lstrip()
        if not body:
            return final
        for opener in self._start_openers:
            if body.startswith(opener):
                self._held_ws = self._buf[: len(self._buf) - len(body)]
                self._buf, self._opener = body, opener
                self._at_start = False
                return True
        if not final and any(o.startswith(body) for o in self._start_openers):
            return False
        self._at_start = False
        return True

    def _scan_text(self, out: list[OutputEvent], final: bool) -> bool:
        """Send text up to the next marker; True when a block was entered."""
        buf = self._buf
        hit, opener = -1, ""
        for candidate in self._openers:
            i = buf.find(candidate)
            if i >= 0 and (hit < 0 or i < hit or (i == hit and len(candidate) > len(opener))):
                hit, opener = i, candidate
        if hit >= 0:
            before = buf[:hit]
            core = before.rstrip()
            self._emit_text(out, core)
            self._held_ws = before[len(core) :]
            self._buf, self._opener = buf[hit:], opener
            return True
        if final:
            return False  # finish() releases the rest
        cut = len(buf) - partial_suffix(buf, self._openers)
        core = buf[:cut].rstrip()
        self._emit_text(out, core)
        self._buf = buf[len(core) :]
        return False

    def _emit_text(self, out: list[OutputEvent], text: str) -> None:
        if not text:
            return
        self._at_start = self._after_call = False
        if self._gap:
            text = self._gap + text if self._has_text else text
            self._gap = ""
        self._has_text = True
        if out and isinstance(out[-1], TextDelta):
            out[-1] = TextDelta(out[-1].text + text)
        else:
            out.append(TextDelta(text))

    def _emit_calls(self, out: list[OutputEvent], calls: tuple[RawCall, ...]) -> None:
        for raw in calls:
            if self.limit_reached:
                logger.info("dropped a call to %r: only %s call(s) allowed in this reply", raw.name, self._max)
                continue
            index = self._count
            call_id = self._unique_id(raw.id, index)
            self._ids.add(call_id)
            out.append(ToolCallStart(index=index, id=call_id, name=raw.name))
            out.append(ToolCallArgs(index=index, fragment=arguments_json(raw.arguments)))
            self._count += 1

    def _unique_id(self, wanted: str | None, index: int) -> str:
        if wanted and NAME_RE.fullmatch(wanted) and wanted not in self._ids:
            return wanted
        for _ in range(3):
            candidate = self._new_id()
            if candidate and candidate not in self._ids:
                return candidate
        # A factory that repeats itself (tests, a fixed id) still gives unique ids.
        return f"{self._new_id() or 'call'}_{index}"
