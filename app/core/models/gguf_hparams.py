"""Hyper-parameter checks on a parsed GGUF header, before llama.cpp sees them (security.md T5, issue 31).

llama.cpp trusts these values: a layer count of 0 or above LLAMA_MAX_LAYERS, more experts used than there
are, or an unknown RoPE scaling type end in GGML_ASSERT, which aborts the whole process (the server with
it). Others (head counts that do not divide, a RoPE width past the head, duplicate tokens) reach a division
or an assertion later. Each check here raises ModelFileError naming the key and its value.

Only what llama.cpp divides by, loops over or asserts on is checked, and only where the key is present:
a missing required key is a clean error in llama.cpp already. Real models pass (the tests run every local
GGUF, including llama.cpp's vocab files of many architectures, through it).
"""

from __future__ import annotations

import logging
from typing import Any

from app.core.models.errors import ModelFileError

logger = logging.getLogger(__name__)

# llama.cpp's own limits (llama-hparams.h): above them load_hparams aborts rather than throws.
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
# Sanity caps far above any real model, so uint32 products in llama.cpp (heads x head size, ...) stay small.
MAX_CONTEXT_LENGTH = 1 << 27  # 134M tokens; the longest real claim is 10M (Llama 4 Scout)
MAX_EMBEDDING_LENGTH = 1 << 20  # real models: up to ~25k
MAX_HEADS = 1 << 14  # real models: up to 128
MAX_HEAD_LENGTH = 1 << 16  # key/value length per head; real models: up to 576 (MLA)
MAX_FEED_FORWARD_LENGTH = 1 << 22  # real models: up to ~100k
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama.cpp asserts on any other
# llama.cpp reads no hyper-parameters for these (an image encoder's keys live elsewhere).
SKIPPED_ARCHS = frozenset({"clip"})
# Archs whose layers may have no attention at all (head counts of 0 are then real, not hostile).
ATTENTION_FREE_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
ATTENTION_FREE_KEYS = ("ssm.", "wkv.", "shortconv.")
# Archs whose token embedding is not {embedding_length, n_tokens} (a draft head, an audio decoder).
EMBEDDING_SHAPE_EXEMPT = frozenset({"eagle3", "wavtokenizer-dec"})
# Hunyuan zeroes an expert count of 1 before llama.cpp's expert checks.
HUNYUAN_ARCHS = frozenset({"hunyuan-dense", "hunyuan-vl"})
SPECIAL_TOKENS = ("bos", "eos", "eot", "eom", "unk", "sep", "padding", "mask", "cls")
# Special tokens llama.cpp adds on its own when the add_* flag is set: one outside the vocabulary is
# disabled, and adding a disabled token is a GGML_ASSERT.
ADDED_TOKENS = {"bos": "add_bos_token", "eos": "add_eos_token", "sep": "add_sep_token"}


