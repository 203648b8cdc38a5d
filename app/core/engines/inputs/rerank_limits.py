"""Bounds on one rerank request, and its cancel: embed_limits' caps (security.md T40) applied to the
(query, document) pairs a reranker scores.

Each pair is one sequence of a shared decode (llamacpp.embed packs as many as the context takes), and every
pair holds the query again: 1,000 documents under a 2,000-token query would be two million tokens of engine
time. So the pairs' work (their tokens plus EMBED_INPUT_COST a pair) counts against the embeddings work cap,
each pair must fit the context in one decode, and the cancel flag is checked between decodes. The query is
tokenized once, so the character cap counts it once.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.engines.errors import MAX_PROMPT_CHARS, ContextLengthExceeded, EngineError, InvalidRequest, PromptTooLong
from app.core.engines.inputs.embed_limits import EMBED_INPUT_COST, MAX_EMBED_CHARS, MAX_EMBED_WORK, embed_work

# Cohere's cap on documents per request: rerank clients already batch to it.
MAX_RERANK_DOCUMENTS = 1000


class RerankTooLarge(EngineError):
    """The request as a whole is over a cap (characters, or the work of all its pairs: tokens plus
    EMBED_INPUT_COST a pair): the API's 413. `tokens`: given for the work cap, `amount` is then the work."""

    code = "request_too_large"

    def __init__(self, what: str, amount: int, cap: int, n_documents: int, tokens: int | None = None) -> None:
        held = f"{amount:,} {what} with the query,"
        if tokens is not None:  # the work cap: say how the request's work was counted
            held = f"{tokens:,} tokens with the query, {amount:,} counted with {EMBED_INPUT_COST} more a document,"
        super().__init__(
            f"the rerank request's {n_documents:,} documents hold {held} over the {cap:,}-{what[:-1]} cap on one "
            "request; send fewer or shorter documents",
            param="documents",
            amount=amount,
            cap=cap,
            **({} if tokens is None else {"tokens": tokens}),
        )


class PairTooLong(ContextLengthExceeded):
    """One (query, document) pair has more tokens than the reranker's context takes in its single decode."""

    def __init__(self, param: str, index: int | None, tokens: int, n_tokens: int) -> None:
        what = "the query" if index is None else f"document {index} with the query"
        EngineError.__init__(
            self,
            f"{what} has {tokens:,} tokens but the reranker's context holds {n_tokens:,}; shorten it or split it",
            param=param,
            prompt_tokens=tokens,
            n_ctx=n_tokens,
            index=index,
        )


def check_rerank_texts(query: str, documents: Sequence[str]) -> None:
    """Before tokenizing: a query, one document at least and not too many, and the characters of each text
    (one prompt's cap) and of all of them."""
    if not query.strip():
        raise InvalidRequest("the query is empty: give the text to rank the documents against", "query")
    if not documents:
        raise InvalidRequest("there are no documents to rank: give at least one", "documents")
    if len(documents) > MAX_RERANK_DOCUMENTS:
        raise InvalidRequest(
            f"the request has {len(documents):,} documents, over the {MAX_RERANK_DOCUMENTS:,} one rerank takes",
            "documents",
        )
    for param, text in (("query", query), *(("documents", d) for d in documents)):
        if len(text) > MAX_PROMPT_CHARS:
            error = PromptTooLong(len(text))
            error.details["param"] = param
            raise error
    total = len(query) + sum(len(d) for d in documents)
    if total > MAX_EMBED_CHARS:
        raise RerankTooLarge("characters", total, MAX_EMBED_CHARS, len(documents))


def check_pair_tokens(query_tokens: int, pair_lengths: Sequence[int], n_tokens: int) -> None:
    """After tokenizing, before the first decode: a pair over the context (the query alone first, as it is
    in every pair), and the work of all pairs together."""
    if query_tokens >= n_tokens:
        raise PairTooLong("query", None, query_tokens, n_tokens)
    for i, n in enumerate(pair_lengths):
        if n > n_tokens:
            raise PairTooLong("documents", i, n, n_tokens)
    total = sum(pair_lengths)
    work = embed_work(total, len(pair_lengths))
    if work > MAX_EMBED_WORK:
        raise RerankTooLarge("tokens", work, MAX_EMBED_WORK, len(pair_lengths), tokens=total)
