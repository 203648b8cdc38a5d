"""A Hub repo's variants with real metadata (GGUF headers by Range, MLX configs and safetensors headers,
EXL2 branches), read over loopback from the fake Hub through the HubClient."""

import json
import struct
from dataclasses import replace

import pytest

from app.core.hub.client import HubClient
from app.core.hub.errors import HubNotFound, HubRefused
from app.core.hub.metadata import assessable_variants, read_mlx_repo
from app.core.models.local_variants import variants_from_path
from tests.fakehub import FakeRepo, exl2_repo, gguf_repo, mlx_repo, pickle_repo, safetensors_bytes
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def quant_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("quants")
    return {q: write_tiny_llama_gguf(d / f"t-{q}.gguf", dtype=q, n_ctx=4096) for q in ("F16", "Q8_0")}


@pytest.fixture
def client(hf_env, fake_hub) -> HubClient:
    return HubClient(fake_hub.url, None, timeout=5)


def test_repo_variants_read_headers_by_range(fake_hub, client, quant_files):
    fake_hub.add_repo(
        gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    variants = assessable_variants(client, "org/Tiny-GGUF")
    by = {v.label: v for v in variants}
    assert set(by) == {"F16", "Q8_0"}
    local = variants_from_path(quant_files["Q8_0"])[0]
    assert by["Q8_0"].spec.block_bytes == local.spec.block_bytes
    assert by["Q8_0"].spec.n_ctx_train == 4096
    assert by["F16"].size_bytes == quant_files["F16"].stat().st_size
    gets = fake_hub.requests("GET", "/resolve/")
    assert gets and all(r.range for r in gets)


def test_pickle_only_repo_is_refused(fake_hub, client):
    fake_hub.add_repo(pickle_repo("org/Old-Model"))
    with pytest.raises(HubRefused, match="pickle"):
        assessable_variants(client, "org/Old-Model")


def test_missing_repo_says_so(fake_hub, client):
    with pytest.raises(HubNotFound, match="no such model"):
        assessable_variants(client, "org/Nope")


def _data_bytes(file: bytes) -> int:
    return len(file) - 8 - struct.unpack("<Q", file[:8])[0]


# ---- MLX ----


def test_mlx_repo_bits_group_bpw_and_exact_bytes(fake_hub, client):
    repo = fake_hub.add_repo(mlx_repo("mlx-community/Tiny-4bit"))
    files = list(repo.files) + ["README.md"]
    v = read_mlx_repo(client, repo.repo_id, files=files)
    assert (v.bits, v.group_size, v.bpw, v.mode) == (4, 64, 4.5, "affine")
    assert v.weight_bytes == _data_bytes(repo.files["model.safetensors"]) == 16 + 8
    assert v.spec.input_bytes == 24 and v.spec.tied_embeddings and v.spec.file_type == "4bit-g64"
    assert v.spec.n_params == 4 * 64  # 4 groups of 64 weights
    assert v.files == ("model.safetensors",)
    st_gets = fake_hub.requests("GET", "/model.safetensors")
    assert st_gets and all(r.range for r in st_gets)
    assert not fake_hub.requests("GET", "index.json")  # the listing said there is no index


def test_mlx_repo_without_listing_probes_the_index(fake_hub, client):
    repo = fake_hub.add_repo(mlx_repo("mlx-community/Tiny-4bit"))
    v = read_mlx_repo(client, repo.repo_id)
    assert v.weight_bytes == 24
    assert [r.status for r in fake_hub.requests("GET", "index.json")] == [404]


def test_mlx_repo_as_an_assessable_variant(fake_hub, client):
    repo = fake_hub.add_repo(mlx_repo("mlx-community/Tiny-4bit"))
    (v,) = assessable_variants(client, repo.repo_id)
    assert (v.format, v.label, v.bpw, v.size_bytes) == ("mlx", "4-bit g64", 4.5, 24)
    assert v.spec is not None and v.revision == repo.snapshot("main").commit
    # What a download of this variant fetches: the whole model folder, not only the weights.
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(v.files)
    assert len(fake_hub.requests("GET", "/config.json")) == 1  # read once, for the label and the spec


def test_an_mlx_vision_checkpoint_is_marked_seeing_where_mlx_vlm_reads_it(fake_hub, client, monkeypatch):
    monkeypatch.setattr("app.core.hub.metadata.mlx_vlm_installed", lambda: True)
    fake_hub.add_repo(mlx_repo("mlx-community/Tiny-VL-4bit", vision={"model_type": "clip_vision_model"}))
    fake_hub.add_repo(mlx_repo("mlx-community/Tiny-4bit"))
    (seeing,) = assessable_variants(client, "mlx-community/Tiny-VL-4bit")
    (text,) = assessable_variants(client, "mlx-community/Tiny-4bit")
    assert seeing.sees_images and seeing.projector is None and not text.sees_images
    assert seeing.size_bytes == text.size_bytes  # the text half's spec is read as before
    monkeypatch.setattr("app.core.hub.metadata.mlx_vlm_installed", lambda: False)
    assert not assessable_variants(client, "mlx-community/Tiny-VL-4bit")[0].sees_images


def test_sharded_mlx_repo_sums_shards(fake_hub, client):
    shard1 = safetensors_bytes(
        {
            "model.embed_tokens.weight": ("U32", [16, 2]),
            "model.embed_tokens.scales": ("BF16", [16, 1]),
            "model.embed_tokens.biases": ("BF16", [16, 1]),
        }
    )
    shard2 = safetensors_bytes(
        {
            "model.layers.0.mlp.down_proj.weight": ("U32", [16, 4]),
            "model.layers.0.mlp.down_proj.scales": ("BF16", [16, 2]),
            "model.layers.0.mlp.down_proj.biases": ("BF16", [16, 2]),
            "model.layers.0.input_layernorm.weight": ("BF16", [16]),
        }
    )
    index = {
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.layers.0.mlp.down_proj.weight": "model-00002-of-00002.safetensors",
        }
    }
    config = {
        "model_type": "qwen3",
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "vocab_size": 16,
        "quantization": {"bits": 8, "group_size": 32, "model.layers.0.mlp.down_proj": {"bits": 8, "group_size": 32}},
    }
    repo = fake_hub.add_repo(
        FakeRepo(
            "mlx-community/Sharded-8bit",
            files={
                "config.json": json.dumps(config).encode(),
                "model.safetensors.index.json": json.dumps(index).encode(),
                "model-00001-of-00002.safetensors": shard1,
                "model-00002-of-00002.safetensors": shard2,
            },
        )
    )
    v = read_mlx_repo(client, repo.repo_id, files=list(repo.files))
    assert (v.bits, v.group_size, v.bpw) == (8, 32, 9.0)
    assert v.weight_bytes == _data_bytes(shard1) + _data_bytes(shard2) == 128 + 64 + 256 + 128 + 32
    assert v.spec.block_bytes == [256 + 128 + 32] and v.spec.input_bytes == 192
    assert v.spec.n_params == 16 * 32 + 32 * 32 + 16  # scales elements x group size, plus the norm
    assert v.effective_bpw == pytest.approx(v.weight_bytes * 8 / v.spec.n_params)


