"""Which models share a tokenizer, from their GGUF headers: a draft model for speculative decoding must
(its token ids are checked by the main model as its own), and the picker offers only those that do, before
anything loads. The engine checks again against the loaded vocabularies (llamacpp_draft.check_same_vocab)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.core.models.gguf import GGUFHeader


@dataclass(frozen=True)
class Vocab:
    """A tokenizer's identity: its kind, size, BOS/EOS and a digest of every token's text, in order."""

    kind: str  # tokenizer.ggml.model: "gpt2", "llama", ...
    size: int
    bos: int | None
    eos: int | None
    digest: str


def vocab_of(header: GGUFHeader) -> Vocab | None:
    """The header's vocabulary; None when it has no token list (or one too large to have been kept)."""
    md = header.metadata
    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        return None
    h = hashlib.sha256()
    for token in tokens:
        h.update(str(token).encode("utf-8", "surrogatepass"))
        h.update(b"\0")  # "ab","c" and "a","bc" must not hash alike
    bos, eos = md.get("tokenizer.ggml.bos_token_id"), md.get("tokenizer.ggml.eos_token_id")
    return Vocab(
        kind=str(md.get("tokenizer.ggml.model") or ""),
        size=len(tokens),
        bos=bos if isinstance(bos, int) else None,
        eos=eos if isinstance(eos, int) else None,
        digest=h.hexdigest(),
    )


def vocab_mismatch(model: Vocab | None, draft: Vocab | None) -> str | None:
    """Why `draft` cannot draft for `model`, in words; None when their tokenizers are the same."""
    if model is None or draft is None:
        return "its vocabulary cannot be read from the file"
    if draft.size != model.size:
        return f"its vocabulary has {draft.size:,} tokens, the model's {model.size:,}"
    if (draft.bos, draft.eos) != (model.bos, model.eos):
        return "its BOS/EOS tokens differ from the model's"
    if (draft.kind, draft.digest) != (model.kind, model.digest):
        return "its tokens are spelled differently from the model's (another tokenizer)"
    return None
