"""MLX model metadata: quantization from config.json and exact weight bytes from the safetensors headers.

MLX affine quantization stores each group's scale and bias in 16 bits, hence
bpw = bits + 32 / group_size (q4 g64 = 4.5); the microscaling modes keep one 8-bit scale per group.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.models.errors import ModelFileError
from app.core.models.hf_config import check_no_remote_code, spec_from_hf_config, text_config
from app.core.models.safetensors_meta import (
    SafetensorsEntry,
    SafetensorsModel,
    local_safetensors_model,
    shard_names_from_index,
)
from app.core.models.spec import ModelSpec

__all__ = [
    "MlxVariant",
    "mlx_label",
    "mlx_params",
    "mlx_quantization",
    "mlx_variant",
    "read_mlx_folder",
    "weight_files",
]

logger = logging.getLogger(__name__)

_FLOAT_BITS = {"float32": 32, "float16": 16, "bfloat16": 16, "F32": 32, "F16": 16, "BF16": 16}
# Bits of per-group metadata: affine keeps a 16-bit scale and bias, the microscaling modes an 8-bit scale.
_GROUP_BITS = {"affine": 32, "mxfp4": 8, "mxfp8": 8, "nvfp4": 8}


@dataclass(frozen=True)
class MlxVariant:
    repo_id: str
    bits: int  # 16 / 32 when not quantized
    group_size: int  # 0 when not quantized
    bpw: float  # nominal: bits + per-group metadata
    weight_bytes: int  # exact: the sum of stored tensor extents
    spec: ModelSpec
    revision: str = "main"
    files: tuple[str, ...] = ()
    mode: str = "affine"

    @property
    def quantized(self) -> bool:
        return self.group_size > 0

    @property
    def effective_bpw(self) -> float:
        """Stored bits per parameter, mixed-precision layers included."""
        return self.weight_bytes * 8 / self.spec.n_params if self.spec.n_params else self.bpw


def _quant_block(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for key in ("quantization", "quantization_config"):
        block = config.get(key)
        if isinstance(block, Mapping) and "bits" in block:
            return block
    return None


def _pos_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 4096:
        raise ModelFileError(f"MLX config has an invalid quantization {what}: {str(value)[:20]!r}")
    return value


def mlx_quantization(
    config: Mapping[str, Any], dtype_bytes: Mapping[str, int] | None = None
) -> tuple[int, int, float, str]:
    """(bits, group_size, bpw, mode) from config.json; unquantized models give (16, 0, 16.0, "none")."""
    block = _quant_block(config)
    if block is not None:
        bits = _pos_int(block.get("bits"), "bits")
        group = _pos_int(block.get("group_size", 64), "group_size")
        mode = str(block.get("mode") or "affine")
        return bits, group, bits + _GROUP_BITS.get(mode, 32) / group, mode
    cfg = text_config(config)
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    float_bits = _FLOAT_BITS.get(dtype) if isinstance(dtype, str) else None
    if float_bits is None and dtype_bytes:
        float_bits = _FLOAT_BITS.get(max(dtype_bytes, key=lambda k: dtype_bytes[k]), 16)
    float_bits = float_bits or 16
    return float_bits, 0, float(float_bits), "none"


def mlx_params(tensors: Mapping[str, SafetensorsEntry], config: Mapping[str, Any]) -> int:
    """Parameter count: a quantized weight holds (scales elements × group size) values; its
    scales and biases are not parameters. Per-layer quantization overrides are honoured."""
    block = _quant_block(config) or {}
    default_group = block.get("group_size", 64)
    quantized = {n[: -len(".scales")] for n in tensors if n.endswith(".scales")}
    total = 0
    for name, t in tensors.items():
        prefix, _, part = name.rpartition(".")
        if prefix in quantized:
            if part == "scales":
                override = block.get(prefix)
                group = override.get("group_size", default_group) if isinstance(override, Mapping) else default_group
                total += t.n_elements * (group if isinstance(group, int) and group > 0 else 64)
            continue
        total += t.n_elements
    return total


def mlx_variant(
    repo_id: str, config: Mapping[str, Any], model: SafetensorsModel, *, revision: str = "main"
) -> MlxVariant:
    """Combine config.json and the safetensors headers of one MLX model."""
    if not isinstance(config, Mapping):
        raise ModelFileError("config.json is not a JSON object")
    check_no_remote_code(config)
    dtype_bytes = model.dtype_bytes()
    bits, group, bpw, mode = mlx_quantization(config, dtype_bytes)
    label = f"{bits}bit-g{group}" if group else ("F32" if bits == 32 else "BF16/F16")
    spec = spec_from_hf_config(
        config,
        weight_bytes=model.weight_bytes,
        tensor_bytes=model.tensor_bytes(),
        file_type=label,
        n_params=mlx_params(model.tensors(), config),
        name=repo_id,
        file_bytes=sum(h.file_size or h.header_size + h.data_bytes for h in model.files.values()),
        dtype_bytes=dtype_bytes,
    )
    return MlxVariant(repo_id, bits, group, bpw, model.weight_bytes, spec, revision, tuple(model.files), mode)


def read_mlx_folder(folder: str | os.PathLike[str], repo_id: str = "") -> MlxVariant:
    """An MLX model on disk (a folder with config.json and safetensors)."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelFileError(f"cannot read {folder / 'config.json'}: {exc}") from exc
    return mlx_variant(repo_id or folder.name, config, local_safetensors_model(folder))


def mlx_label(bits: int, group_size: int) -> str:
    """How Hearth names an MLX quantization to the user: "4-bit g64", or "16-bit" unquantized."""
    return f"{bits}-bit g{group_size}" if group_size else f"{bits}-bit"


def weight_files(listing: Iterable[str] | None, index: Any) -> list[str]:
    """The safetensors files holding an MLX model's weights: the index's shards, else the top-level files."""
    if index is not None:
        return shard_names_from_index(index)
    names = sorted(f for f in listing or () if f.endswith(".safetensors") and "/" not in f)
    return names or ["model.safetensors"]
