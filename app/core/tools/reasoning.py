"""Reasoning vs answer: a streaming splitter over the markers model families use, and a whole-text split.

Markers match without regard to case (the chat view always did). A reasoning block ends only at its
own closing marker; a generation that starts inside one (a template that put <think> in the
generation prompt) ends it at any known closing marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.core.tools.types import ReasoningDelta, TextDelta

__all__ = [
    "CHAT_MARKERS",
    "DEFAULT_MARKERS",
    "GPT_OSS",
    "MISTRAL_THINK",
    "SEED_THINK",
    "THINK",
    "ReasoningMarkers",
    "ReasoningSplit",
    "ReasoningSplitter",
    "detect_reasoning_markers",
    "prompt_opens_reasoning",
    "split_reasoning",
]


@dataclass(frozen=True)
class ReasoningMarkers:
    open: str
    close: str
    drop: tuple[str, ...] = ()  # markup around the answer that is neither reasoning nor answer


THINK = ReasoningMarkers("<think>", "</think>")
MISTRAL_THINK = ReasoningMarkers("[THINK]", "[/THINK]")
SEED_THINK = ReasoningMarkers("<seed:think>", "</seed:think>")
# gpt-oss (harmony): analysis channel, then the final channel's header before the answer.
GPT_OSS = ReasoningMarkers(
    "<|channel|>analysis<|message|>", "<|end|>", drop=("<|start|>assistant", "<|channel|>final<|message|>")
)
DEFAULT_MARKERS: tuple[ReasoningMarkers, ...] = (THINK, MISTRAL_THINK, SEED_THINK, GPT_OSS)
# What the chat view has always shown as reasoning.
CHAT_MARKERS: tuple[ReasoningMarkers, ...] = (
    THINK,
    ReasoningMarkers("<thinking>", "</thinking>"),
    ReasoningMarkers("<reasoning>", "</reasoning>"),
)

Delta = ReasoningDelta | TextDelta


def _alternation(markers: list[str]) -> re.Pattern[str]:
    ordered = sorted(set(markers), key=len, reverse=True)  # the longer marker wins at one position
    return re.compile("|".join(re.escape(m) for m in ordered), re.IGNORECASE)


def _partial(text: str, markers: list[str]) -> int:
    """Longest suffix of `text` that is a proper prefix of a marker, ignoring case."""
    best = 0
    low = text[-max((len(m) for m in markers), default=1) :].lower()
    # Every prefix starts with its marker's first character: most tokens hold none of them (this runs
    # once a token on the API's stream).
    if not any(m[:1].lower() in low for m in markers if m):
        return 0
    for marker in markers:
        m = marker.lower()
        for n in range(min(len(m) - 1, len(low)), best, -1):
            if low.endswith(m[:n]):
                best = n
                break
    return best


class ReasoningSplitter:
    """Feed generated text, get `ReasoningDelta`s and `TextDelta`s (answer) in order.

    `trim` drops the whitespace that opens a reasoning block and the answer after one (what an API
    client wants); the chat view keeps everything and formats it itself.
    """

    def __init__(
        self,
        markers: tuple[ReasoningMarkers, ...] = DEFAULT_MARKERS,
        *,
        start_in_reasoning: bool = False,
        trim: bool = True,
    ) -> None:
        self._closes_of = {m.open.lower(): m.close for m in markers}
        self._drops = {d.lower() for m in markers for d in m.drop}
        self._content_markers = [m.open for m in markers] + [d for m in markers for d in m.drop]
        self._content_re = _alternation(self._content_markers)
        self._all_closes = [m.close for m in markers]
        self._trim = trim
        self._buf = ""
        self._closes: list[str] | None = None  # set while inside a reasoning block
        self._strip = False
        self.blocks: list[str] = []
        if start_in_reasoning:
            self._enter(self._all_closes)

    @property
    def in_reasoning(self) -> bool:
        return self._closes is not None

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        self._buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        self._run(out, final=True)
        return out

    def _enter(self, closes: list[str]) -> None:
        self._closes = closes
        self.blocks.append("")
        self._strip = self._trim

    def _run(self, out: list[Delta], final: bool) -> None:
        while self._buf:
            if self._strip:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    return
                self._strip = False
            inside = self._closes is not None
            markers = self._closes if self._closes is not None else self._content_markers
            pattern = _alternation(markers) if inside else self._content_re
            m = pattern.search(self._buf)
            if m is None:
                keep = 0 if final else _partial(self._buf, markers)
                self._emit(out, self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
                return
            self._emit(out, self._buf[: m.start()])
            marker = m.group(0).lower()
            self._buf = self._buf[m.end() :]
            if inside:
                self._closes = None
                self._strip = self._trim
            elif marker not in self._drops:
                self._enter([self._closes_of[marker]])

    def _emit(self, out: list[Delta], text: str) -> None:
        if not text:
            return
        if self._closes is not None:
            self.blocks[-1] += text
            kind: type[Delta] = ReasoningDelta
        else:
            kind = TextDelta
        if out and type(out[-1]) is kind:
            out[-1] = kind(out[-1].text + text)
        else:
            out.append(kind(text))


@dataclass
class ReasoningSplit:
    content: str
    reasoning: str  # the blocks, concatenated (what a stream's reasoning deltas add up to)
    blocks: list[str] = field(default_factory=list)
    unterminated: bool = False  # the text ends inside a reasoning block (still streaming)


def split_reasoning(
    text: str,
    markers: tuple[ReasoningMarkers, ...] = DEFAULT_MARKERS,
    *,
    start_in_reasoning: bool | None = False,
    trim: bool = True,
) -> ReasoningSplit:
    """Whole text → answer and reasoning. `start_in_reasoning=None` infers it: a closing marker
    before any opening one means the template opened the block in the prompt."""
    if start_in_reasoning is None:
        first_close = _alternation([m.close for m in markers]).search(text)
        first_open = _alternation([m.open for m in markers]).search(text)
        start_in_reasoning = first_close is not None and (
            first_open is None or first_close.start() < first_open.start()
        )
    splitter = ReasoningSplitter(markers, start_in_reasoning=start_in_reasoning, trim=trim)
    deltas = splitter.feed(text) + splitter.finish()
    content = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    return ReasoningSplit(content, "".join(splitter.blocks), list(splitter.blocks), splitter.in_reasoning)


def prompt_opens_reasoning(prompt: str, markers: tuple[ReasoningMarkers, ...] = DEFAULT_MARKERS) -> bool:
    """True when a rendered prompt ends inside a reasoning block (e.g. "<|im_start|>assistant\\n<think>\\n")."""
    tail = prompt.rstrip().lower()
    return any(tail.endswith(m.open.lower()) for m in markers)


def detect_reasoning_markers(template: str | None) -> tuple[ReasoningMarkers, ...]:
    """The markers a chat template mentions; all known ones when it mentions none."""
    text = (template or "").lower()
    found = tuple(m for m in DEFAULT_MARKERS if m.open.lower() in text or m.close.lower() in text)
    return found or DEFAULT_MARKERS
