"""A vision model loads with the projector kept among its files: the quant's own precision when the repo has
one per precision, else F16, else the only one; a text model, an MLX model or a projector whose file is gone
loads without one. An MLX checkpoint sees images when it has a vision half that mlx-vlm can read here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from app.core.library.projectors import is_projector, projector_beside, projector_of, sees_images
from app.core.library.store import LocalModel, ModelFile


def model(tmp_path: Path, names: list[str], quant: str | None = "Q4_K_M", fmt: str = "gguf") -> LocalModel:
    """A library entry whose projectors are real (their headers are read); the model file is a stub, whose
    width cannot be told, so any projector fits it."""
    from tests.fixtures.tiny_projector import write_tiny_projector

    files = []
    for name in names:
        if is_projector(name) and fmt == "gguf":
            write_tiny_projector(tmp_path / name, n_embd_text=256)
        else:
            (tmp_path / name).write_bytes(b"GGUF")
        files.append(ModelFile(tmp_path / name, 4))
    return LocalModel("id", "m", fmt, quant, 4, files[0].path, tuple(files), None, None, "import", 0.0, None, "ready")


def test_the_quants_own_projector_wins_then_f16_then_the_only_one(tmp_path):
    names = ["m-Q8_0.gguf", "mmproj-m-F16.gguf", "mmproj-m-Q8_0.gguf"]
    assert projector_of(model(tmp_path, names, quant="Q8_0")) == tmp_path / "mmproj-m-Q8_0.gguf"
    assert projector_of(model(tmp_path, names, quant="Q4_K_M")) == tmp_path / "mmproj-m-F16.gguf"
    assert projector_of(model(tmp_path, ["m.gguf", "mmproj-BF16.gguf"])) == tmp_path / "mmproj-BF16.gguf"


def test_no_projector_for_text_models_mlx_or_a_missing_file(tmp_path):
    assert projector_of(model(tmp_path, ["m-Q4_K_M.gguf"])) is None
    assert projector_of(model(tmp_path, ["folder", "mmproj.gguf"], fmt="mlx")) is None
    gone = model(tmp_path, ["m.gguf", "mmproj-F16.gguf"])
    (tmp_path / "mmproj-F16.gguf").unlink()
    assert projector_of(gone) is None
    assert is_projector("MMPROJ-model-f16.gguf") and not is_projector("model-f16.gguf")


def mlx_folder(tmp_path: Path, name: str, config: dict) -> LocalModel:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    file = ModelFile(folder / "config.json", 2)
    return LocalModel("id", name, "mlx", None, 2, folder, (file,), None, None, "import", 0.0, None, "ready")


def test_an_mlx_checkpoint_sees_with_a_vision_half_mlx_vlm_and_one_position_a_token(tmp_path, monkeypatch):
    monkeypatch.setattr("app.core.models.vision_config.mlx_vlm_installed", lambda: True)
    llava = mlx_folder(tmp_path, "llava", {"model_type": "llava", "vision_config": {}, "text_config": {}})
    qwen = mlx_folder(
        tmp_path, "qwen", {"vision_config": {}, "text_config": {"rope_scaling": {"mrope_section": [16, 24, 24]}}}
    )
    text = mlx_folder(tmp_path, "text", {"model_type": "llama"})
    assert [sees_images(m) for m in (llava, qwen, text)] == [True, False, False]
    assert sees_images(model(tmp_path, ["m.gguf", "mmproj-F16.gguf"])) and not sees_images(model(tmp_path, ["t.gguf"]))
    monkeypatch.setattr("app.core.models.vision_config.mlx_vlm_installed", lambda: False)
    assert not sees_images(llava)


def real_model(tmp_path: Path, tiny_gguf_f16: Path, projectors: dict[str, int]) -> LocalModel:
    """The tiny llama (256 wide) kept with projectors made for the widths given."""
    import shutil

    from tests.fixtures.tiny_projector import write_tiny_projector

    path = tmp_path / "tiny-Q4_K_M.gguf"
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_gguf_f16, path)
    files = [ModelFile(path, path.stat().st_size)]
    for name, width in projectors.items():
        write_tiny_projector(tmp_path / name, n_embd_text=width)
        files.append(ModelFile(tmp_path / name, (tmp_path / name).stat().st_size))
    return LocalModel("id", "m", "gguf", "Q4_K_M", 4, path, tuple(files), None, None, "import", 0.0, None, "ready")


def test_a_projector_made_for_another_width_is_not_paired(tmp_path, tiny_gguf_f16):
    other = real_model(tmp_path / "a", tiny_gguf_f16, {"mmproj-other-F16.gguf": 128})
    assert projector_of(other) is None and not sees_images(other)
    # Its own width wins over the name's preference (F16) when both are kept with it.
    both = real_model(tmp_path / "b", tiny_gguf_f16, {"mmproj-other-F16.gguf": 128, "mmproj-own-Q8_0.gguf": 256})
    assert projector_of(both) == tmp_path / "b" / "mmproj-own-Q8_0.gguf"
    assert projector_beside(both.path) == tmp_path / "b" / "mmproj-own-Q8_0.gguf"


def test_a_file_named_mmproj_whose_header_is_no_projector_is_not_paired(tmp_path, tiny_gguf_f16):
    import shutil

    entry = real_model(tmp_path, tiny_gguf_f16, {})
    fake = tmp_path / "mmproj-F16.gguf"
    shutil.copyfile(tiny_gguf_f16, fake)  # a text model under a projector's name
    entry = dataclasses.replace(entry, files=(*entry.files, ModelFile(fake, 1)))
    assert projector_of(entry) is None
    (tmp_path / "mmproj-junk-F16.gguf").write_bytes(b"not a gguf at all")
    assert projector_beside(entry.path) is None
