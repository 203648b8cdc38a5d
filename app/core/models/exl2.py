"""EXL2 repos: each quant lives on its own branch (`4.0bpw`, `6_5bpw`, `8.0bpw-h8`).

bpw is a free number read from the branch name (or the config's quantization_config), head
bits default to 6, and the weight bytes are the safetensors sizes on that branch.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.models.errors import ModelFileError
from app.core.models.hf_config import check_no_remote_code, spec_from_hf_config
from app.core.models.spec import ModelSpec

__all__ = ["Exl2Variant", "exl2_quant_method", "parse_bpw", "parse_head_bits", "read_exl2_branch"]

logger = logging.getLogger(__name__)

DEFAULT_HEAD_BITS = 6
MAX_BPW = 16.0
_BPW = re.compile(r"(?<![\d.])(\d{1,2})(?:[._](\d{1,3}))?[-_ ]?bpw(?![a-z])", re.IGNORECASE)
_HEAD = re.compile(r"(?:^|[-_.])h(\d{1,2})(?!\d)", re.IGNORECASE)


def parse_bpw(branch: str) -> float | None:
    """Bits per weight from a branch name: "4.0bpw" -> 4.0, "6_5bpw" -> 6.5, "main" -> None."""
    match = _BPW.search(branch or "")
    if match is None:
        return None
    value = float(f"{match.group(1)}.{match.group(2) or 0}")
    return value if 0 < value <= MAX_BPW else None


def parse_head_bits(branch: str) -> int | None:
    """Head (lm_head) bits from a suffix like "-h8"; None when the name does not say."""
    match = _HEAD.search(branch or "")
    if match is None:
        return None
    bits = int(match.group(1))
    return bits if 2 <= bits <= 16 else None


@dataclass(frozen=True)
class Exl2Variant:
    branch: str
    bpw: float
    head_bits: int
    weight_bytes: int
    spec: ModelSpec
    repo_id: str = ""
    files: tuple[str, ...] = ()


def _quant_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    block = config.get("quantization_config")
    return block if isinstance(block, Mapping) else {}


def exl2_quant_method(config: Mapping[str, Any]) -> bool:
    """True when a config.json says its weights are EXL2 (a repo may keep one quant on `main`)."""
    return _quant_config(config).get("quant_method") == "exl2"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value <= MAX_BPW else None


def read_exl2_branch(
    config: Mapping[str, Any],
    file_sizes: Mapping[str, int],
    branch: str,
    *,
    repo_id: str = "",
    tensor_bytes: Mapping[str, int] | None = None,
) -> Exl2Variant:
    """One EXL2 quant from its branch's config.json and file sizes (path -> bytes)."""
    if not isinstance(config, Mapping):
        raise ModelFileError("config.json is not a JSON object")
    check_no_remote_code(config)
    quant = _quant_config(config)
    bpw = parse_bpw(branch) or _number(quant.get("bits"))
    if bpw is None:
        raise ModelFileError(f"cannot tell the bits per weight of EXL2 branch {branch[:80]!r}")
    head = parse_head_bits(branch) or _number(quant.get("head_bits")) or DEFAULT_HEAD_BITS
    weights = sorted(p for p in file_sizes if p.endswith(".safetensors"))
    if not weights:
        raise ModelFileError(f"EXL2 branch {branch[:80]!r} has no .safetensors files")
    weight_bytes = sum(int(file_sizes[p]) for p in weights)
    spec = spec_from_hf_config(
        config,
        weight_bytes=weight_bytes,
        tensor_bytes=tensor_bytes,
        file_type=f"EXL2 {bpw:g}bpw h{int(head)}",
        name=repo_id,
    )
    return Exl2Variant(branch, bpw, int(head), weight_bytes, spec, repo_id, tuple(weights))
