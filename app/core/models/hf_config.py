"""ModelSpec from a Hugging Face `config.json` (MLX and EXL2 repos), with exact per-block bytes
when the safetensors tensor table is known.

A config that asks to run code from the repo (`auto_map`, `model_file`) is refused (security T6).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.core.models.errors import ModelFileError
from app.core.models.spec import SWA_PATTERN_DEFAULTS, ModelSpec

__all__ = ["ARCH_ALIASES", "check_folder_configs", "check_no_remote_code", "spec_from_hf_config", "text_config"]

logger = logging.getLogger(__name__)

# HF model_type -> llama.cpp architecture name, where they differ and the spec cares.
ARCH_ALIASES = {
    "gemma3_text": "gemma3",
    "gemma3n_text": "gemma3n",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "llama4_text": "llama4",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "gpt_oss": "gpt-oss",
}
_CODE_KEYS = ("auto_map", "model_file")
# The JSON files of a model folder that can name code to run.
FOLDER_CONFIGS = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# Expert tensors: HF `experts.N.` / stacked `experts.`, MLX `switch_mlp.`; shared experts are always read.
_EXPERT = re.compile(r"\.(?:experts|switch_mlp)\.")
MAX_LAYERS = 10_000


def check_no_remote_code(config: Mapping[str, Any]) -> None:
    """Refuse configs that want `trust_remote_code` (checked at the top and in nested configs)."""
    stack: list[Any] = [config]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if any(k in item for k in _CODE_KEYS):
                raise ModelFileError("this model wants to run its own code; Hearth never runs code from a model repo")
            stack.extend(v for v in item.values() if isinstance(v, Mapping))


def check_folder_configs(folder: Path) -> None:
    """Refuse a model folder whose config files ask for remote code; an unreadable one is an error."""
    for name in FOLDER_CONFIGS:
        file = folder / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise ModelFileError(f"cannot read {name}: {exc}") from exc
        if isinstance(data, dict):
            check_no_remote_code(data)


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's settings: multimodal configs keep them under `text_config`."""
    out = dict(config)
    inner = config.get("text_config")
    if isinstance(inner, Mapping):
        out.update(inner)
        if "model_type" in inner:
            out["model_type"] = inner["model_type"]
    return out


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and value == value and abs(value) < 2**53:
        return max(0, int(value))
    return default


def _swa_layers(cfg: Mapping[str, Any], arch: str, n_layers: int) -> tuple[int, list[bool]]:
    window = _int(cfg.get("sliding_window"))
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        flags = [t == "sliding_attention" for t in layer_types[:n_layers]]
        flags += [False] * (n_layers - len(flags))
        return (window if any(flags) else 0), flags
    if not window or cfg.get("use_sliding_window") is False:
        return 0, [False] * n_layers
    n = _int(cfg.get("sliding_window_pattern"), SWA_PATTERN_DEFAULTS.get(arch, 0))
    # As llama.cpp's set_swa_pattern(n): layer il slides when il % n < n - 1; n == 0: every layer.
    return window, [n == 0 or (il % n) < (n - 1) for il in range(n_layers)]


def _split_bytes(spec: ModelSpec, tensor_bytes: Mapping[str, int]) -> None:
    blocks = [0] * spec.n_layers
    experts = [0] * spec.n_layers
    embd = 0
    has_output = False
    for name, nbytes in tensor_bytes.items():
        m = _LAYER.search(name)
        if m and int(m.group(1)) < MAX_LAYERS:
            il = int(m.group(1))
            if il >= len(blocks):
                blocks.extend([0] * (il + 1 - len(blocks)))
                experts.extend([0] * (il + 1 - len(experts)))
            blocks[il] += nbytes
            if _EXPERT.search(name):
                experts[il] += nbytes
        elif "embed_tokens." in name:
            spec.input_bytes += nbytes
            embd += nbytes
        elif name.startswith(("lm_head.", "model.lm_head.")) or ".lm_head." in name:
            spec.output_bytes += nbytes
            has_output = True
        else:
            spec.other_bytes += nbytes
    if not has_output and embd:
        spec.tied_embeddings = True
        spec.output_bytes = embd
    spec.block_bytes, spec.expert_bytes = blocks, experts
    spec.n_layers = max(spec.n_layers, len(blocks))


