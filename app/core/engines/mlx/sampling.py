"""The MLX engine's per-request sampling, shared by its single-stream and batched paths: mlx-lm's
sampler and logits processors for a request, and logprobs from the model's own logits."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from app.core.engines.base import Logprobs, SamplingParams
from app.core.native import import_native


def build_sampling(s: SamplingParams, raw: deque[Any] | None = None) -> tuple[Any, list[Any]]:
    """(sampler, logits processors) for a request. With `raw`, the first processor keeps each step's
    logits there before bias and penalties change them (the distribution logprobs report)."""
    sample_utils = import_native("mlx_lm.sample_utils")
    sampler = sample_utils.make_sampler(
        temp=s.temperature,
        top_p=s.top_p if s.top_p < 1.0 else 0.0,
        min_p=s.min_p,
        top_k=s.top_k,
    )
    processors = sample_utils.make_logits_processors(
        logit_bias=s.logit_bias or None,
        repetition_penalty=s.repeat_penalty if s.repeat_penalty != 1.0 else None,
        presence_penalty=s.presence_penalty or None,
        frequency_penalty=s.frequency_penalty or None,
    )
    if raw is not None:
        processors = [keep_logits(raw), *processors]
    return sampler, list(processors)


def keep_logits(raw: deque[Any]) -> Callable[[Any, Any], Any]:
    """A logits processor that changes nothing and keeps each step's logits in `raw`."""

    def keep(_tokens: Any, logits: Any) -> Any:
        raw.append(logits)
        return logits

    return keep


def logprobs_of(logits: Any, token: int, n_top: int | None, token_bytes: Callable[[int], bytes]) -> Logprobs:
    from app.core.engines.decoding.logprobs import from_logits

    mx = import_native("mlx.core")
    np = import_native("numpy")
    vector = np.array(logits.astype(mx.float32)).reshape(-1)
    return from_logits(vector, token, token_bytes(token), n_top or 0, token_bytes)


def token_bytes_fn(tok: Any, hf: Any, cache: dict[int, bytes]) -> Callable[[int], bytes]:
    """A token's bytes, from the tables mlx-lm's streaming detokenizer decodes with: SentencePiece
    pieces (▁ for a space, <0xNN> bytes) or byte-level BPE symbols; any other tokenizer decodes the
    token alone (exact except for a character split across tokens). `cache` keeps what was computed."""
    table = getattr(tok.detokenizer, "tokenmap", None)
    byte_decoder = None
    if table is not None and table and isinstance(table[0], str):
        utils = import_native("mlx_lm.tokenizer_utils")
        make = getattr(utils, "_byte_decoder", None)
        byte_decoder = make() if make is not None else None
        if byte_decoder is None:
            table = None

    def token_bytes(token: int) -> bytes:
        found = cache.get(token)
        if found is not None:
            return found
        if table is not None and 0 <= token < len(table):
            entry = table[token]
            if isinstance(entry, bytes):
                found = entry.replace("\u2581".encode(), b" ")
            else:
                assert byte_decoder is not None
                # Added tokens (<|im_end|>) are not byte symbols: their characters stand for themselves.
                found = b"".join(bytes([byte_decoder[c]]) if c in byte_decoder else c.encode() for c in entry)
        else:
            found = hf.decode([token]).encode()
        cache[token] = found
        return found

    return token_bytes
