"""GGUF type tables: ggml tensor types, metadata value types, file-type labels.

Sizes follow ggml (`ggml/src/ggml.c` type_traits, mirrored by
`gguf.constants.GGML_QUANT_SIZES`); a test checks them against the installed `gguf`.
"""

from __future__ import annotations

from dataclasses import dataclass

INT64_LIMIT = 1 << 63


@dataclass(frozen=True, slots=True)
class GGMLType:
    """One ggml tensor type: `block_size` elements are stored in `type_size` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.type_size / self.block_size


_QK_K = 256

GGML_TYPES: dict[int, GGMLType] = {
    t.id: t
    for t in (
        GGMLType(0, "F32", 1, 4),
        GGMLType(1, "F16", 1, 2),
        GGMLType(2, "Q4_0", 32, 2 + 16),
        GGMLType(3, "Q4_1", 32, 2 + 2 + 16),
        GGMLType(6, "Q5_0", 32, 2 + 4 + 16),
        GGMLType(7, "Q5_1", 32, 2 + 2 + 4 + 16),
        GGMLType(8, "Q8_0", 32, 2 + 32),
        GGMLType(9, "Q8_1", 32, 2 + 2 + 32),
        GGMLType(10, "Q2_K", _QK_K, 2 + 2 + _QK_K // 16 + _QK_K // 4),
        GGMLType(11, "Q3_K", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12),
        GGMLType(12, "Q4_K", _QK_K, 2 + 2 + _QK_K // 2 + 12),
        GGMLType(13, "Q5_K", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 8 + 12),
        GGMLType(14, "Q6_K", _QK_K, 2 + _QK_K // 2 + _QK_K // 4 + _QK_K // 16),
        GGMLType(15, "Q8_K", _QK_K, 4 + _QK_K + _QK_K // 8),
        GGMLType(16, "IQ2_XXS", _QK_K, 2 + _QK_K // 4),
        GGMLType(17, "IQ2_XS", _QK_K, 2 + _QK_K // 4 + _QK_K // 32),
        GGMLType(18, "IQ3_XXS", _QK_K, 2 + _QK_K // 4 + _QK_K // 8),
        GGMLType(19, "IQ1_S", _QK_K, 2 + _QK_K // 8 + _QK_K // 16),
        GGMLType(20, "IQ4_NL", 32, 2 + 16),
        GGMLType(21, "IQ3_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
        GGMLType(22, "IQ2_S", _QK_K, 2 + _QK_K // 4 + _QK_K // 16),
        GGMLType(23, "IQ4_XS", _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 64),
        GGMLType(24, "I8", 1, 1),
        GGMLType(25, "I16", 1, 2),
        GGMLType(26, "I32", 1, 4),
        GGMLType(27, "I64", 1, 8),
        GGMLType(28, "F64", 1, 8),
        GGMLType(29, "IQ1_M", _QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
        GGMLType(30, "BF16", 1, 2),
        GGMLType(34, "TQ1_0", _QK_K, 2 + 4 * 13),
        GGMLType(35, "TQ2_0", _QK_K, 2 + 64),
        GGMLType(39, "MXFP4", 32, 1 + 16),
        # Newer ggml types (2025-2026); files using them exist on the Hub.
        GGMLType(40, "NVFP4", 64, 4 + 32),
        GGMLType(41, "Q1_0", 128, 2 + 16),
        GGMLType(42, "Q2_0", 64, 2 + 16),
    )
}


def ggml_type(type_id: int) -> GGMLType | None:
    return GGML_TYPES.get(type_id)


def tensor_nbytes(ggml_type_id: int, dims: tuple[int, ...] | list[int]) -> int:
    """Exact bytes: type_size × (ne0 / block_size) × ne1 × ne2 × ne3.

    Raises ValueError for an unknown type, a non-positive dim, or ne0 not a
    multiple of the block size; the reader turns these into ModelFileError.
    """
    info = GGML_TYPES.get(ggml_type_id)
    if info is None:
        raise ValueError(f"unknown ggml type {ggml_type_id}")
    if not dims:
        raise ValueError("a tensor needs at least one dimension")
    if any(d <= 0 for d in dims):
        raise ValueError(f"dimensions {tuple(dims)} must all be positive")
    ne0 = dims[0]
    if ne0 % info.block_size:
        raise ValueError(f"first dimension {ne0} is not a multiple of the {info.name} block size {info.block_size}")
    nbytes = info.type_size * (ne0 // info.block_size)
    for d in dims[1:]:
        nbytes *= d
    return nbytes


# Metadata value types (gguf spec `gguf_metadata_value_type`): id -> (name, struct code, size).
VALUE_UINT8, VALUE_INT8, VALUE_UINT16, VALUE_INT16 = 0, 1, 2, 3
VALUE_UINT32, VALUE_INT32, VALUE_FLOAT32, VALUE_BOOL = 4, 5, 6, 7
VALUE_STRING, VALUE_ARRAY, VALUE_UINT64, VALUE_INT64, VALUE_FLOAT64 = 8, 9, 10, 11, 12

SCALAR_VALUE_TYPES: dict[int, tuple[str, str, int]] = {
    VALUE_UINT8: ("uint8", "B", 1),
    VALUE_INT8: ("int8", "b", 1),
    VALUE_UINT16: ("uint16", "H", 2),
    VALUE_INT16: ("int16", "h", 2),
    VALUE_UINT32: ("uint32", "I", 4),
    VALUE_INT32: ("int32", "i", 4),
    VALUE_FLOAT32: ("float32", "f", 4),
    VALUE_BOOL: ("bool", "B", 1),
    VALUE_UINT64: ("uint64", "Q", 8),
    VALUE_INT64: ("int64", "q", 8),
    VALUE_FLOAT64: ("float64", "d", 8),
}


def value_type_name(type_id: int) -> str:
    if type_id == VALUE_STRING:
        return "string"
    if type_id == VALUE_ARRAY:
        return "array"
    entry = SCALAR_VALUE_TYPES.get(type_id)
    return entry[0] if entry else f"unknown({type_id})"


# llama.cpp `llama_ftype` (general.file_type) -> the label used in file names.
FTYPE_LABELS: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    41: "Q2_0",
}


def ftype_label(ftype: int | None) -> str | None:
    """`general.file_type` -> "Q4_K_M" etc.; None when absent or unknown."""
    if isinstance(ftype, bool) or not isinstance(ftype, int):
        return None
    return FTYPE_LABELS.get(ftype)
