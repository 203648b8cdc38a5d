"""ModelSpec: the architecture facts the memory and speed models need, from GGUF metadata."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.models.errors import ModelFileError
from app.core.models.gguf import GGUFHeader
from app.core.models.roles import ModelRole, role_of

_BLOCK = re.compile(r"^blk\.(\d+)\.")
# Tensors whose bytes belong to the experts (only n_expert_used of n_expert are read per token).
_EXPERT = re.compile(r"\.ffn_(gate|up|down|gate_up)_exps\.")

# llama.cpp's default sliding-window pattern per architecture: every n-th layer is global.
SWA_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "llama4": 4}
RECURRENT_ARCHS = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
# The CPU REPACK path (AVX2/AVX-512/NEON-dotprod kernels) keeps an interleaved copy of these types
# (seen in llama.cpp 0.3.36's buffer reports); token_embd only for the types in REPACK_EMBEDDINGS.
REPACK_TYPES = {"Q4_0", "Q4_K", "IQ4_NL"}
REPACK_EMBEDDINGS = {"Q4_0", "IQ4_NL"}


@dataclass
class ModelSpec:
    architecture: str
    name: str = ""
    n_params: int = 0
    n_layers: int = 0
    n_embd: int = 0
    n_ff: int = 0
    n_head: int = 0
    n_head_kv: list[int] = field(default_factory=list)  # per layer (GQA; 0 = no attention)
    head_dim_k: int = 0
    head_dim_v: int = 0
    n_ctx_train: int = 0
    n_vocab: int = 0
    sliding_window: int = 0  # 0: no sliding-window attention
    swa_layers: list[bool] = field(default_factory=list)  # per layer: True = sliding window
    n_expert: int = 0
    n_expert_used: int = 0
    kv_lora_rank: int = 0  # MLA (DeepSeek-2/3): the cache holds compressed latents
    rope_dim_mla: int = 0
    recurrent_state_bytes: int = 0  # per sequence, fixed (Mamba/RWKV), f32
    block_bytes: list[int] = field(default_factory=list)  # exact tensor bytes of blk.N
    expert_bytes: list[int] = field(default_factory=list)  # of which expert tensors, per block
    input_bytes: int = 0  # token_embd (+ its norm)
    output_bytes: int = 0  # output.weight, or the tied embedding read again
    other_bytes: int = 0  # output_norm, rope factors, ...
    tied_embeddings: bool = False
    file_type: str | None = None  # "Q4_K_M"
    file_bytes: int = 0
    has_chat_template: bool = False
    tensor_types: dict[str, int] = field(default_factory=dict)  # ggml type name -> bytes
    repack_block_bytes: list[int] = field(default_factory=list)  # per block, copied by CPU REPACK
    repack_embd_bytes: int = 0
    role: ModelRole = "chat"  # what the model is for: chat, embeddings or reranking (roles.role_of)

    @property
    def weight_bytes(self) -> int:
        """Bytes of every tensor in the file(s); a tied output is stored once."""
        tied = self.output_bytes if self.tied_embeddings else 0
        return sum(self.block_bytes) + self.input_bytes + self.output_bytes - tied + self.other_bytes

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 1

    @property
    def bytes_per_token_read(self) -> int:
        """Weight bytes one decoded token reads: all dense tensors, only the active experts."""
        active = 0
        for blk, exp in zip(self.block_bytes, self.expert_bytes or [0] * len(self.block_bytes)):
            share = self.n_expert_used / self.n_expert if self.is_moe else 1.0
            active += (blk - exp) + int(exp * share)
        # The input embedding is a row lookup (get_rows), not a matrix product.
        return active + self.output_bytes + self.other_bytes

    def kv_heads(self, layer: int) -> int:
        return self.n_head_kv[layer] if layer < len(self.n_head_kv) else 0


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    return default


def _per_layer(value: Any, n_layers: int, default: int) -> list[int]:
    if isinstance(value, list):
        vals = [_int(x, default) for x in value[:n_layers]]
        return vals + [vals[-1] if vals else default] * (n_layers - len(vals))
    return [_int(value, default)] * n_layers


def spec_from_gguf(headers: GGUFHeader | Sequence[GGUFHeader]) -> ModelSpec:
    """Build a ModelSpec from one GGUF header, or from every shard of a split model."""
    shards = [headers] if isinstance(headers, GGUFHeader) else list(headers)
    if not shards:
        raise ModelFileError("no GGUF header to read the model from")
    first = shards[0]
    arch = first.architecture
    if not arch:
        raise ModelFileError("the GGUF has no general.architecture")
    md = first.metadata

    def a(key: str, default: Any = None) -> Any:
        return md.get(f"{arch}.{key}", default)

    n_layers = _int(a("block_count"))
    n_embd = _int(a("embedding_length"))
    head_counts = _per_layer(a("attention.head_count"), n_layers, 0)
    n_head = max(head_counts) if head_counts else 0
    n_head_kv = _per_layer(a("attention.head_count_kv", a("attention.head_count")), n_layers, n_head)
    default_hd = n_embd // n_head if n_head else 0
    spec = ModelSpec(
        architecture=arch,
        name=str(md.get("general.name") or md.get("general.basename") or ""),
        n_layers=n_layers,
        n_embd=n_embd,
        n_ff=max(_per_layer(a("feed_forward_length"), n_layers, 0) or [0]),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=_int(a("attention.key_length"), default_hd),
        head_dim_v=_int(a("attention.value_length"), default_hd),
        n_ctx_train=_int(a("context_length")),
        n_vocab=first.vocab_size or _int(a("vocab_size")),
        n_expert=_int(a("expert_count")),
        n_expert_used=_int(a("expert_used_count")),
        kv_lora_rank=_int(a("attention.kv_lora_rank")),
        rope_dim_mla=_int(a("rope.dimension_count")) if a("attention.kv_lora_rank") else 0,
        file_type=first.ftype_label,
        has_chat_template=first.chat_template is not None,
        file_bytes=sum(h.file_size or 0 for h in shards),
        role=role_of(md, {t.name for h in shards for t in h.tensors}),
    )
    if spec.kv_lora_rank:
        # With MLA the cache stores the latent (kv_lora_rank) plus the rope part per token, one "head".
        spec.head_dim_k = spec.kv_lora_rank + spec.rope_dim_mla
        spec.head_dim_v = spec.kv_lora_rank
        spec.n_head_kv = [1] * n_layers
    _sliding_window(spec, a)
    _recurrent_state(spec, a)
    _tensor_bytes(spec, shards)
    return spec


def _sliding_window(spec: ModelSpec, a) -> None:
    window = _int(a("attention.sliding_window"))
    if not window:
        spec.swa_layers = [False] * spec.n_layers
        return
    spec.sliding_window = window
    pattern = a("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        flags = [bool(x) for x in pattern[: spec.n_layers]]
        spec.swa_layers = flags + [False] * (spec.n_layers - len(flags))
        return
    n = _int(pattern, SWA_PATTERN_DEFAULTS.get(spec.architecture, 0))
    # llama.cpp's set_swa_pattern(n): layer il is sliding when il % n < n - 1; n == 0: all sliding.
    spec.swa_layers = [n == 0 or (il % n) < (n - 1) for il in range(spec.n_layers)]


def _recurrent_state(spec: ModelSpec, a) -> None:
    d_inner = _int(a("ssm.inner_size"))
    if d_inner:
        d_conv, d_state = _int(a("ssm.conv_kernel")), _int(a("ssm.state_size"))
        n_group = max(1, _int(a("ssm.group_count"), 1))
        conv = (d_conv - 1) * (d_inner + 2 * n_group * d_state)
        ssm = d_state * d_inner
        per_layer = 4 * (conv + ssm)
        recurrent = [h == 0 for h in spec.n_head_kv] if any(spec.n_head_kv) else [True] * spec.n_layers
        spec.recurrent_state_bytes = per_layer * sum(recurrent)
        if not any(spec.n_head_kv) or spec.architecture in RECURRENT_ARCHS:
            spec.n_head_kv = [0] * spec.n_layers
    elif spec.architecture.startswith("rwkv"):
        head = _int(a("wkv.head_size"), 64)
        # token-shift (2 × n_embd) + wkv state (n_embd × head_size), f32, per layer
        spec.recurrent_state_bytes = 4 * spec.n_layers * (2 * spec.n_embd + spec.n_embd * head)
        spec.n_head_kv = [0] * spec.n_layers


def _tensor_bytes(spec: ModelSpec, shards: Sequence[GGUFHeader]) -> None:
    blocks = [0] * spec.n_layers
    experts = [0] * spec.n_layers
    repack = [0] * spec.n_layers
    has_output = False
    embd = 0
    for h in shards:
        for t in h.tensors:
            spec.n_params += t.n_elements
            spec.tensor_types[t.type_name] = spec.tensor_types.get(t.type_name, 0) + t.nbytes
            m = _BLOCK.match(t.name)
            if m:
                il = int(m.group(1))
                if il >= len(blocks):
                    grow = [0] * (il + 1 - len(blocks))
                    blocks.extend(grow)
                    experts.extend(grow)
                    repack.extend(grow)
                blocks[il] += t.nbytes
                if t.type_name in REPACK_TYPES and len(t.dims) >= 2:
                    repack[il] += t.nbytes
                if _EXPERT.search(t.name):
                    experts[il] += t.nbytes
            elif t.name.startswith("token_embd"):
                spec.input_bytes += t.nbytes
                if t.name == "token_embd.weight":
                    embd = t.nbytes
                    if t.type_name in REPACK_EMBEDDINGS:
                        spec.repack_embd_bytes = t.nbytes
            elif t.name == "output.weight":
                spec.output_bytes += t.nbytes
                has_output = True
            else:
                spec.other_bytes += t.nbytes
    if not has_output and embd:
        spec.tied_embeddings = True
        spec.output_bytes = embd
    spec.block_bytes = blocks
    spec.expert_bytes = experts
    spec.repack_block_bytes = repack
