"""Which models share a tokenizer, from their GGUF headers or MLX tokenizer files: a draft model for
speculative decoding must (its token ids are checked by the main model as its own), and the picker offers
only those that do, before anything loads. The engines check again against the loaded vocabularies
(llamacpp.draft.check_same_vocab, mlx.draft.check_same_tokenizer)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from app.core.models.gguf import GGUFHeader


@dataclass(frozen=True)
class Vocab:
    """A tokenizer's identity: its kind, size, BOS/EOS and a digest of every token's text, in order."""

    kind: str  # GGUF: tokenizer.ggml.model ("gpt2", "llama"); MLX: tokenizer.json's model type ("BPE")
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


def mlx_vocab(folder: Path) -> Vocab | None:
    """An MLX (Hugging Face) folder's vocabulary, from tokenizer.json and tokenizer_config.json; None when
    it cannot be read."""
    try:
        tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except (OSError, ValueError):
        return None
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict) or not model["vocab"]:
        return None
    vocab = model["vocab"]
    ids = {str(text): i for text, i in vocab.items() if isinstance(i, int)}
    for added in tok.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            ids[str(added.get("content"))] = added["id"]
    h = hashlib.sha256()
    for text, i in sorted(ids.items(), key=lambda kv: kv[1]):
        h.update(f"{i}\0{text}\0".encode("utf-8", "surrogatepass"))
    config = config if isinstance(config, dict) else {}
    return Vocab(
        kind=str(model.get("type") or ""),
        size=len(ids),
        bos=ids.get(_token(config.get("bos_token"))),
        eos=ids.get(_token(config.get("eos_token"))),
        digest=h.hexdigest(),
    )


def _token(value: object) -> str:
    """tokenizer_config's "eos_token": a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""
