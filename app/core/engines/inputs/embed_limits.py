"""Bounds on one embeddings request, and its cancel (security.md T40).

2,048 inputs of 600 tokens held the engine thread for about 70 minutes (some 290 tokens/s) and went on
after the client left; 2,048 inputs of two words held it for 93 s, when each input was its own decode. The
engine now packs inputs into shared decodes (llamacpp.embed), so the work is their tokens plus a little per
input, and that is what the cap counts. Every engine checks these before it tokenizes and before it embeds
anything, and checks the job's cancel flag between decodes: a cancel lands within one decode's time (at most
the embeddings context's tokens: 2,048 in the side context).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from app.core.engines.errors import MAX_PROMPT_CHARS, ContextLengthExceeded, EngineError, InvalidRequest, PromptTooLong

# OpenAI's own limit on inputs per request (the API's schema says it too): clients already batch to it.
MAX_EMBED_INPUTS = 2048
# Characters in all inputs together, before anything is tokenized: one prompt's cap, so tokenizing a request
# costs at most what tokenizing one prompt does (about 2 s on a 2-core CPU). Ordinary text is 3-5 characters
# a token, so this trips only where MAX_EMBED_WORK would after a tokenizer pass that this saves.
MAX_EMBED_CHARS = MAX_PROMPT_CHARS
# Tokens in all inputs together: OpenAI's own cap (token-id input is held to it before it is read).
MAX_EMBED_TOKENS = 300_000
# What one input costs beyond its tokens, counted in tokens: its own sequence in a shared decode, its pooled
# vector read out, normalised and sent back. Measured with inputs packed: about 2 tokens' worth on an
# all-MiniLM-L6-shaped BERT, too little to see on SmolLM2; 8 leaves room for the reply each input adds.
EMBED_INPUT_COST = 8
# The cap on one request's work: its tokens plus EMBED_INPUT_COST per input. Every request within OpenAI's own
# caps (2,048 inputs, 300,000 tokens) fits, so a client's batching made for OpenAI (LangChain sends 1,000
# inputs a request) works here unchanged. At the 290 tokens/s above that is ~18 minutes of engine time,
# which the cancel check below lets a client give back by leaving.
MAX_EMBED_WORK = MAX_EMBED_TOKENS + MAX_EMBED_INPUTS * EMBED_INPUT_COST


class EmbeddingsTooLarge(EngineError):
    """The request as a whole is over a cap (the characters of all its inputs, or their work: tokens plus
    EMBED_INPUT_COST per input): the API's 413. `tokens`: given for the work cap, `amount` is then the work."""

    code = "request_too_large"

    def __init__(self, what: str, amount: int, cap: int, n_inputs: int, tokens: int | None = None) -> None:
        held = f"{amount:,} {what},"
        if tokens is not None:  # the work cap: say how the request's work was counted
            held = f"{tokens:,} tokens, {amount:,} counted with {EMBED_INPUT_COST} more for each input,"
        super().__init__(
            f"the request's {n_inputs:,} inputs hold {held} over the {cap:,}-{what[:-1]} cap on one embeddings "
            "request; send them in smaller batches",
            param="input",
            amount=amount,
            cap=cap,
            **({} if tokens is None else {"tokens": tokens}),
        )


def embed_work(tokens: int, n_sequences: int) -> int:
    """A request's work against MAX_EMBED_WORK: its tokens plus EMBED_INPUT_COST for each input (or pair)."""
    return tokens + EMBED_INPUT_COST * n_sequences


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
    """The job's cancel flag was set (its client left, the server stopping): raised between two decodes
    (`unit`: what the inputs are, "documents" for a rerank; `done`: how many were embedded)."""

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
    work = embed_work(total, len(lengths))
    if work > MAX_EMBED_WORK:
        raise EmbeddingsTooLarge("tokens", work, MAX_EMBED_WORK, len(lengths), tokens=total)


def check_cancel(cancel: threading.Event | None, done: int, total: int, unit: str = "inputs") -> None:
    """Between two decodes (and two inputs while tokenizing): raise EmbeddingCancelled once the job is
    cancelled."""
    if cancel is not None and cancel.is_set():
        raise EmbeddingCancelled(done, total, unit)
