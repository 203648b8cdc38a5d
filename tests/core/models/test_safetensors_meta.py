"""Safetensors header parsing: valid files (local, remote, sharded) and hostile ones."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.hub.ranged import HttpRangeSource
from app.core.hub.urls import resolve_url
from app.core.models.errors import ModelFileError
from app.core.models.safetensors_meta import (
    SafetensorsEntry,
    local_safetensors_model,
    read_safetensors_header,
    read_safetensors_model,
    shard_names_from_index,
)
from tests.fakehub import FakeRepo, safetensors_bytes

TENSORS = {
    "model.embed_tokens.weight": ("BF16", [8, 4]),
    "model.layers.0.mlp.up_proj.weight": ("U32", [4, 2]),
    "model.layers.0.mlp.up_proj.scales": ("F16", [4, 1]),
    "model.norm.weight": ("F32", [4]),
}


def raw_file(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file with exactly this header (dict or raw bytes) and data section."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def test_parse_valid_file():
    data = safetensors_bytes(TENSORS)
    h = read_safetensors_header(data)
    assert h.metadata == {"format": "pt"}
    assert set(h.tensors) == set(TENSORS)
    emb = h.tensors["model.embed_tokens.weight"]
    assert emb == SafetensorsEntry("BF16", (8, 4), 0, 64) and emb.nbytes == 64 and emb.n_elements == 32
    assert h.tensors["model.layers.0.mlp.up_proj.weight"].nbytes == 32
    assert h.data_bytes == 64 + 32 + 8 + 16 == len(data) - h.header_size
    assert h.file_size == len(data)
    assert sum(h.tensor_bytes().values()) == h.data_bytes


def test_agrees_with_the_safetensors_library(tmp_path):
    np = pytest.importorskip("numpy")
    save_file = pytest.importorskip("safetensors.numpy").save_file
    from safetensors import safe_open

    arrays = {
        "a": np.zeros((3, 5), np.float16),
        "b": np.ones((7,), np.float32),
        "c": np.zeros((2, 2, 2), np.int8),
        "empty": np.zeros((0, 4), np.float32),
    }
    path = tmp_path / "m.safetensors"
    save_file(arrays, str(path), metadata={"who": "test"})
    h = read_safetensors_header(path)
    assert h.metadata == {"who": "test"}
    assert h.data_bytes == sum(a.nbytes for a in arrays.values())
    with safe_open(str(path), framework="numpy") as f:
        assert set(f.keys()) == set(h.tensors)
        for name in f.keys():  # noqa: SIM118 (a safe_open handle has keys() but is not iterable)
            sl = f.get_slice(name)
            assert tuple(sl.get_shape()) == h.tensors[name].shape
            assert h.tensors[name].nbytes == arrays[name].nbytes


def test_remote_header_via_range(fake_hub):
    data = safetensors_bytes(TENSORS)
    fake_hub.add_repo(FakeRepo("org/st", files={"model.safetensors": data + b""}))
    with HttpRangeSource(resolve_url(fake_hub.url, "org/st", "model.safetensors"), chunk_size=4096) as src:
        remote = read_safetensors_header(src)
        assert src.requests == 1
    assert remote == read_safetensors_header(data)
    assert all(r.range for r in fake_hub.requests("GET", "/resolve/"))


GOOD = {
    "x": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
    "y": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]},
}


def _with(**changes) -> dict:
    out = json.loads(json.dumps(GOOD))
    for name, entry in changes.items():
        out[name] = entry
    return out


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (raw_file(GOOD, bytes(12), length=2**63), "above the 100 MiB cap"),
        (raw_file(GOOD, bytes(12), length=2**64 - 1), "above the 100 MiB cap"),
        (raw_file(GOOD, bytes(12), length=10_000), "past the end of the file"),
        (b"\x10\x00\x00", "shorter than its 8-byte"),
        (raw_file(_with(y={"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}), bytes(12)), "overlaps"),
        (raw_file(_with(y={"dtype": "U8", "shape": [4], "data_offsets": [10, 6]}), bytes(12)), "end before start"),
        (raw_file(_with(y={"dtype": "U8", "shape": [4], "data_offsets": [100, 104]}), bytes(12)), "hole"),
        (raw_file(GOOD, bytes(11)), "holds 11 after the header"),
        (raw_file(GOOD, bytes(13)), "holds 13 after the header"),
        (raw_file(_with(y={"dtype": "Q4_K", "shape": [4], "data_offsets": [8, 12]}), bytes(12)), "unknown dtype"),
        (raw_file(_with(y={"dtype": "U8", "shape": [5], "data_offsets": [8, 12]}), bytes(12)), "needs 5 bytes"),
        (raw_file(_with(y={"dtype": "U8", "shape": [-4], "data_offsets": [8, 12]}), bytes(12)), "invalid shape"),
        (raw_file(_with(y={"dtype": "U8", "shape": [True] * 4, "data_offsets": [8, 12]}), bytes(12)), "shape"),
        (raw_file(_with(y={"dtype": "U8", "shape": [4], "data_offsets": [8]}), bytes(12)), "two integers"),
        (raw_file(_with(y={"dtype": "U8", "shape": [4]}), bytes(12)), "exactly dtype"),
        (raw_file(_with(y=[1, 2]), bytes(12)), "exactly dtype"),
        (raw_file(b"{not json", bytes(12)), "not valid JSON"),
        (raw_file(b"\xff\xfe{}", b""), "not valid JSON"),
        (raw_file(b"[1, 2]", b""), "not a JSON object"),
        (raw_file(b"[" * 100_000, b""), "not valid JSON"),
        (raw_file(b'{"__metadata__": {"a": 1}}', b""), "__metadata__"),
        (raw_file(b'{"__metadata__": []}', b""), "__metadata__"),
        (
            raw_file(
                b'{"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},'
                b' "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}',
                b"\0",
            ),
            "repeats the key",
        ),
        (raw_file({"x": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0\0"), "needs 1.5 bytes"),
        (raw_file({"x": {"dtype": "F16", "shape": [2**62, 2**62], "data_offsets": [0, 8]}}, bytes(8)), "needs"),
    ],
)
def test_hostile_headers_are_refused(data, message):
    with pytest.raises(ModelFileError, match=message):
        read_safetensors_header(data)


def test_header_length_past_end_is_refused_without_reading(fake_hub):
    """A remote file claiming a 90 MiB header when it is tiny: refused from the size alone."""
    fake_hub.add_repo(FakeRepo("org/st", files={"model.safetensors": raw_file(GOOD, bytes(12), length=90 << 20)}))
    with HttpRangeSource(resolve_url(fake_hub.url, "org/st", "model.safetensors"), chunk_size=4096) as src:
        with pytest.raises(ModelFileError, match="past the end"):
            read_safetensors_header(src)
        assert src.requests == 1


VALID = safetensors_bytes(TENSORS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, len(VALID))),
)
def test_fuzzed_headers_raise_only_model_file_error(edits, cut):
    data = bytearray(VALID)
    header_end = 8 + struct.unpack("<Q", VALID[:8])[0]
    for pos, value in edits:
        data[pos % header_end] = value  # mutate the length and the JSON, where parsing happens
    if cut is not None:
        data = data[:cut]
    try:
        h = read_safetensors_header(bytes(data))
    except ModelFileError:
        return
    assert h.data_bytes == len(data) - h.header_size
    assert sum(t.nbytes for t in h.tensors.values()) == h.data_bytes


# ---- several files ----


def _shards(folder, index: dict | None = None) -> dict[str, bytes]:
    files = {
        "model-00001-of-00002.safetensors": safetensors_bytes({"model.embed_tokens.weight": ("F16", [8, 4])}),
        "model-00002-of-00002.safetensors": safetensors_bytes(
            {"model.layers.0.mlp.up_proj.weight": ("BF16", [4, 4]), "lm_head.weight": ("F16", [8, 4])}
        ),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    index = index or {
        "metadata": {"total_size": 160},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.layers.0.mlp.up_proj.weight": "model-00002-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return files


def test_sharded_folder_sums_every_file(tmp_path):
    _shards(tmp_path)
    model = local_safetensors_model(tmp_path)
    assert list(model.files) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert model.weight_bytes == 64 + 32 + 64
    assert model.tensor_bytes() == {
        "model.embed_tokens.weight": 64,
        "model.layers.0.mlp.up_proj.weight": 32,
        "lm_head.weight": 64,
    }
    assert model.dtype_bytes() == {"F16": 128, "BF16": 32}


def test_folder_without_index_reads_every_safetensors(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(safetensors_bytes({"x": ("F32", [3])}))
    (tmp_path / "b.safetensors").write_bytes(safetensors_bytes({"y": ("U8", [5])}))
    assert local_safetensors_model(tmp_path).weight_bytes == 17
    with pytest.raises(ModelFileError, match=r"no \.safetensors"):
        local_safetensors_model(tmp_path / "nothing")


def test_tensor_in_two_files_is_refused(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(safetensors_bytes({"x": ("F32", [3])}))
    (tmp_path / "b.safetensors").write_bytes(safetensors_bytes({"x": ("F32", [3])}))
    with pytest.raises(ModelFileError, match=r"in both a\.safetensors and b\.safetensors"):
        read_safetensors_model(["a.safetensors", "b.safetensors"], lambda n: tmp_path / n)


def test_bad_shard_names_its_file(tmp_path):
    (tmp_path / "a.safetensors").write_bytes(b"garbage!" * 3)
    with pytest.raises(ModelFileError, match=r"^a\.safetensors: "):
        local_safetensors_model(tmp_path)


@pytest.mark.parametrize(
    "weight_map",
    [
        {"x": "../../etc/passwd.safetensors"},
        {"x": "/abs.safetensors"},
        {"x": "a\\..\\b.safetensors"},
        {"x": "model.bin"},
        {"x": 3},
        {},
    ],
)
def test_unsafe_index_is_refused(weight_map):
    with pytest.raises(ModelFileError):
        shard_names_from_index({"weight_map": weight_map})


def test_index_names_in_order_without_duplicates():
    index = {"weight_map": {"b": "m-2.safetensors", "a": "m-1.safetensors", "c": "m-2.safetensors"}}
    assert shard_names_from_index(index) == ["m-1.safetensors", "m-2.safetensors"]
