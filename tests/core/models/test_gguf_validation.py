"""T5: crafted and fuzzed GGUF headers are refused with a ModelFileError that says why."""

from __future__ import annotations

import itertools
import struct

import pytest
from gguf_builder import (
    ARRAY,
    GGML_F32,
    GGML_Q8_0,
    STRING,
    U8,
    U32,
    U64,
    GGUFBuilder,
    small_valid_builder,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.errors import HearthError
from app.core.models.errors import ModelFileError
from app.core.models.gguf import BytesSource, read_gguf_header, validate_gguf


def _refused(b: GGUFBuilder | bytes, match: str) -> ModelFileError:
    data = b if isinstance(b, bytes) else b.build()
    with pytest.raises(ModelFileError, match=match) as info:
        validate_gguf(BytesSource(data))
    return info.value


def test_the_baseline_is_valid():
    header = validate_gguf(BytesSource(small_valid_builder().build()))
    assert len(header.tensors) == 3


def test_model_file_error_is_a_hearth_error():
    assert issubclass(ModelFileError, HearthError)


@pytest.mark.parametrize("magic", [b"GGUX", b"\x00\x00\x00\x00", b"FUGG"])
def test_bad_magic(magic):
    b = small_valid_builder()
    b.magic = magic
    _refused(b, "not a GGUF file")


@pytest.mark.parametrize("version", [0, 1, 4, 2**32 - 1])
def test_unsupported_version(version):
    b = small_valid_builder()
    b.version = version
    _refused(b, f"unsupported GGUF version {version};")


def test_big_endian_version_is_named():
    b = small_valid_builder()
    b.version = 0x03000000
    _refused(b, "big-endian")


@pytest.mark.parametrize("count", [-1, -(2**63), 1_000_001])
def test_tensor_count_out_of_range(count):
    b = small_valid_builder()
    b.n_tensors = count
    _refused(b, f"tensor count {count} is outside")


@pytest.mark.parametrize("count", [-1, -(2**63), 1_000_001])
def test_kv_count_out_of_range(count):
    b = small_valid_builder()
    b.n_kv = count
    _refused(b, rf"metadata \(key-value\) count {count} is outside")


def test_kv_count_larger_than_present_is_truncation():
    b = small_valid_builder()
    b.n_kv = len(b.kvs) + 5
    b.tensors = []
    b.n_tensors = 0
    _refused(b, "truncated")


@pytest.mark.parametrize("vtype", [13, 255, 2**32 - 1])
def test_unknown_kv_type(vtype):
    b = small_valid_builder().kv("evil", vtype, raw_value=b"\x00" * 8)
    _refused(b, f"value of 'evil' has unknown value type {vtype}")


def test_unknown_array_item_type():
    b = small_valid_builder().kv("evil", ARRAY, raw_value=struct.pack("<IQ", 99, 1))
    _refused(b, "unknown item type 99")


@pytest.mark.parametrize("gtype", [4, 5, 31, 36, 43, 2**32 - 1])
def test_unknown_tensor_type(gtype):
    b = small_valid_builder()
    b.tensor("evil.weight", (32,), gtype, nbytes=32)
    _refused(b, f"tensor 'evil.weight' has unknown ggml type {gtype}")


def test_duplicate_key():
    b = small_valid_builder().kv("general.name", STRING, "again")
    _refused(b, "duplicate metadata key 'general.name'")


def test_names_in_messages_are_escaped():
    b = small_valid_builder().kv("evil\nkey\x1b[2J", 99, raw_value=b"")
    err = _refused(b, "unknown value type 99")
    assert "\n" not in str(err) and "\x1b" not in str(err)
    assert "evil\\nkey" in str(err)


def test_bytes_are_accepted_directly():
    data = small_valid_builder().build()
    assert validate_gguf(data) == validate_gguf(BytesSource(data))


def test_empty_key():
    b = small_valid_builder().kv("", U32, 1)
    _refused(b, "metadata key 11 is empty")


@pytest.mark.parametrize("alignment", [0, 13, 3, 2**31 + 1])
def test_alignment_not_a_power_of_two(alignment):
    b = small_valid_builder().kv("general.alignment", U32, alignment)
    _refused(b, f"general.alignment {alignment} is not a non-zero power of two")


def test_alignment_must_be_u32():
    b = small_valid_builder().kv("general.alignment", U64, 32)
    _refused(b, "general.alignment must be uint32, not uint64")


def test_custom_alignment_is_honoured():
    b = small_valid_builder().kv("general.alignment", U32, 64)
    b.alignment = 64
    header = validate_gguf(BytesSource(b.build()))
    assert header.alignment == 64
    assert header.data_offset % 64 == 0
    assert all(t.offset % 64 == 0 for t in header.tensors)


def test_more_than_four_dims():
    b = small_valid_builder().tensor("evil", (32, 1, 1, 1, 1))
    _refused(b, "tensor 'evil' has 5 dimensions; 1 to 4 are allowed")


def test_zero_dims():
    b = small_valid_builder().tensor("evil", (), nbytes=4)
    _refused(b, "tensor 'evil' has 0 dimensions")


@pytest.mark.parametrize("dims", [(64, 0), (0,), (64, -3), (-(2**63), 1)])
def test_non_positive_dimension(dims):
    b = small_valid_builder().tensor("evil", dims, nbytes=0)
    bad = next(i for i, d in enumerate(dims) if d <= 0)
    _refused(b, f"tensor 'evil' dimension {bad} is {dims[bad]}; dimensions must be positive")


def test_dims_2_pow_42_plus_1_overflow():
    # The ggml PR #18674 shape: the product wraps a 64-bit counter.
    b = small_valid_builder().tensor("evil", (2**42 + 1, 2**22), nbytes=32)
    _refused(b, r"tensor 'evil' shape .* overflows")


def test_dims_product_overflow_across_four_dims():
    b = small_valid_builder().tensor("evil", (2**16, 2**16, 2**16, 2**16), nbytes=32)
    _refused(b, "overflows")


def test_byte_size_overflow_is_out_of_range():
    # 2^62 elements fit in int64, their 2^64 bytes do not.
    b = small_valid_builder().tensor("evil", (2**62,), GGML_F32, nbytes=32)
    _refused(b, "tensor 'evil' offset .* is out of range")


def test_row_not_multiple_of_block_size():
    b = small_valid_builder().tensor("evil", (33, 2), GGML_Q8_0, nbytes=34 * 2)
    _refused(b, "row length 33 is not a multiple of the Q8_0 block size 32")


@pytest.mark.parametrize("offset", [-1, 2**63, 2**64 - 32])
def test_offset_minus_one_and_huge(offset):
    b = small_valid_builder()
    b.tensors[-1].offset = offset
    _refused(b, "tensor 'output.weight' offset .* is out of range")


def test_offset_not_aligned():
    b = small_valid_builder()
    b.tensors[-1].offset = 1000
    b.data_delta = 2000
    _refused(b, "tensor 'output.weight' offset 1000 is not aligned to 32 bytes")


def test_data_one_byte_short():
    b = small_valid_builder()
    b.data_delta = -1
    err = _refused(b, "runs past the end of the file")
    data_offset = b.data_offset()
    last = b.tensors[-1]
    size = len(b.build())
    offset = data_offset + b._offsets()[-1]
    assert str(err) == (
        f"tensor '{last.name}' data (offset {offset} + {last.size()} bytes) runs past the end "
        f"of the file ({size} bytes)"
    )


def test_offset_plus_size_past_eof():
    b = small_valid_builder()
    b.tensor("far.weight", (64,), GGML_F32, offset=2**40)
    _refused(b, "tensor 'far.weight' data .* runs past the end of the file")


def test_past_eof_checked_on_a_path(tmp_path):
    b = small_valid_builder()
    b.data_delta = -100
    path = tmp_path / "short.gguf"
    path.write_bytes(b.build())
    with pytest.raises(ModelFileError, match="runs past the end of the file"):
        validate_gguf(path)


def test_overlapping_tensors():
    b = small_valid_builder()
    b.tensors[1].offset = b._offsets()[0] + 32  # inside token_embd's 272 bytes
    _refused(b, "tensors 'token_embd.weight' .* and 'blk.0.attn_norm.weight' .* overlap")


def test_duplicate_tensor_names():
    b = small_valid_builder().tensor("output.weight", (64,))
    _refused(b, "duplicate tensor name 'output.weight'")


def test_tensor_name_too_long():
    b = small_valid_builder().tensor("x" * 64, (32,))
    _refused(b, "name is longer than 63 bytes")


@pytest.mark.parametrize("length", [2**63, 2**64 - 1, 16 * 1024 * 1024 + 1])
def test_string_length_above_cap(length):
    b = small_valid_builder().kv("evil", STRING, raw_value=struct.pack("<Q", length))
    _refused(b, f"value of 'evil' has length {length}, above the 16 MiB string cap")


def test_key_length_2_pow_63():
    data = small_valid_builder().header_bytes()
    hostile = data[:24] + struct.pack("<Q", 2**63) + data[32:]  # first key's length
    _refused(hostile, "key 0 has length")


def test_string_past_end_is_truncation():
    b = small_valid_builder().kv("evil", STRING, raw_value=struct.pack("<Q", 1000) + b"abc")
    b.tensors = []
    _refused(b, "truncated")


def test_array_length_above_cap():
    b = small_valid_builder().kv("evil", ARRAY, raw_value=struct.pack("<IQ", U8, 16 * 2**20 + 1))
    _refused(b, "has 16777217 items, above the cap")


def test_array_too_big_for_the_header_cap():
    # 16 Mi strings need at least 128 MiB of header: refused before any item is read.
    b = small_valid_builder().kv("evil", ARRAY, raw_value=struct.pack("<IQ", STRING, 16 * 2**20))
    _refused(b, "header too large.*64 MiB header cap")


def test_array_longer_than_file_is_truncation():
    b = small_valid_builder().kv("evil", ARRAY, raw_value=struct.pack("<IQ", U32, 10**6))
    _refused(b, "truncated")


def test_nested_arrays_deeper_than_two_levels():
    ok = small_valid_builder().kv("n", ARRAY, (ARRAY, [(U8, [1])]))
    assert validate_gguf(BytesSource(ok.build())).metadata["n"] == [[1]]
    deep = small_valid_builder().kv("n", ARRAY, raw_value=struct.pack("<IQIQ", ARRAY, 1, ARRAY, 0))
    _refused(deep, "nests arrays deeper than 2 levels")


@pytest.mark.parametrize("cut", [0, 3, 4, 7, 15, 23, 30, 100, 400, -1])
def test_truncated_header(cut):
    data = small_valid_builder().header_bytes()
    _refused(data[:cut], "truncated")


def test_truncated_header_without_known_size():
    data = small_valid_builder().header_bytes()[:300]

    class NoSize:
        def read_at(self, offset, n):
            return data[offset : offset + n]

    with pytest.raises(ModelFileError, match=r"truncated.*ends at 300 bytes"):
        read_gguf_header(NoSize())


def test_header_cap(monkeypatch):
    import app.core.models.gguf as gguf_module

    monkeypatch.setattr(gguf_module, "MAX_HEADER_BYTES", 256)
    _refused(small_valid_builder(), "header too large")


# --- fuzzing -----------------------------------------------------------------------

_BASE = (
    small_valid_builder()
    .kv("general.alignment", U32, 32)
    .kv("nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"])]))
    .build()
)
_INTERESTING = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 13, 4, 255]

