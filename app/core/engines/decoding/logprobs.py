"""Per-token log-probabilities from a logits vector, for the engines that have one (llama.cpp, MLX).

What OpenAI and llama-server report: the model's own distribution at the position, a log-softmax of its
raw logits, so a logit_bias or a penalty changes what is sampled but not the probabilities shown.
Called only when a request asks for logprobs; numpy is imported then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.engines.base import Logprobs, TokenLogprob
from app.core.native import import_native


def from_logits(logits: Any, token: int, token_bytes: bytes, n_top: int, piece: Callable[[int], bytes]) -> Logprobs:
    """`logits`: the vocabulary's raw logits (anything numpy reads); `token`: the sampled id, shown as
    `token_bytes`; `piece(id)`: the bytes of an alternative."""
    np = import_native("numpy")
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    top = float(x.max())
    lse = top + float(np.log(np.exp(x - top).sum()))
    sampled = TokenLogprob(token, token_bytes, float(x[token]) - lse)
    if n_top <= 0:
        return Logprobs(sampled)
    k = min(n_top, x.size)
    cutoff = x[np.argpartition(x, x.size - k)[x.size - k]]  # the k-th largest logit
    ids = np.flatnonzero(x >= cutoff)  # ties at the cutoff too, so which of them stays is not arbitrary
    ids = ids[np.lexsort((ids, -x[ids]))][:k]  # most likely first; equal logits by id
    alternatives = tuple(
        sampled if int(i) == token else TokenLogprob(int(i), piece(int(i)), float(x[i]) - lse) for i in ids
    )
    return Logprobs(sampled, alternatives)
