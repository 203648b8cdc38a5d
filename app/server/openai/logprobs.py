"""`logprobs` on the wire: which text each token's record goes out with, and OpenAI's two shapes for them
(chat's `{"content": [{token, logprob, bytes, top_logprobs}], "refusal"}`, completions' parallel lists).

A token's text can reach the client later than its chunk (held while it may start a stop string, or ends
mid-character; in chat, held while it may start a tool-call or reasoning marker). So records wait and go
out with the next text that carries content; records of tokens whose text never goes out as content are
left out: the tokens a stop string cut off (one that runs into it from the text before stays), and in chat
the tokens that became reasoning or a tool call (logprobs cover `content` only). Stream and non-stream
follow the same rule, so they agree.
"""

from __future__ import annotations

import math
from typing import Any

from app.core.engines.base import Logprobs, TokenLogprob
from app.core.tools import OutputEvent, TextDelta

UNLIKELY = -9999.0  # OpenAI's logprob for "very unlikely": JSON has no -Infinity


def _logprob(value: float) -> float:
    return value if math.isfinite(value) else UNLIKELY


class Pending:
    """Records waiting for the text they belong to (see the module docstring)."""

    def __init__(self) -> None:
        self.records: list[Logprobs] = []

    def add(self, record: Logprobs | None) -> None:
        if record is not None:
            self.records.append(record)

    def take(self) -> list[Logprobs]:
        out, self.records = self.records, []
        return out

    def route(self, events: list[OutputEvent]) -> list[Logprobs] | None:
        """After a chat parser turned some text into `events`: the records for their content (which go out
        with the first content delta), or None when there is none; records that became reasoning or a
        tool call are dropped, records of text the parser still holds keep waiting."""
        if any(isinstance(e, TextDelta) and e.text for e in events):
            return self.take()
        if events:
            self.records = []
        return None


def _chat_top(t: TokenLogprob) -> dict[str, Any]:
    return {"token": t.text, "logprob": _logprob(t.logprob), "bytes": list(t.token)}


def chat_content(records: list[Logprobs]) -> list[dict[str, Any]]:
    """Chat's `logprobs.content` entries."""
    return [{**_chat_top(r.sampled), "top_logprobs": [_chat_top(t) for t in r.top]} for r in records]


def chat_logprobs(records: list[Logprobs]) -> dict[str, Any]:
    return {"content": chat_content(records), "refusal": None}


class TextOffsets:
    """Completions' logprobs, chunk by chunk: `text_offset` counts characters from the start of the prompt
    (as OpenAI's does), so it carries on across the chunks of a stream."""

    def __init__(self, prompt: str) -> None:
        self.offset = len(prompt)

    def logprobs(self, records: list[Logprobs]) -> dict[str, Any]:
        tokens: list[str] = []
        token_logprobs: list[float] = []
        top_logprobs: list[dict[str, float]] = []
        offsets: list[int] = []
        for r in records:
            text = r.sampled.text
            # The top alternatives by text, and the sampled token too: up to logprobs + 1 entries, as
            # OpenAI documents. Two tokens with the same text keep the likelier one (it comes first).
            top: dict[str, float] = {}
            for t in r.top:
                top.setdefault(t.text, _logprob(t.logprob))
            top.setdefault(text, _logprob(r.sampled.logprob))
            tokens.append(text)
            token_logprobs.append(_logprob(r.sampled.logprob))
            top_logprobs.append(top)
            offsets.append(self.offset)
            self.offset += len(text)
        return {
            "tokens": tokens,
            "token_logprobs": token_logprobs,
            "top_logprobs": top_logprobs,
            "text_offset": offsets,
        }
