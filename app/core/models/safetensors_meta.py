"""Safetensors headers: 8-byte little-endian length, then a JSON table of tensors.

Read from a local path, bytes, or any ByteSource (an HttpRangeSource for a Hub file), and
checked the way the safetensors library checks them: known dtypes, byte extents that match
the shapes, no overlaps or holes, and a data section that ends exactly at the file end.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from app.core.models.errors import ModelFileError
from app.core.models.gguf_source import ByteSource, BytesSource, FileSource, source_size

__all__ = [
    "DTYPE_BITS",
    "SafetensorsEntry",
    "SafetensorsHeader",
    "SafetensorsModel",
    "local_safetensors_model",
    "read_safetensors_header",
    "read_safetensors_model",
    "shard_names_from_index",
]

logger = logging.getLogger(__name__)

MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_DIMS = 16
INDEX_NAME = "model.safetensors.index.json"
# Bits per element of every dtype the safetensors format defines.
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


class SafetensorsEntry(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    start: int  # relative to the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: dict[str, SafetensorsEntry]
    metadata: dict[str, str]
    data_bytes: int  # sum of tensor extents == length of the data section
    header_size: int  # 8 + JSON length: where the data section starts
    file_size: int | None = None

    def tensor_bytes(self) -> dict[str, int]:
        return {name: t.nbytes for name, t in self.tensors.items()}


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ModelFileError(f"safetensors header repeats the key {key[:80]!r}")
        out[key] = value
    return out


def _read_exact(source: ByteSource, offset: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        piece = source.read_at(offset + len(out), n - len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(name: str, info: Any) -> SafetensorsEntry:
    shown = repr(name[:80])
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise ModelFileError(f"safetensors tensor {shown} needs exactly dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise ModelFileError(f"safetensors tensor {shown} has unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_int(d) and d >= 0 for d in shape):
        raise ModelFileError(f"safetensors tensor {shown} has an invalid shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise ModelFileError(f"safetensors tensor {shown} data_offsets must be two integers")
    start, end = offsets
    if start < 0 or end < start:
        raise ModelFileError(f"safetensors tensor {shown} has data_offsets [{start}, {end}]: end before start")
    n = 1
    for d in shape:
        n *= d
    bits = n * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - start:
        raise ModelFileError(
            f"safetensors tensor {shown}: shape {shape} of {dtype} needs {bits / 8:g} bytes, "
            f"but its data_offsets span {end - start}"
        )
    return SafetensorsEntry(dtype, tuple(shape), start, end)


def _parse(source: ByteSource, file_size: int | None) -> SafetensorsHeader:
    head = _read_exact(source, 0, 8)
    if len(head) < 8:
        raise ModelFileError("not a safetensors file: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER_BYTES:
        raise ModelFileError(f"safetensors header length {n} is above the {MAX_HEADER_BYTES // 2**20} MiB cap")
    if file_size is not None and 8 + n > file_size:
        raise ModelFileError(f"safetensors header length {n} runs past the end of the file ({file_size} bytes)")
    raw = _read_exact(source, 8, n)
    if len(raw) < n:
        raise ModelFileError(f"safetensors header is truncated: {len(raw)} of {n} bytes")
    try:
        table = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ModelFileError(f"safetensors header is not valid JSON: {str(exc)[:200]}") from exc
    if not isinstance(table, dict):
        raise ModelFileError("safetensors header is not a JSON object")
    metadata = table.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ModelFileError("safetensors __metadata__ must map names to strings")
    tensors = {name: _entry(name, info) for name, info in table.items()}
    position = 0
    for name, t in sorted(tensors.items(), key=lambda kv: (kv[1].start, kv[1].end)):
        if t.start != position:
            what = "overlaps the previous one" if t.start < position else "leaves a hole before it"
            raise ModelFileError(f"safetensors tensor {name[:80]!r} at offset {t.start} {what}")
        position = t.end
    if file_size is not None and 8 + n + position != file_size:
        raise ModelFileError(
            f"safetensors data is {position} bytes but the file holds {file_size - 8 - n} after the header"
        )
    return SafetensorsHeader(tensors, dict(metadata), position, 8 + n, file_size)


def read_safetensors_header(
    source: str | os.PathLike[str] | ByteSource | bytes, *, file_size: int | None = None
) -> SafetensorsHeader:
    """Parse and check a safetensors header; raises ModelFileError on anything wrong.

    The data section is checked against the file end when the size is known (given or from
    the source's `size()`).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = BytesSource(source)
    try:
        if isinstance(source, (str, os.PathLike)):
            with FileSource(source) as fs:
                return _parse(fs, fs.size() if file_size is None else file_size)
        return _parse(source, source_size(source) if file_size is None else file_size)
    except OSError as exc:
        raise ModelFileError(f"cannot read the safetensors file: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise ModelFileError("safetensors header needs more memory than is available") from exc


@dataclass(frozen=True)
class SafetensorsModel:
    """The weights of a model split over one or more safetensors files."""

    files: dict[str, SafetensorsHeader] = field(default_factory=dict)

    @property
    def weight_bytes(self) -> int:
        return sum(h.data_bytes for h in self.files.values())

    def tensor_bytes(self) -> dict[str, int]:
        return {name: nbytes for h in self.files.values() for name, nbytes in h.tensor_bytes().items()}

    def tensors(self) -> dict[str, SafetensorsEntry]:
        return {name: t for h in self.files.values() for name, t in h.tensors.items()}

    def dtype_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors().values():
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return out


def _clean_relative(name: Any) -> str:
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or any(p in ("", ".", "..") or "\\" in p or ":" in p for p in parts):
        raise ModelFileError(f"safetensors index names an unsafe file {str(name)[:80]!r}")
    if not name.endswith(".safetensors"):
        raise ModelFileError(f"safetensors index names {name[:80]!r}, which is not a .safetensors file")
    return name


def shard_names_from_index(index: Any) -> list[str]:
    """The files a `model.safetensors.index.json` spreads the weights over, in order."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFileError("safetensors index has no weight_map")
    return sorted({_clean_relative(v) for v in weight_map.values()})


def read_safetensors_model(
    names: Iterable[str], open_source: Callable[[str], ByteSource | str | os.PathLike[str]]
) -> SafetensorsModel:
    """Read every file's header; `open_source(name)` gives a path or ByteSource for it.

    A tensor stored in two files is refused: the sums would count it twice.
    """
    files: dict[str, SafetensorsHeader] = {}
    seen: dict[str, str] = {}
    for name in names:
        source = open_source(name)
        try:
            header = read_safetensors_header(source)
        except ModelFileError as exc:
            raise ModelFileError(f"{name}: {exc}") from exc
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()
        for tensor in header.tensors:
            if tensor in seen:
                raise ModelFileError(f"tensor {tensor[:80]!r} is in both {seen[tensor]} and {name}")
            seen[tensor] = name
        files[name] = header
    return SafetensorsModel(files)


def local_safetensors_model(folder: str | os.PathLike[str]) -> SafetensorsModel:
    """The weights in a local model folder: the index's shards, else every `*.safetensors` there."""
    folder = Path(folder)
    index_path = folder / INDEX_NAME
    if index_path.is_file():
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise ModelFileError(f"cannot read {index_path}: {exc}") from exc
        names = shard_names_from_index(index)
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        raise ModelFileError(f"no .safetensors files in {folder}")
    return read_safetensors_model(names, lambda name: folder / name)