def _estimate_bytes(spec: ModelSpec, weight_bytes: int) -> None:
    """No tensor table (an EXL2 branch listed by size): share the bytes out by parameter count."""
    hd = spec.head_dim_k
    attn = spec.n_embd * hd * (2 * spec.n_head) + spec.n_embd * (spec.head_dim_k + spec.head_dim_v) * max(
        spec.n_head_kv or [0]
    )
    ffn = 3 * spec.n_embd * spec.n_ff * max(1, spec.n_expert)
    block = attn + ffn
    embd = spec.n_vocab * spec.n_embd
    output = 0 if spec.tied_embeddings else embd
    total = block * spec.n_layers + embd + output
    if not total:
        spec.other_bytes = weight_bytes
        spec.block_bytes = [0] * spec.n_layers
        spec.expert_bytes = [0] * spec.n_layers
        return
    per_block = weight_bytes * block // total
    spec.block_bytes = [per_block] * spec.n_layers
    expert_share = 3 * spec.n_embd * spec.n_ff * spec.n_expert if spec.n_expert > 1 else 0
    spec.expert_bytes = [weight_bytes * expert_share // total] * spec.n_layers
    spec.input_bytes = weight_bytes * embd // total
    spec.output_bytes = spec.input_bytes if spec.tied_embeddings else weight_bytes * output // total
    tied = spec.output_bytes if spec.tied_embeddings else 0
    spec.other_bytes = weight_bytes - (sum(spec.block_bytes) + spec.input_bytes + spec.output_bytes - tied)


def spec_from_hf_config(
    config: Mapping[str, Any],
    *,
    weight_bytes: int,
    tensor_bytes: Mapping[str, int] | None = None,
    file_type: str | None = None,
    n_params: int = 0,
    name: str = "",
    file_bytes: int | None = None,
    dtype_bytes: Mapping[str, int] | None = None,
) -> ModelSpec:
    """A ModelSpec from `config.json`.

    `tensor_bytes` (name -> stored bytes, from the safetensors headers) gives exact per-block,
    input and output bytes; without it `weight_bytes` is shared out by parameter count.
    """
    if not isinstance(config, Mapping):
        raise ModelFileError("config.json is not a JSON object")
    check_no_remote_code(config)
    cfg = text_config(config)
    model_type = cfg.get("model_type")
    arch = str(model_type) if isinstance(model_type, str) and model_type else "unknown"
    arch = ARCH_ALIASES.get(arch, arch)
    n_layers = min(_int(cfg.get("num_hidden_layers", cfg.get("n_layer"))), MAX_LAYERS)
    n_embd = _int(cfg.get("hidden_size", cfg.get("n_embd")))
    n_head = _int(cfg.get("num_attention_heads", cfg.get("n_head")))
    n_head_kv = _int(cfg.get("num_key_value_heads"), n_head)
    head_dim = _int(cfg.get("head_dim"), n_embd // n_head if n_head else 0)
    n_expert = _int(cfg.get("num_local_experts", cfg.get("num_experts", cfg.get("n_routed_experts"))))
    spec = ModelSpec(
        architecture=arch,
        name=name or str(cfg.get("_name_or_path") or ""),
        n_params=n_params,
        n_layers=n_layers,
        n_embd=n_embd,
        n_ff=_int(cfg.get("intermediate_size", cfg.get("n_inner"))),
        n_head=n_head,
        n_head_kv=[n_head_kv] * n_layers,
        head_dim_k=head_dim,
        head_dim_v=head_dim,
        n_ctx_train=_int(cfg.get("max_position_embeddings", cfg.get("n_positions"))),
        n_vocab=_int(cfg.get("vocab_size")),
        n_expert=n_expert,
        n_expert_used=_int(cfg.get("num_experts_per_tok")) if n_expert else 0,
        tied_embeddings=cfg.get("tie_word_embeddings") is True,
        file_type=file_type,
        file_bytes=weight_bytes if file_bytes is None else file_bytes,
        tensor_types=dict(dtype_bytes or {}),
    )
    kv_lora = _int(cfg.get("kv_lora_rank"))
    if kv_lora:
        # MLA caches one compressed latent plus the rope part per token, as llama.cpp does.
        spec.kv_lora_rank = kv_lora
        spec.rope_dim_mla = _int(cfg.get("qk_rope_head_dim"))
        spec.head_dim_k = kv_lora + spec.rope_dim_mla
        spec.head_dim_v = kv_lora
        spec.n_head_kv = [1] * n_layers
    spec.sliding_window, spec.swa_layers = _swa_layers(cfg, arch, n_layers)
    if tensor_bytes:
        _split_bytes(spec, tensor_bytes)
        if len(spec.n_head_kv) < spec.n_layers:
            spec.n_head_kv += [spec.n_head_kv[-1] if spec.n_head_kv else 0] * (spec.n_layers - len(spec.n_head_kv))
            spec.swa_layers += [False] * (spec.n_layers - len(spec.swa_layers))
    else:
        _estimate_bytes(spec, weight_bytes)
    if spec.weight_bytes != weight_bytes and tensor_bytes:
        logger.debug("tensor bytes sum to %d, weight_bytes says %d", spec.weight_bytes, weight_bytes)
    return spec
