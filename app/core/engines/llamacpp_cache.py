"""The single-stream context's cache, kept between requests: how much of a new prompt the cached tokens
already hold (only the rest is evaluated), and the thin one-token decode the generation loop runs.
Both work on a `llama_cpp.Llama` owned by the engine-host thread."""

from __future__ import annotations

from typing import Any


def decode_one(llm: Any, token: int) -> None:
    """`Llama.eval([token])` without its per-call KV sweep (the cache past n_tokens is already clear
    while decoding): the decode loop runs this once a token, so it stays as thin as llama-server's."""
    n_past = llm.n_tokens
    llm._batch.set_batch(batch=[token], n_past=n_past, logits_all=False)
    llm._ctx.decode(llm._batch)
    llm.input_ids[n_past] = token
    llm.n_tokens = n_past + 1


def reuse_prefix(llm: Any, tokens: list[int]) -> int:
    """Keep the cached prefix shared with `tokens` and drop the rest; returns how many are kept."""
    common = 0
    for a, b in zip(llm._input_ids.tolist(), tokens):
        if a != b:
            break
        common += 1
    if common == len(tokens):
        common -= 1  # re-evaluate the last prompt token so fresh logits exist to sample from
    if common > 0 and llm._ctx.kv_cache_seq_rm(-1, common, -1):
        llm.n_tokens = common
        return common
    llm.reset()
    llm._ctx.kv_cache_clear()
    return 0
