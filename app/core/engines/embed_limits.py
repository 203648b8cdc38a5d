"""Bounds on one embeddings request, and its cancel (security.md T40).

2,048 inputs of 600 tokens held the engine thread for about 70 minutes (some 290 tokens/s) and went on
after the client left. Every engine checks these before it tokenizes and before it embeds anything, and
checks the job's cancel flag between inputs: one input is one decode, so a cancel lands within one input's
time (at most the embeddings context: 2,048 tokens in the side context).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from app.core.engines.errors import MAX_PROMPT_CHARS, ContextLengthExceeded, EngineError, InvalidRequest, PromptTooLong

# OpenAI's own limit on inputs per request (the API's schema says it too): clients already batch to it.
MAX_EMBED_INPUTS = 2048
# Characters in all inputs together, before anything is tokenized: one prompt's cap, so tokenizing a request
# costs at most what tokenizing one prompt does (about 2 s on a 2-core CPU). Ordinary text is 3-5 characters
# a token, so this trips only where MAX_EMBED_TOKENS would after a tokenizer pass that this saves.
MAX_EMBED_CHARS = MAX_PROMPT_CHARS
# Tokens in all inputs together: OpenAI's own cap, so a client's batching made for OpenAI (LangChain sends
# 1,000 inputs a request) works here unchanged. At the 290 tokens/s above that is ~17 minutes of engine
# time, which the cancel check below lets a client give back by leaving.
MAX_EMBED_TOKENS = 300_000


class EmbeddingsTooLarge(EngineError):
    """The request as a whole is over a cap (characters or tokens in all its inputs): the API's 413."""

    code = "request_too_large"

    def __init__(self, what: str, amount: int, cap: int, n_inputs: int) -> None:
        super().__init__(
            f"the request's {n_inputs:,} inputs hold {amount:,} {what}, over the {cap:,}-{what[:-1]} cap on one "
            "embeddings request; send them in smaller batches",
            param="input",
            amount=amount,
            cap=cap,
        )


class EmbeddingInputTooLong(ContextLengthExceeded):
    """One input has more tokens than the embeddings context takes in its single decode."""

    def __init__(self, index: int, tokens: int, n_tokens: int) -> None:
        EngineError.__init__(
            self,
            f"input {index} has {tokens:,} tokens but the embeddings context holds {n_tokens:,}; shorten or split it",
            param="input",
            prompt_tokens=tokens,
            n_ctx=n_tokens,
            index=index,
        )


class EmbeddingCancelled(EngineError):
    """The job's cancel flag was set (its client left, the server stopping): raised between two inputs
    (`unit`: what they are, "documents" for a rerank)."""

    code = "cancelled"

    def __init__(self, done: int, total: int, unit: str = "inputs") -> None:
        job = "reranking" if unit == "documents" else "embedding"
        super().__init__(f"{job} cancelled after {done} of {total} {unit}", done=done, total=total)


def check_embed_texts(texts: Sequence[str]) -> None:
    """Before tokenizing: the count of inputs, each input's characters (one prompt's cap) and all of them."""
    if len(texts) > MAX_EMBED_INPUTS:
        raise InvalidRequest(
            f"the request has {len(texts):,} inputs, over the {MAX_EMBED_INPUTS:,} one embeddings request takes",
            "input",
        )
    if not texts:
        raise InvalidRequest("input is empty; give at least one text to embed", "input")
    empty = next((i for i, text in enumerate(texts) if not text), None)
    if empty is not None:
        raise InvalidRequest(f"input {empty} is an empty string; every input needs text", "input")
    lengths = [len(text) for text in texts]
    longest = max(lengths, default=0)
    if longest > MAX_PROMPT_CHARS:
        error = PromptTooLong(longest)
        error.details["param"] = "input"
        raise error
    total = sum(lengths)
    if total > MAX_EMBED_CHARS:
        raise EmbeddingsTooLarge("characters", total, MAX_EMBED_CHARS, len(texts))


def check_embed_tokens(lengths: Sequence[int], n_tokens: int) -> None:
    """After tokenizing, before the first decode: so a bad input last in the list costs no engine time."""
    for i, n in enumerate(lengths):
        if n == 0:
            raise InvalidRequest(f"input {i} is empty: it has no tokens to embed", "input")
        if n > n_tokens:
            raise EmbeddingInputTooLong(i, n, n_tokens)
    total = sum(lengths)
    if total > MAX_EMBED_TOKENS:
        raise EmbeddingsTooLarge("tokens", total, MAX_EMBED_TOKENS, len(lengths))


def check_cancel(cancel: threading.Event | None, done: int, total: int, unit: str = "inputs") -> None:
    """Between two inputs: raise EmbeddingCancelled once the job is cancelled."""
    if cancel is not None and cancel.is_set():
        raise EmbeddingCancelled(done, total, unit)
