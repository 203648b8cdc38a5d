"""A parsed document cut into passages: the pieces that are embedded, searched and cited.

Cuts follow the document's structure. A passage never spans two sections (a heading, a page, a slide), so a
citation names one place; within a section, whole paragraphs are packed up to the size the embedding model
reads; a paragraph longer than that is cut at sentence ends, then at spaces, and only as a last resort
mid-word. The cut is deterministic: the same text always gives the same passages, which is what lets an
interrupted file resume at the passage it stopped at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from app.core.documents.parsing import Section

# Characters per token assumed when sizing passages for a model's context: English prose runs about four,
# code and other languages fewer, so three keeps a passage inside the context for nearly any text.
CHARS_PER_TOKEN = 3
# What a passage aims at when the model reads more: long passages blur a search (one vector for many
# topics) and crowd the chat's context; about 200 words reads as one idea.
TARGET_CHARS = 1200
# The shortest limit a model is given, however small its context.
MIN_CHARS = 200

_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


@dataclass(frozen=True)
class Passage:
    ordinal: int  # its place in the document, from 0
    text: str
    page: int | None
    heading: str

    def for_embedding(self) -> str:
        """What the embedding model reads: the heading path gives a short passage its topic."""
        return f"{self.heading}\n{self.text}" if self.heading else self.text


def passage_chars(context_tokens: int) -> int:
    """The longest passage (in characters) for an embedding model that reads `context_tokens`, leaving room
    for its special tokens and the heading line."""
    return max(MIN_CHARS, min(TARGET_CHARS, (context_tokens - 16) * CHARS_PER_TOKEN - 120))


def cut_passages(sections: Iterable[Section], max_chars: int = TARGET_CHARS) -> list[Passage]:
    out: list[Passage] = []
    for section in sections:
        for text in _pack(_pieces(section.text, max_chars), max_chars):
            out.append(Passage(len(out), text, section.page, section.heading))
    return out


def _pieces(text: str, max_chars: int) -> Iterator[str]:
    """The section's paragraphs, each at most `max_chars` (long ones cut)."""
    for para in _PARAGRAPH.split(text):
        para = para.strip()
        if not para:
            continue
        if len(para) <= max_chars:
            yield para
            continue
        yield from _cut_long(para, max_chars)


def _cut_long(text: str, max_chars: int) -> Iterator[str]:
    """A paragraph over `max_chars`: sentences packed, a sentence over it cut at spaces, a word over it cut."""
    parts = (
        part
        for sentence in _SENTENCE_END.split(text)
        for part in (_by_words(sentence, max_chars) if len(sentence) > max_chars else [sentence])
    )
    return _greedy(parts, max_chars, " ")


def _by_words(text: str, max_chars: int) -> Iterator[str]:
    def words() -> Iterator[str]:
        for word in text.split():
            while len(word) > max_chars:  # no space to cut at (a long URL, base64): cut it anyway
                yield word[:max_chars]
                word = word[max_chars:]
            yield word

    return _greedy(words(), max_chars, " ")


def _pack(pieces: Iterable[str], max_chars: int) -> Iterator[str]:
    """Paragraphs joined up to `max_chars`, so short ones (a list, a table's rows) are not a passage each."""
    return _greedy(pieces, max_chars, "\n\n")


def _greedy(parts: Iterable[str], max_chars: int, sep: str) -> Iterator[str]:
    """Parts joined by `sep` for as long as the next one fits in `max_chars` (each part fits alone)."""
    buf = ""
    for part in parts:
        if buf and len(buf) + len(sep) + len(part) > max_chars:
            yield buf
            buf = part
        else:
            buf = f"{buf}{sep}{part}" if buf else part
    if buf:
        yield buf
