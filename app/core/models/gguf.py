"""Pure-Python GGUF header reader and validator (security.md T5).

Every GGUF is parsed here, with plain `struct`, before llama.cpp sees it: counts,
lengths and sizes are capped, products are checked with Python ints, and every
tensor must lie inside the file. Anything wrong raises ModelFileError with a
message that says what. Only the header region is read, in chunks, so the same
code runs on a local file or on HTTP Range reads of a Hub file.

Arrays: an array with more than `keep_array_items` items (default 1 Mi, enough for
any vocabulary) is kept as an ArraySummary (item type, true length, first items),
so `len()` still gives e.g. the vocabulary size; smaller arrays are plain lists.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.core.models.errors import ModelFileError
from app.core.models.gguf_hparams import check_hparams
from app.core.models.gguf_source import ByteSource, BytesSource, Cursor, FileSource, source_size
from app.core.models.gguf_types import (
    GGML_TYPES,
    INT64_LIMIT,
    SCALAR_VALUE_TYPES,
    VALUE_ARRAY,
    VALUE_BOOL,
    VALUE_STRING,
    VALUE_UINT32,
    ftype_label,
    tensor_nbytes,
    value_type_name,
)

__all__ = ["ArraySummary", "BytesSource", "FileSource", "GGUFHeader", "TensorInfo", "read_gguf_header", "validate_gguf"]

logger = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_TENSORS = 1_000_000
MAX_KV = 1_000_000
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_ARRAY_ITEMS = 16 * 1024 * 1024
MAX_ARRAY_DEPTH = 2  # an array of arrays of scalars, no deeper (llama.cpp allows none)
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_DIMS = 4
MAX_TENSOR_NAME_BYTES = 63  # ggml's GGML_MAX_NAME is 64 including the NUL
DEFAULT_CHUNK_BYTES = 1024 * 1024
DEFAULT_KEEP_ARRAY_ITEMS = 1024 * 1024
MAX_KEPT_ITEMS_TOTAL = 4 * 1024 * 1024  # bounds memory a hostile header can make us allocate
ARRAY_HEAD_ITEMS = 16

_MIN_ITEM_BYTES = {VALUE_STRING: 8, VALUE_ARRAY: 12}


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """A metadata array too large to keep: its item type, true length and first items."""

    item_type: str
    length: int
    head: tuple[Any, ...]

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml order: ne0 (row length) first
    ggml_type: int
    type_name: str
    offset: int  # relative to GGUFHeader.data_offset
    nbytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    alignment: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int  # absolute start of the tensor data section
    header_size: int  # bytes up to the end of the tensor infos (before padding)
    file_size: int | None
    metadata_types: dict[str, str] = field(default_factory=dict)
    bytes_read: int = field(default=0, compare=False)  # bytes fetched to parse this header

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_value(self, name: str, default: Any = None) -> Any:
        """`<arch>.<name>`, e.g. arch_value("block_count")."""
        arch = self.architecture
        return self.metadata.get(f"{arch}.{name}", default) if arch else default

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def file_type(self) -> int | None:
        value = self.metadata.get("general.file_type")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def ftype_label(self) -> str | None:
        return ftype_label(self.file_type)

    @property
    def vocab_size(self) -> int | None:
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        return len(tokens) if isinstance(tokens, (list, ArraySummary)) else None

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)


class _Parser:
    def __init__(self, cursor: Cursor, keep_array_items: int) -> None:
        self.c = cursor
        self.keep = keep_array_items
        self.kept_total = 0

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == VALUE_STRING:
            return self.c.string(what)
        if vtype == VALUE_ARRAY:
            return self.array(what, depth)
        scalar = SCALAR_VALUE_TYPES.get(vtype)
        if scalar is None:
            raise ModelFileError(f"{what} has unknown value type {vtype}")
        value = self.c.unpack(scalar[1], scalar[2], what)
        return bool(value) if vtype == VALUE_BOOL else value

    def array(self, what: str, depth: int) -> list[Any] | ArraySummary:
        item_type = self.c.unpack("I", 4, f"item type of {what}")
        n = self.c.unpack("Q", 8, f"length of {what}")
        if item_type == VALUE_ARRAY and depth + 1 >= MAX_ARRAY_DEPTH:
            raise ModelFileError(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")
        if item_type not in SCALAR_VALUE_TYPES and item_type not in _MIN_ITEM_BYTES:
            raise ModelFileError(f"{what} has unknown item type {item_type}")
        if n > MAX_ARRAY_ITEMS:
            raise ModelFileError(f"{what} has {n} items, above the cap of {MAX_ARRAY_ITEMS}")
        scalar = SCALAR_VALUE_TYPES.get(item_type)
        item_bytes = scalar[2] if scalar else _MIN_ITEM_BYTES[item_type]
        self.c.ensure_possible(n * item_bytes, what)
        keep = n <= self.keep and self.kept_total + n <= MAX_KEPT_ITEMS_TOTAL
        if scalar is not None:
            _, code, size = scalar
            head_n = n if keep else min(n, ARRAY_HEAD_ITEMS)
            items = self.c.unpack_many(code, size, head_n, what)
            self.c.take((n - head_n) * size, what)
            if item_type == VALUE_BOOL:
                items = [bool(v) for v in items]
        else:
            items = []
            for i in range(n):
                item = self.value(item_type, f"{what}[{i}]", depth + 1)
                if keep or i < ARRAY_HEAD_ITEMS:
                    items.append(item)
        if keep:
            self.kept_total += n
            return items
        return ArraySummary(value_type_name(item_type), n, tuple(items[:ARRAY_HEAD_ITEMS]))

    def header(self) -> tuple[int, int, int]:
        magic = self.c.raw(4, "magic")
        if magic != GGUF_MAGIC:
            raise ModelFileError(f"not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}")
        version = self.c.unpack("I", 4, "version")
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version and not version & 0xFFFF else ""
            raise ModelFileError(f"unsupported GGUF version {version}{hint}; Hearth reads versions 2 and 3")
        n_tensors = self.c.unpack("q", 8, "tensor count")
        if not 0 <= n_tensors <= MAX_TENSORS:
            raise ModelFileError(f"tensor count {n_tensors} is outside 0..{MAX_TENSORS}")
        n_kv = self.c.unpack("q", 8, "metadata count")
        if not 0 <= n_kv <= MAX_KV:
            raise ModelFileError(f"metadata (key-value) count {n_kv} is outside 0..{MAX_KV}")
        return version, n_tensors, n_kv

    def metadata(self, n_kv: int) -> tuple[dict[str, Any], dict[str, str]]:
        metadata: dict[str, Any] = {}
        types: dict[str, str] = {}
        for i in range(n_kv):
            key = self.c.string(f"key {i}")
            if not key:
                raise ModelFileError(f"metadata key {i} is empty")
            if key in metadata:
                raise ModelFileError(f"duplicate metadata key {_q(key)}")
            vtype = self.c.unpack("I", 4, f"type of {_q(key)}")
            metadata[key] = self.value(vtype, f"value of {_q(key)}")
            types[key] = value_type_name(vtype)
        return metadata, types

    def tensor(self, i: int, alignment: int) -> TensorInfo:
        name = self.c.string(f"name of tensor {i}")
        if len(name.encode("utf-8")) > MAX_TENSOR_NAME_BYTES:
            raise ModelFileError(f"tensor {i} name is longer than {MAX_TENSOR_NAME_BYTES} bytes")
        n_dims = self.c.unpack("I", 4, f"dimension count of tensor {_q(name)}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ModelFileError(f"tensor {_q(name)} has {n_dims} dimensions; 1 to {MAX_DIMS} are allowed")
        dims = tuple(self.c.unpack_many("q", 8, n_dims, f"dimensions of tensor {_q(name)}"))
        for j, d in enumerate(dims):
            if d <= 0:
                raise ModelFileError(f"tensor {_q(name)} dimension {j} is {d}; dimensions must be positive")
        n_elements = 1
        for d in dims:
            n_elements *= d
        if n_elements >= INT64_LIMIT:
            raise ModelFileError(f"tensor {_q(name)} shape {dims} overflows: {n_elements} elements is >= 2^63")
        type_id = self.c.unpack("I", 4, f"type of tensor {_q(name)}")
        gtype = GGML_TYPES.get(type_id)
        if gtype is None:
            raise ModelFileError(f"tensor {_q(name)} has unknown ggml type {type_id}")
        if dims[0] % gtype.block_size:
            raise ModelFileError(
                f"tensor {_q(name)} row length {dims[0]} is not a multiple of the {gtype.name} "
                f"block size {gtype.block_size}"
            )
        nbytes = tensor_nbytes(type_id, dims)
        offset = self.c.unpack("Q", 8, f"offset of tensor {_q(name)}")
        if offset + nbytes >= INT64_LIMIT:
            raise ModelFileError(f"tensor {_q(name)} offset {offset} + {nbytes} bytes is out of range")
        if offset % alignment:
            raise ModelFileError(f"tensor {_q(name)} offset {offset} is not aligned to {alignment} bytes")
        return TensorInfo(name, dims, type_id, gtype.name, offset, nbytes)


def _q(text: str) -> str:
    """Quote a name from the file for a message: control characters escaped, length capped."""
    shown = repr(text[:80])[1:-1] + ("..." if len(text) > 80 else "")
    return f"'{shown}'"


def _alignment(metadata: dict[str, Any], types: dict[str, str]) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    if types["general.alignment"] != value_type_name(VALUE_UINT32):
        raise ModelFileError(f"general.alignment must be uint32, not {types['general.alignment']}")
    alignment = metadata["general.alignment"]
    if alignment == 0 or alignment & (alignment - 1):
        raise ModelFileError(f"general.alignment {alignment} is not a non-zero power of two")
    return alignment


def _check_layout(tensors: list[TensorInfo], data_offset: int, file_size: int | None) -> None:
    previous: TensorInfo | None = None
    for t in sorted(tensors, key=lambda t: (t.offset, t.nbytes)):
        start = data_offset + t.offset
        if file_size is not None and start + t.nbytes > file_size:
            raise ModelFileError(
                f"tensor {_q(t.name)} data (offset {start} + {t.nbytes} bytes) runs past the end "
                f"of the file ({file_size} bytes)"
            )
        if previous is not None and t.offset < previous.offset + previous.nbytes:
            raise ModelFileError(
                f"tensors {_q(previous.name)} (offset {previous.offset} + {previous.nbytes} bytes) "
                f"and {_q(t.name)} (offset {t.offset}) overlap"
            )
        previous = t


def read_gguf_header(
    source: str | os.PathLike[str] | ByteSource | bytes,
    *,
    file_size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_BYTES,
    keep_array_items: int = DEFAULT_KEEP_ARRAY_ITEMS,
) -> GGUFHeader:
    """Parse and check a GGUF header from a path or a ByteSource.

    Tensor extents are checked against the file end when the size is known (given,
    or reported by the source's `size()`); raises ModelFileError on anything wrong.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = BytesSource(source)
    if isinstance(source, (str, os.PathLike)):
        with FileSource(source) as fs:
            try:
                size = fs.size() if file_size is None else file_size
                return _read(fs, size, chunk_size, keep_array_items)
            except OSError as exc:
                raise ModelFileError(f"cannot read {fs.path}: {exc.strerror or exc}") from exc
    try:
        if file_size is None:
            file_size = source_size(source)
        return _read(source, file_size, chunk_size, keep_array_items)
    except OSError as exc:
        raise ModelFileError(f"cannot read the GGUF header: {exc}") from exc


def read_gguf_metadata_until(
    path: str | os.PathLike[str], done: Callable[[dict[str, Any]], bool], *, chunk_size: int = 64 * 1024
) -> dict[str, Any]:
    """A file's metadata up to the first key after which `done(metadata)` holds (all of it when it never
    does), with the same checks as `read_gguf_header`, no array's items kept. A cheap look at a leading value:
    converters write general.* and the architecture's keys before the vocabulary, whose 100k strings take
    seconds to walk. Raises ModelFileError like `read_gguf_header`."""
    with FileSource(path) as fs:
        try:
            cursor = Cursor(fs, fs.size(), chunk_size, MAX_HEADER_BYTES, MAX_STRING_BYTES)
            parser = _Parser(cursor, 0)
            n_kv = parser.header()[2]
            metadata: dict[str, Any] = {}
            for i in range(n_kv):
                key = cursor.string(f"key {i}")
                if not key or key in metadata:
                    raise ModelFileError(f"metadata key {i} is empty or repeated")
                metadata[key] = parser.value(cursor.unpack("I", 4, f"type of {_q(key)}"), f"value of {_q(key)}")
                if done(metadata):
                    break
        except OSError as exc:
            raise ModelFileError(f"cannot read {fs.path}: {exc.strerror or exc}") from exc
        except MemoryError as exc:
            raise ModelFileError("GGUF header needs more memory than is available") from exc
    return metadata


def _read(source: ByteSource, file_size: int | None, chunk: int, keep: int) -> GGUFHeader:
    cursor = Cursor(source, file_size, chunk, MAX_HEADER_BYTES, MAX_STRING_BYTES)
    parser = _Parser(cursor, keep)
    try:
        version, n_tensors, n_kv = parser.header()
        metadata, types = parser.metadata(n_kv)
        alignment = _alignment(metadata, types)
        tensors: list[TensorInfo] = []
        names: set[str] = set()
        for i in range(n_tensors):
            info = parser.tensor(i, alignment)
            if info.name in names:
                raise ModelFileError(f"duplicate tensor name {_q(info.name)}")
            names.add(info.name)
            tensors.append(info)
    except MemoryError as exc:
        raise ModelFileError("GGUF header needs more memory than is available") from exc
    header_size = cursor.pos
    # llama.cpp pads to the alignment only when there is tensor data.
    data_offset = -(-header_size // alignment) * alignment if tensors else header_size
    _check_layout(tensors, data_offset, file_size)
    logger.debug("GGUF v%d: %d keys, %d tensors, data at %d", version, n_kv, n_tensors, data_offset)
    return GGUFHeader(
        version=version,
        alignment=alignment,
        metadata=metadata,
        tensors=tensors,
        data_offset=data_offset,
        header_size=header_size,
        file_size=file_size,
        metadata_types=types,
        bytes_read=cursor.bytes_read,
    )


def validate_gguf(
    path_or_source: str | os.PathLike[str] | ByteSource | bytes, *, file_size: int | None = None
) -> GGUFHeader:
    """Full check before native code loads a file: the header, every tensor inside the file, and the
    hyper-parameters llama.cpp would otherwise assert on (gguf_hparams)."""
    if isinstance(path_or_source, (bytes, bytearray, memoryview)):
        path_or_source = BytesSource(path_or_source)
    if not isinstance(path_or_source, (str, os.PathLike)) and file_size is None:
        try:
            file_size = source_size(path_or_source)
        except OSError as exc:
            raise ModelFileError(f"cannot read the GGUF file: {exc}") from exc
        if file_size is None:
            raise ValueError("validate_gguf needs the file size of a source that reports none")
    header = read_gguf_header(path_or_source, file_size=file_size)
    check_hparams(header.metadata, header.tensors)
    return header
