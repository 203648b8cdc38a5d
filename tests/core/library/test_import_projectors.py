"""An import pairs a model with a projector only when the projector's header says it is one and it was made for
the model's embedding width: another model's mmproj in the same folder is left out and said, never kept with
the model (which would then fail every load)."""

from __future__ import annotations

from pathlib import Path

from app.core.library import import_path
from app.core.library.projectors import projector_of
from tests.fixtures.tiny_projector import write_tiny_projector


def projectors(model) -> list[str]:
    return [f.path.name for f in model.files if "mmproj" in f.path.name]


def test_a_file_imported_beside_another_models_projector_is_kept_without_it(library, gguf_copy, tmp_path):
    folder = tmp_path / "downloads"
    model = gguf_copy(folder / "Tiny-Q4_K_M.gguf")  # 256 wide
    write_tiny_projector(folder / "mmproj-Other-F16.gguf", n_embd_text=128)
    result = import_path(library, model)
    (entry,) = result.imported
    assert projectors(entry) == [] and projector_of(entry) is None
    (skipped,) = result.skipped
    assert skipped.path.name == "mmproj-Other-F16.gguf"
    assert "made for a model 128 wide; this one is 256 wide" in skipped.reason


def test_a_folder_pairs_each_model_with_the_projector_that_fits_it(library, gguf_copy, tmp_path):
    folder = tmp_path / "mixed"
    gguf_copy(folder / "Tiny-Q4_K_M.gguf")
    # By name the F16 one would win (no Q4_K_M projector); by width only the Q8_0 one fits.
    write_tiny_projector(folder / "mmproj-Other-F16.gguf", n_embd_text=128)
    write_tiny_projector(folder / "mmproj-Tiny-Q8_0.gguf", n_embd_text=256)
    result = import_path(library, folder)
    (entry,) = result.imported
    assert projectors(entry) == ["mmproj-Tiny-Q8_0.gguf"]
    assert projector_of(entry) == folder / "mmproj-Tiny-Q8_0.gguf"
    assert [s.path.name for s in result.skipped] == ["mmproj-Other-F16.gguf"]


def test_an_mmproj_named_file_that_is_no_projector_is_not_paired(library, gguf_copy, tmp_path):
    folder = tmp_path / "renamed"
    model = gguf_copy(folder / "Tiny-Q4_K_M.gguf")
    gguf_copy(folder / "mmproj-Tiny-F16.gguf")  # a text model under a projector's name
    result = import_path(library, model)
    assert projectors(result.imported[0]) == []
    assert "not a vision projector" in result.skipped[0].reason


def test_a_fitting_projector_beside_is_still_paired(library, gguf_copy, tmp_path):
    folder = tmp_path / "seeing"
    model = gguf_copy(folder / "Tiny-Q4_K_M.gguf")
    own = write_tiny_projector(folder / "mmproj-Tiny-F16.gguf", n_embd_text=256)
    result = import_path(library, model)
    assert projector_of(result.imported[0]) == Path(own) and result.skipped == []