_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(_BASE) - 1), st.integers(0, 7)),
    st.tuples(st.just("replace"), st.integers(0, len(_BASE) - 1), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, len(_BASE)), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, len(_BASE)), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("u64"), st.integers(0, len(_BASE) - 8), st.sampled_from(_INTERESTING)),
)


def _mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for kind, pos, arg in mutations:
        pos = min(pos, max(len(buf) - 1, 0))
        if kind == "flip" and buf:
            buf[pos] ^= 1 << arg
        elif kind == "replace" and buf:
            buf[pos] = arg
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = arg
        elif kind == "u64" and len(buf) >= pos + 8:
            buf[pos : pos + 8] = struct.pack("<Q", arg)
    return bytes(buf)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutation, min_size=1, max_size=4), st.booleans())
def test_fuzzed_headers_only_raise_model_file_error(mutations, size_known):
    data = _mutate(_BASE, mutations)

    class Source:
        def read_at(self, offset, n):
            return data[offset : offset + n]

    source = BytesSource(data) if size_known else Source()
    try:
        header = read_gguf_header(source)
    except ModelFileError as exc:
        assert str(exc)
        return
    # Anything accepted must describe tensors that lie inside the file, without overlap.
    assert len(header.tensors) <= 1_000_000
    ends = []
    for t in header.tensors:
        assert 1 <= len(t.dims) <= 4 and all(d > 0 for d in t.dims)
        assert t.offset % header.alignment == 0
        ends.append((t.offset, t.offset + t.nbytes))
        if size_known:
            assert header.data_offset + t.offset + t.nbytes <= len(data)
    ends.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ends))