def check_hparams(metadata: dict[str, Any], tensors: list[Any]) -> None:
    """Raise ModelFileError if a hyper-parameter would crash llama.cpp; `tensors`: TensorInfo items."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch in SKIPPED_ARCHS:
        return  # not a model header (a later shard of a split model), or one llama.cpp reads no hparams of
    _Checker(arch, metadata, tensors).run()


class _Checker:
    def __init__(self, arch: str, metadata: dict[str, Any], tensors: list[Any]) -> None:
        self.arch = arch
        self.md = metadata
        self.tensors = {t.name: t for t in tensors}
        self.n_layer = 0

    def key(self, name: str) -> str:
        return f"{self.arch}.{name}"

    def int_value(self, name: str, *, full_key: bool = False) -> int | None:
        """The integer at `arch.name` (or the key `name`), None if absent; other types are an error."""
        key = name if full_key else self.key(name)
        if key not in self.md:
            return None
        value = self.md[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelFileError(f"{key} is {_show(value)}; it must be an integer")
        return value

    def per_layer(self, name: str) -> list[int] | None:
        """A per-layer value (one integer, or an array of one per layer) as a list; None if absent."""
        key = self.key(name)
        if key not in self.md:
            return None
        value = self.md[key]
        if not isinstance(value, list):
            return [self.int_value(name) or 0] * max(self.n_layer, 1)
        if self.n_layer and len(value) != self.n_layer:
            raise ModelFileError(f"{key} has {len(value)} entries; the model has {_layers(self.n_layer)}")
        if not value:
            raise ModelFileError(f"{key} is an empty array; it needs one entry per layer")
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ModelFileError(f"{key}[{i}] is {_show(v)}; it must be an integer")
            if v < 0:
                raise ModelFileError(f"{key}[{i}] is {v}; it cannot be negative")
        return list(value)

    def run(self) -> None:
        self.layers()
        self.experts()
        heads = self.attention()
        self.embedding(heads)
        self.feed_forward()
        self.context()
        self.rope_scaling()
        self.vocabulary()

    def layers(self) -> None:
        n = self.int_value("block_count")
        if n is None:
            return  # llama.cpp refuses a model without it, cleanly
        if n < 1:
            raise ModelFileError(f"{self.key('block_count')} is {n}; a model needs at least one layer")
        if n > MAX_LAYERS:
            raise ModelFileError(f"{self.key('block_count')} is {n}; llama.cpp supports at most {MAX_LAYERS} layers")
        self.n_layer = n
        nextn = self.int_value("nextn_predict_layers")
        if nextn is not None and not 0 <= nextn <= n:
            raise ModelFileError(f"{self.key('nextn_predict_layers')} is {nextn}; the model has only {_layers(n)}")

    def experts(self) -> None:
        count = self.int_value("expert_count") or 0
        used_all = self.per_layer("expert_used_count") or [0]
        groups = self.int_value("expert_group_count") or 0
        group_used = self.int_value("expert_group_used_count") or 0
        if count < 0 or count > MAX_EXPERTS:
            raise ModelFileError(f"{self.key('expert_count')} is {count}; llama.cpp supports 0 to {MAX_EXPERTS}")
        if self.arch in HUNYUAN_ARCHS and count <= 1:
            return
        used = max(used_all)
        if min(used_all) < 0 or used > count:
            raise ModelFileError(
                f"{self.key('expert_used_count')} is {used}; it cannot exceed {self.key('expert_count')} ({count})"
            )
        if count and not used:
            raise ModelFileError(f"{self.key('expert_used_count')} is 0; a model with {count} experts must use one")
        if not count and groups:
            raise ModelFileError(f"{self.key('expert_group_count')} is {groups}; the model has no experts")
        if groups < 0 or (count and groups >= count):
            raise ModelFileError(f"{self.key('expert_group_count')} is {groups}; it must be below {count} experts")
        if groups > 1:
            if count % groups:
                raise ModelFileError(
                    f"{self.key('expert_group_count')} is {groups}; it must divide the {count} experts"
                )
            if not 0 < group_used < groups:
                raise ModelFileError(
                    f"{self.key('expert_group_used_count')} is {group_used}; it must be 1 to {groups - 1}"
                )

    def attention_free(self) -> bool:
        prefix = self.arch + "."
        return self.arch in ATTENTION_FREE_ARCHS or any(
            k.startswith(prefix) and k[len(prefix) :].startswith(ATTENTION_FREE_KEYS) for k in self.md
        )

    def attention(self) -> list[int] | None:
        """Check the head counts; returns heads per layer (None if the file gives none)."""
        heads = self.per_layer("attention.head_count")
        key, key_kv = self.key("attention.head_count"), self.key("attention.head_count_kv")
        if heads is None:
            return None
        scalar = not isinstance(self.md[key], list)
        if scalar and heads[0] < 0:
            raise ModelFileError(f"{key} is {heads[0]}; it cannot be negative")
        if scalar and heads[0] == 0 and not self.attention_free():
            raise ModelFileError(f"{key} is 0; an attention model needs at least one head")
        if max(heads) > MAX_HEADS:
            raise ModelFileError(f"{key} is {max(heads)}; that is above the sanity cap of {MAX_HEADS:,}")
        kv = self.per_layer("attention.head_count_kv")
        if kv is None:
            return heads
        kv_scalar = not isinstance(self.md[key_kv], list)
        if kv_scalar and kv[0] < 0:
            raise ModelFileError(f"{key_kv} is {kv[0]}; it cannot be negative")
        if kv_scalar and scalar and kv[0] == 0 and heads[0] > 0:
            raise ModelFileError(f"{key_kv} is 0; a model with {heads[0]} attention heads needs at least one")
        for il, (h, k) in enumerate(zip(heads, kv)):
            if k and (not h or h % k):
                where = "" if scalar and kv_scalar else f" at layer {il}"
                raise ModelFileError(f"{key_kv} is {k}{where}; it must divide {key} ({h})")
        return heads

    def embedding(self, heads: list[int] | None) -> None:
        key = self.key("embedding_length")
        n_embd = self.int_value("embedding_length")
        if n_embd is None:
            return
        if not 1 <= n_embd <= MAX_EMBEDDING_LENGTH:
            raise ModelFileError(f"{key} is {n_embd}; it must be 1 to {MAX_EMBEDDING_LENGTH:,}")
        lengths = {}
        for name in ("attention.key_length", "attention.value_length"):
            value = self.int_value(name)
            if value is not None and not 1 <= value <= MAX_HEAD_LENGTH:
                raise ModelFileError(f"{self.key(name)} is {value}; it must be 1 to {MAX_HEAD_LENGTH:,}")
            lengths[name] = value
        head_k = lengths["attention.key_length"]
        n_head = heads[0] if heads else 0
        if head_k is None and n_head:
            # Without explicit lengths llama.cpp's head size is embedding_length / head_count: it must divide.
            if lengths["attention.value_length"] is None and n_embd % n_head:
                raise ModelFileError(
                    f"{key} is {n_embd}; it must divide by {self.key('attention.head_count')} ({n_head})"
                )
            head_k = n_embd // n_head
        self.rope(head_k)
        self.embedding_tensor(n_embd)

    def rope(self, head_k: int | None) -> None:
        key = self.key("rope.dimension_count")
        n_rot = self.int_value("rope.dimension_count")
        if n_rot is None:
            return
        if n_rot < 0 or n_rot % 2:
            raise ModelFileError(f"{key} is {n_rot}; RoPE rotates pairs, so it must be even")
        if head_k is not None and n_rot > head_k:
            raise ModelFileError(f"{key} is {n_rot}; it cannot exceed the head size ({head_k})")

    def embedding_tensor(self, n_embd: int) -> None:
        t = self.tensors.get("token_embd.weight")
        if t is None or len(t.dims) != 2 or self.arch in EMBEDDING_SHAPE_EXEMPT:
            return
        if self.key("features_length") not in self.md and t.dims[0] != n_embd:
            raise ModelFileError(f"token_embd.weight is {t.dims[0]} wide; {self.key('embedding_length')} says {n_embd}")

    def feed_forward(self) -> None:
        ff = self.per_layer("feed_forward_length")
        if ff is None:
            return
        key = self.key("feed_forward_length")
        if min(ff) < 0:
            raise ModelFileError(f"{key} is {min(ff)}; it cannot be negative")
        if max(ff) > MAX_FEED_FORWARD_LENGTH:
            raise ModelFileError(f"{key} is {max(ff)}; that is above the sanity cap of {MAX_FEED_FORWARD_LENGTH:,}")

    def context(self) -> None:
        n = self.int_value("context_length")
        if n is not None and not 1 <= n <= MAX_CONTEXT_LENGTH:
            raise ModelFileError(f"{self.key('context_length')} is {n}; it must be 1 to {MAX_CONTEXT_LENGTH:,}")

    def rope_scaling(self) -> None:
        key = self.key("rope.scaling.type")
        if key in self.md and self.md[key] not in ROPE_SCALING_TYPES:
            raise ModelFileError(f"{key} is {_show(self.md[key])}; llama.cpp knows {', '.join(ROPE_SCALING_TYPES)}")

    def vocabulary(self) -> None:
        tokens = self.md.get("tokenizer.ggml.tokens")
        if tokens is None:
            return
        if not hasattr(tokens, "__len__") or isinstance(tokens, str):
            raise ModelFileError(f"tokenizer.ggml.tokens is {_show(tokens)}; it must be an array of strings")
        n_vocab = len(tokens)
        if n_vocab < 1:
            raise ModelFileError("tokenizer.ggml.tokens is empty; a model needs at least one token")
        if isinstance(tokens, list):
            self.unique_tokens(tokens)
        t = self.tensors.get("token_embd.weight")
        if t is not None and len(t.dims) == 2 and self.arch not in EMBEDDING_SHAPE_EXEMPT and t.dims[1] != n_vocab:
            raise ModelFileError(f"token_embd.weight has {t.dims[1]} rows; tokenizer.ggml.tokens has {n_vocab} tokens")
        for name in SPECIAL_TOKENS:
            key = f"tokenizer.ggml.{name}_token_id"
            token = self.int_value(key, full_key=True)
            if token is None or 0 <= token < n_vocab:
                continue
            flag = ADDED_TOKENS.get(name)
            if flag and self.md.get(f"tokenizer.ggml.{flag}") is True:
                raise ModelFileError(
                    f"{key} is {token}, outside the {n_vocab}-token vocabulary, yet tokenizer.ggml.{flag} is set"
                )
            # llama.cpp disables a special token outside the vocabulary (with a warning): harmless on its own.
            logger.warning("%s is %d, outside the %d-token vocabulary; llama.cpp will ignore it", key, token, n_vocab)

    def unique_tokens(self, tokens: list[Any]) -> None:
        # llama.cpp asserts that every token text maps to one id (it renames empty ones to [EMPTY_i] first).
        seen: dict[str, int] = {}
        for i, text in enumerate(tokens):
            if not isinstance(text, str):
                raise ModelFileError(f"tokenizer.ggml.tokens[{i}] is {_show(text)}; tokens must be strings")
            text = text or f"[EMPTY_{i}]"
            first = seen.setdefault(text, i)
            if first != i:
                raise ModelFileError(
                    f"tokenizer.ggml.tokens has {_show(text)} twice (ids {first} and {i}); "
                    "llama.cpp needs every token to be unique"
                )


def _layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"


def _show(value: Any) -> str:
    """A value from the file, short and with control characters escaped, for a message."""
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    if isinstance(value, (list, tuple)):
        return f"an array of {len(value)} items"
    return repr(value) if isinstance(value, (int, float, bool)) else f"a {type(value).__name__}"