def test_mlx_repo_asking_for_code_is_refused_before_weights(fake_hub, client):
    repo = fake_hub.add_repo(mlx_repo("mlx-community/Sneaky"))
    config = json.loads(repo.files["config.json"])
    repo.set_file("config.json", json.dumps(dict(config, auto_map={"AutoModel": "m.M"})).encode())
    with pytest.raises(HubRefused, match="never runs code"):
        read_mlx_repo(client, repo.repo_id, files=list(repo.files))
    with pytest.raises(HubRefused, match="never runs code"):
        assessable_variants(client, repo.repo_id)
    assert not fake_hub.requests("GET", ".safetensors")


# ---- EXL2 ----


def test_exl2_branches_become_variants(fake_hub, client):
    repo = fake_hub.add_repo(exl2_repo("org/Tiny-exl2"))
    variants = assessable_variants(client, repo.repo_id)
    assert [(v.revision, v.bpw) for v in variants] == [("4.0bpw", 4.0), ("6.5bpw", 6.5)]
    for v in variants:
        sizes = {p: f.size for p, f in repo.snapshot(v.revision).files.items() if p.endswith(".safetensors")}
        assert v.size_bytes == sum(sizes.values()) == len(safetensors_bytes())
        assert [f for f in v.files if f.endswith(".safetensors")] == ["output.safetensors"]
        assert v.spec.architecture == "llama"
        assert v.spec.weight_bytes == v.size_bytes and v.spec.file_type == f"EXL2 {v.bpw:g}bpw h6"
    assert len(fake_hub.requests("GET", "/refs")) == 1


def test_a_vision_repo_reads_its_projector_once_and_every_quant_counts_it(fake_hub, client, quant_files, tmp_path):
    from app.core.hub.metadata import projector_cost
    from app.core.hub.variants import repo_variants
    from app.core.models.projector import projector_memory
    from tests.fixtures.tiny_projector import write_tiny_projector

    projector = write_tiny_projector(tmp_path / "mmproj-Tiny-VL-F16.gguf", n_embd_text=256)
    repo = gguf_repo(
        "org/Tiny-VL-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes()
    )
    repo = replace(repo, files={**repo.files, "mmproj-Tiny-VL-F16.gguf": projector.read_bytes()})
    fake_hub.add_repo(repo)
    variants = assessable_variants(client, "org/Tiny-VL-GGUF")
    assert {v.label for v in variants} == {"F16", "Q8_0"}
    for v in variants:
        assert v.projector == "mmproj-Tiny-VL-F16.gguf" and v.projector_memory == projector_memory(projector)
    read_for_both = len(fake_hub.requests("GET", "mmproj"))
    choice = next(c for c in repo_variants(client, "org/Tiny-VL-GGUF") if c.mmproj)
    assert projector_cost(client, choice) == projector_memory(projector)
    assert len(fake_hub.requests("GET", "mmproj")) == 2 * read_for_both  # the listing read it once, not per quant


def test_a_projector_whose_header_cannot_be_read_is_counted_by_its_size(fake_hub, client, quant_files):
    repo = gguf_repo(
        "org/Broken-VL-GGUF", quants=("Q8_0",), split=None, make_gguf=lambda q: quant_files[q].read_bytes()
    )
    fake_hub.add_repo(replace(repo, files={**repo.files, "mmproj-f16.gguf": b"GGUF but not really" + bytes(4000)}))
    (variant,) = assessable_variants(client, "org/Broken-VL-GGUF")
    memory = variant.projector_memory
    assert memory is not None and memory.weights == 4019 and memory.compute > 0 and memory.encoder_flops == 0
