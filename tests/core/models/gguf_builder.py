"""A tiny pure-Python GGUF writer for tests: valid files and deliberately hostile ones.

Every field can be overridden with a raw value (counts, types, dims, offsets), so a
test can write exactly the bytes an attacker would.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR_CODES = {
    U8: "B",
    I8: "b",
    U16: "H",
    I16: "h",
    U32: "I",
    I32: "i",
    F32: "f",
    BOOL: "?",
    U64: "Q",
    I64: "q",
    F64: "d",
}
# ggml type id -> (block size, type size); enough types for crafted files.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_Q4_K = 0, 1, 2, 8, 12
_TYPE_SIZES = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34), GGML_Q4_K: (256, 144)}
_U64 = (1 << 64) - 1


def gguf_string(value: str | bytes) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def encode_value(vtype: int, value: Any) -> bytes:
    """Encode a value; an ARRAY value is (item_type, items)."""
    if vtype == STRING:
        return gguf_string(value)
    if vtype == ARRAY:
        item_type, items = value
        body = b"".join(encode_value(item_type, v) for v in items)
        return struct.pack("<IQ", item_type, len(items)) + body
    return struct.pack("<" + _SCALAR_CODES[vtype], value)


def expected_nbytes(ggml_type: int, dims: tuple[int, ...]) -> int:
    block, size = _TYPE_SIZES[ggml_type]
    n = size * (dims[0] // block)
    for d in dims[1:]:
        n *= d
    return n


@dataclass
class KV:
    key: str | bytes
    vtype: int
    value: Any = None
    raw_value: bytes | None = None  # written instead of encode_value(vtype, value)

    def encode(self) -> bytes:
        body = self.raw_value
        if body is None:
            body = encode_value(self.vtype, self.value)
        return gguf_string(self.key) + struct.pack("<I", self.vtype) + body


@dataclass
class Tensor:
    name: str | bytes
    dims: tuple[int, ...]
    ggml_type: int = GGML_F32
    offset: int | None = None  # None: placed after the previous tensor, aligned
    n_dims: int | None = None  # None: len(dims)
    nbytes: int | None = None  # data bytes reserved; None: computed from the shape

    def size(self) -> int:
        if self.nbytes is not None:
            return self.nbytes
        return expected_nbytes(self.ggml_type, self.dims)


@dataclass
class GGUFBuilder:
    version: int = 3
    magic: bytes = b"GGUF"
    alignment: int = 32  # used for layout; write a general.alignment KV to change the file's
    kvs: list[KV] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    n_tensors: int | None = None  # raw override of the tensor count (signed)
    n_kv: int | None = None  # raw override of the KV count (signed)
    data_delta: int = 0  # bytes added to (or cut from) the end of the file

    def kv(self, key: str | bytes, vtype: int, value: Any = None, **kw: Any) -> GGUFBuilder:
        self.kvs.append(KV(key, vtype, value, **kw))
        return self

    def tensor(self, name: str | bytes, dims: tuple[int, ...], ggml_type: int = GGML_F32, **kw: Any) -> GGUFBuilder:
        self.tensors.append(Tensor(name, tuple(dims), ggml_type, **kw))
        return self

    def _offsets(self) -> list[int]:
        offsets, cursor = [], 0
        for t in self.tensors:
            offset = cursor if t.offset is None else t.offset
            offsets.append(offset)
            if t.offset is None:
                cursor = _pad(offset + t.size(), self.alignment)
        return offsets

    def header_bytes(self) -> bytes:
        n_tensors = len(self.tensors) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kvs) if self.n_kv is None else self.n_kv
        out = [self.magic, struct.pack("<Iqq", self.version, n_tensors, n_kv)]
        out += [kv.encode() for kv in self.kvs]
        for t, offset in zip(self.tensors, self._offsets()):
            n_dims = len(t.dims) if t.n_dims is None else t.n_dims
            out.append(gguf_string(t.name) + struct.pack("<I", n_dims))
            out += [struct.pack("<Q", d & _U64) for d in t.dims]
            out.append(struct.pack("<IQ", t.ggml_type, offset & _U64))
        return b"".join(out)

    def data_offset(self) -> int:
        return _pad(len(self.header_bytes()), self.alignment)

    def build(self) -> bytes:
        header = self.header_bytes()
        if not self.tensors:
            return header + b"\x00" * max(self.data_delta, 0)
        start = _pad(len(header), self.alignment)
        ends = [o + t.size() for t, o in zip(self.tensors, self._offsets()) if 0 <= o < 1 << 40]
        data_len = max(ends, default=0)
        data = bytes((i * 7) & 0xFF for i in range(min(data_len, 256))) * (data_len // 256 + 1)
        blob = header + b"\x00" * (start - len(header)) + data[:data_len]
        if self.data_delta < 0:
            return blob[: len(blob) + self.data_delta]
        return blob + b"\x00" * self.data_delta


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def small_valid_builder() -> GGUFBuilder:
    """A small, valid llama-like header with every kind of value and three tensors."""
    b = GGUFBuilder()
    b.kv("general.architecture", STRING, "llama")
    b.kv("general.name", STRING, "tiny")
    b.kv("general.file_type", U32, 7)
    b.kv("llama.block_count", U32, 1)
    b.kv("llama.embedding_length", U32, 64)
    b.kv("llama.attention.head_count", U32, 4)
    b.kv("llama.rope.freq_base", F32, 10000.0)
    b.kv("general.flag", BOOL, True)
    b.kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a", "b"]))
    b.kv("tokenizer.ggml.scores", ARRAY, (F32, [0.0, 0.5, -1.0, 2.0]))
    b.kv("tokenizer.chat_template", STRING, "{{ messages[0]['content'] }}")
    b.tensor("token_embd.weight", (64, 4), GGML_Q8_0)
    b.tensor("blk.0.attn_norm.weight", (64,), GGML_F32)
    b.tensor("output.weight", (64, 4), GGML_F16)
    return b
