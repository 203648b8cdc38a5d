"""A model's shape for a deployment plan: parameters, and the ModelSpec the fit view's memory model
uses for the KV cache (layers, KV heads, head dims, sliding window, MLA).

Three sources, none of which downloads weights: a Hub repo (its config.json through HubClient, or for a
GGUF-only repo one quant's header by HTTP Range), a local GGUF, or a folder holding a config.json.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.deploy.errors import PlanError
from app.core.formats import GGUF
from app.core.models.errors import ModelFileError
from app.core.models.hf_config import check_folder_configs, spec_from_hf_config, text_config
from app.core.models.spec import ModelSpec

if TYPE_CHECKING:
    from app.core.hub.client import HubClient

logger = logging.getLogger(__name__)

# How a pre-quantized checkpoint's config names its format → the plan's dtype names.
_QUANT_METHODS = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "awq": "int4",
    "gptq": "int4",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "exl2": "exl",
    "exl3": "exl",
}
# The GGUF quant a GGUF-only Hub repo is planned with when nothing else is asked (the usual sweet spot).
PREFERRED_GGUF = ("Q4_K_M", "Q5_K_M", "Q8_0", "Q6_K")


@dataclass
class ModelShape:
    """What a plan needs to know about a model; `spec` is the fit view's ModelSpec."""

    name: str  # the repo id or the path, as the user gave it
    source: str  # "hub", "gguf" or "config"
    spec: ModelSpec
    n_params: int
    embed_params: int  # input embedding + output head: kept in 16 bits by FP8/INT4 engines
    active_params: int  # read per token (MoE: the routed experts only)
    max_ctx: int  # trained context; 0 when the config does not say
    native_dtype: str = "bf16"  # what the checkpoint stores: bf16, fp8, int4, nvfp4, mlx<bits>, exl<bpw>, gguf
    gguf_file: str | None = None  # a local GGUF's path, or the quant file of a GGUF-only repo
    gguf_quants: dict[str, int] = field(default_factory=dict)  # GGUF quant label -> file bytes

    @property
    def repo_id(self) -> str | None:
        return self.name if self.source == "hub" else None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def params_from_config(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """(total, embedding, active) parameters counted from a config's shapes: attention (GQA or MLA),
    gated FFN or experts, embeddings. Norms and biases (well under 0.1 %) are left out."""
    c = text_config(config)
    h, n_layers, vocab = _int(c.get("hidden_size")), _int(c.get("num_hidden_layers")), _int(c.get("vocab_size"))
    n_head = _int(c.get("num_attention_heads"))
    n_kv = _int(c.get("num_key_value_heads")) or n_head
    hd = _int(c.get("head_dim")) or (h // n_head if n_head else 0)
    if not (h and n_layers and n_head):
        raise PlanError("config.json lacks hidden_size, num_hidden_layers or num_attention_heads")
    embed = vocab * h * (1 if c.get("tie_word_embeddings") is True else 2)
    kv_lora = _int(c.get("kv_lora_rank"))
    if kv_lora:  # MLA: low-rank queries and a shared compressed KV projection
        q_lora, rope, nope = (
            _int(c.get("q_lora_rank")),
            _int(c.get("qk_rope_head_dim")),
            _int(c.get("qk_nope_head_dim")),
        )
        v_hd = _int(c.get("v_head_dim")) or nope
        q = h * q_lora + q_lora * n_head * (nope + rope) if q_lora else h * n_head * (nope + rope)
        attn = q + h * (kv_lora + rope) + kv_lora * n_head * (nope + v_hd) + n_head * v_hd * h
    else:
        attn = h * n_head * hd + 2 * h * n_kv * hd + n_head * hd * h
    ff = _int(c.get("intermediate_size"))
    n_exp = _int(c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts"))
    if n_exp > 1:
        used = _int(c.get("num_experts_per_tok")) or 1
        expert = 3 * h * (_int(c.get("moe_intermediate_size")) or ff)
        shared = _int(c.get("n_shared_experts")) * expert + 3 * h * _int(c.get("shared_expert_intermediate_size"))
        dense = min(_int(c.get("first_k_dense_replace")), n_layers)
        moe_layers = n_layers - dense
        total = n_layers * attn + dense * 3 * h * ff + moe_layers * (n_exp * expert + shared + h * n_exp) + embed
        active = total - moe_layers * (n_exp - used) * expert
        return total, embed, active
    total = n_layers * (attn + 3 * h * ff) + embed
    return total, embed, total


def native_dtype(config: Mapping[str, Any]) -> str:
    """The format a checkpoint is stored in, from its quantization_config (bf16 when none)."""
    mlx = config.get("quantization")
    if isinstance(mlx, Mapping) and isinstance(mlx.get("bits"), int):  # an mlx-lm conversion
        return f"mlx{mlx['bits']}"
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return "bf16"
    method = str(q.get("quant_method") or "").lower()
    bits = q.get("bits")
    if method in ("exl2", "exl3") and isinstance(bits, (int, float)) and not isinstance(bits, bool) and bits > 0:
        return f"exl{float(bits):g}"
    if method == "compressed-tensors":
        fmt = str(q.get("format") or "").lower()
        return "fp8" if "float" in fmt else "nvfp4" if "nvfp4" in fmt else "int4"
    if method == "modelopt":
        return "nvfp4" if "fp4" in str(q.get("quant_algo") or "").lower() else "fp8"
    return _QUANT_METHODS.get(method, "bf16")


def shape_from_config(config: Mapping[str, Any], name: str, source: str = "config") -> ModelShape:
    """A shape from a config.json alone; the spec's bytes are shared out as BF16."""
    if not isinstance(config, Mapping):
        raise PlanError(f"{name}: config.json is not a JSON object")
    total, embed, active = params_from_config(config)
    try:
        spec = spec_from_hf_config(config, weight_bytes=2 * total, n_params=total, name=name)
    except ModelFileError as exc:
        raise PlanError(f"{name}: {exc}") from exc
    return ModelShape(
        name=name,
        source=source,
        spec=spec,
        n_params=total,
        embed_params=embed,
        active_params=active,
        max_ctx=spec.n_ctx_train,
        native_dtype=native_dtype(config),
    )


def shape_from_gguf_spec(spec: ModelSpec, name: str, *, file: str | None, label: str, size: int) -> ModelShape:
    embed = spec.n_vocab * spec.n_embd * (1 if spec.tied_embeddings else 2)
    share = spec.bytes_per_token_read / spec.weight_bytes if spec.weight_bytes else 1.0
    return ModelShape(
        name=name,
        source="gguf",
        spec=spec,
        n_params=spec.n_params,
        embed_params=min(embed, spec.n_params),
        active_params=int(spec.n_params * min(1.0, share)),
        max_ctx=spec.n_ctx_train,
        native_dtype="gguf",
        gguf_file=file,
        gguf_quants={label: size},
    )


def shape_from_path(path: str | Path) -> ModelShape:
    """A local GGUF (any shard of a split set), or a folder holding at least a config.json."""
    p = Path(path).expanduser()
    if p.is_file():
        from app.core.models.local_variants import gguf_variant

        if not p.name.lower().endswith(".gguf"):
            raise PlanError(f"{p.name} is neither a GGUF file nor a folder with a config.json")
        try:
            v = gguf_variant(p)
        except ModelFileError as exc:
            raise PlanError(f"{p.name}: {exc}") from exc
        assert v.spec is not None
        return shape_from_gguf_spec(v.spec, str(path), file=str(p), label=v.label, size=v.size_bytes)
    if not (p / "config.json").is_file():
        raise PlanError(f"{path}: no GGUF file and no folder with a config.json there")
    try:
        check_folder_configs(p)
        config = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (ModelFileError, OSError, ValueError) as exc:
        raise PlanError(f"{path}: {exc}") from exc
    return shape_from_config(config, str(path))


def shape_from_hub(client: HubClient, repo_id: str, revision: str = "main") -> ModelShape:
    """A Hub repo through HubClient only: its config.json, else (a GGUF-only repo) one quant's header."""
    from app.core.hub.errors import HubNotFound, HubRefused

    try:
        return shape_from_config(client.config(repo_id, revision), repo_id, source="hub")
    except HubNotFound:
        logger.info("%s has no config.json; planning it from a GGUF header", repo_id)
    from app.core.hub.metadata import gguf_variant
    from app.core.hub.variants import repo_variants

    try:
        choices = [c for c in repo_variants(client, repo_id, revision) if c.format == GGUF]
    except HubRefused:
        choices = []
    if not choices:
        raise PlanError(f"{repo_id} has neither a config.json nor a GGUF file to plan from")
    by_label = {c.label.upper(): c for c in choices}
    pick = next((by_label[q] for q in PREFERRED_GGUF if q in by_label), max(choices, key=lambda c: c.size))
    v = gguf_variant(client, pick)
    assert v.spec is not None
    shards = [f.path for f in pick.files if f not in pick.mmproj]
    shape = shape_from_gguf_spec(v.spec, repo_id, file=shards[0], label=pick.label, size=pick.size)
    shape.source = "hub"
    shape.gguf_quants = {c.label: sum(f.size for f in c.files if f not in c.mmproj) for c in choices}
    return shape
