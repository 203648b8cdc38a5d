"""Importers: the Hugging Face cache (built by the real client from the fake Hub) and LM Studio folders."""

from __future__ import annotations

import shutil

from app.core.library import READY, import_hf_cache, import_lmstudio
from tests.fakehub import gguf_repo, mlx_repo, pickle_repo


def _download_all(fake_hub, repo, names=None):
    from huggingface_hub import hf_hub_download

    names = names or list(repo.snapshot("main").files)
    return [hf_hub_download(repo.repo_id, n, endpoint=fake_hub.url, token=False) for n in names]


def test_hf_cache_importer_finds_gguf_and_mlx_in_place(hf_env, fake_hub, library):
    gguf = fake_hub.add_repo(gguf_repo("fake-org/Tiny-GGUF"))
    mlx = fake_hub.add_repo(mlx_repo("mlx-community/Tiny-4bit"))
    pickle = fake_hub.add_repo(pickle_repo())
    _download_all(fake_hub, gguf)
    _download_all(fake_hub, mlx)
    _download_all(fake_hub, pickle)
    result = import_hf_cache(library, hf_env)
    by_name = {m.name: m for m in result.imported}
    assert set(by_name) == {"Tiny-GGUF:Q4_K_M", "Tiny-GGUF:Q8_0", "Tiny-4bit"}
    split = by_name["Tiny-GGUF:Q8_0"]
    assert len(split.files) == 3 and split.format == "gguf"
    for m in result.imported:
        assert m.source == "hf-cache" and m.status == READY
        assert hf_env in m.path.parents  # in place: inside the HF cache, nothing copied
    assert by_name["Tiny-4bit"].format == "mlx" and by_name["Tiny-4bit"].quant == "4-bit g64"
    assert by_name["Tiny-4bit"].commit == mlx.snapshot("main").commit
    assert by_name["Tiny-GGUF:Q4_K_M"].repo_id == "fake-org/Tiny-GGUF"
    assert [s.reason for s in result.skipped] == ["fake-org/Pickle-Only holds no GGUF or MLX model"]
    assert list(library.models_dir.iterdir()) == []
    # Importing again does not duplicate.
    import_hf_cache(library, hf_env)
    assert len(library.list()) == 3


def test_hf_cache_partial_split_set_is_skipped(hf_env, fake_hub, library):
    repo = fake_hub.add_repo(gguf_repo("fake-org/Part-GGUF", quants=("Q8_0",), split=("Q8_0", 3)))
    _download_all(fake_hub, repo, ["Q8_0/Part-Q8_0-00001-of-00003.gguf"])
    result = import_hf_cache(library, hf_env)
    assert result.imported == []
    assert "incomplete" in result.skipped[0].reason


def test_hf_cache_absent_is_empty(library, tmp_path):
    result = import_hf_cache(library, tmp_path / "no-cache")
    assert result.imported == [] and result.skipped == []


def test_lmstudio_importer(library, gguf_copy, tiny_mlx_model, tmp_path):
    root = tmp_path / "lmstudio" / "models"
    src = gguf_copy(root / "lmstudio-community" / "Tiny-Llama-GGUF" / "Tiny-Llama-Q4_K_M.gguf")
    shutil.copytree(tiny_mlx_model, root / "mlx-community" / "Tiny-Llama-MLX")
    bad = root / "someone" / "Broken-GGUF" / "Broken-Q4_0.gguf"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a gguf at all")
    result = import_lmstudio(library, roots=[root, tmp_path / "absent"])
    by_repo = {m.repo_id: m for m in result.imported}
    assert set(by_repo) == {"lmstudio-community/Tiny-Llama-GGUF", "mlx-community/Tiny-Llama-MLX"}
    g = by_repo["lmstudio-community/Tiny-Llama-GGUF"]
    assert g.path == src and g.source == "lmstudio" and g.quant == "Q4_K_M" and g.name == "Tiny-Llama-GGUF:Q4_K_M"
    assert by_repo["mlx-community/Tiny-Llama-MLX"].format == "mlx"
    assert [s.path.name for s in result.skipped] == ["Broken-GGUF"]
    assert "Broken-Q4_0.gguf" in result.skipped[0].reason
    assert list(library.models_dir.iterdir()) == []


def test_lmstudio_default_roots_absent(library, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    assert import_lmstudio(library).imported == []
