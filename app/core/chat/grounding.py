"""A question answered from the user's documents: the passages found put before it, numbered so the reply can
cite them as [1], [2], and the sources a reply cited read back from it.

Passages go into the user's message, not the system prompt: every chat template keeps a user turn, and a
model follows an instruction next to the question it is about. A document's text is data, like a tool's
result, so template markup in it is made inert (T50, T55): a file cannot end the turn or forge another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.chat.tool_loop import inert
from app.core.documents.search import Hit

# Characters per token assumed when fitting passages into the context budget (documents.passages uses the
# same conservative figure).
CHARS_PER_TOKEN = 3
_CITATION = re.compile(r"\[(\d{1,3})\]")

INSTRUCTION = (
    "Answer the question using the numbered passages from the user's documents below. Cite each passage you "
    "use by its number in square brackets, like [1]. If the passages do not answer the question, say so."
)


@dataclass(frozen=True)
class Source:
    """A passage given to the model, by the number it was given under."""

    number: int
    collection: str
    file: Path
    page: int | None
    heading: str
    text: str

    @property
    def where(self) -> str:
        """The file, its page and section: how a Sources line names it."""
        parts = [self.file.name]
        if self.page is not None:
            parts.append(f"page {self.page}")
        if self.heading:
            parts.append(self.heading)
        return ", ".join(parts)


def sources_within(hits: Sequence[Hit], budget_tokens: int) -> list[Source]:
    """The best hits, in order, while their text fits `budget_tokens` (the first always goes in, cut if it
    must); numbered from 1."""
    out: list[Source] = []
    left = max(0, budget_tokens) * CHARS_PER_TOKEN
    for hit in hits:
        text = hit.text
        if len(text) > left:
            if out:
                break
            text = text[:left]
        if not text:
            break
        out.append(Source(len(out) + 1, hit.collection, hit.file, hit.page, hit.heading, text))
        left -= len(text) + 40  # the label line
    return out


def grounded_question(question: str, sources: Sequence[Source]) -> str:
    """The user's message with the passages before it (the question as it was when there are none)."""
    if not sources:
        return question
    blocks = [f"[{s.number}] {inert(s.where)}\n{inert(s.text)}" for s in sources]
    return f"{INSTRUCTION}\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {question}"


def cited(reply: str, sources: Sequence[Source]) -> list[Source]:
    """The sources a reply cites by number, in the order of their numbers; markers past the sources given
    (a model that invents [7]) are ignored."""
    by_number = {s.number: s for s in sources}
    numbers = sorted({int(n) for n in _CITATION.findall(reply)})
    return [by_number[n] for n in numbers if n in by_number]


def sources_text(sources: Sequence[Source]) -> str:
    """A Sources block for a terminal or an export: one line a source, with the passage's start."""
    lines = []
    for s in sources:
        first = " ".join(s.text.split())
        lines.append(f"[{s.number}] {s.where} ({s.file})\n    {first[:200]}{'…' if len(first) > 200 else ''}")
    return "\n".join(lines)
