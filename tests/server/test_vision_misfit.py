"""A model kept with another model's projector (imported before pairing checked the width) is served, never a
500: the library sees the projector does not fit, the model loads and chats as text, and an image is a 400
that says why. When a projector passes every header check and llama.cpp still cannot open it, the model
loads all the same and the image's 400 gives llama.cpp's refusal."""

from __future__ import annotations

import shutil

import pytest

from app.core.library import Library, ModelFile
from tests.server.test_vision_real import ask, data_uri, serving

pytestmark = pytest.mark.slow


@pytest.fixture
def misfit_library(tiny_gguf_f16, tmp_path) -> Library:
    from tests.fixtures.tiny_projector import write_tiny_projector

    folder = tmp_path / "imports"
    folder.mkdir()
    model = shutil.copy(tiny_gguf_f16, folder / "tiny-F16.gguf")
    other = write_tiny_projector(folder / "mmproj-other-F16.gguf", n_embd_text=128)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    files = [ModelFile(p, p.stat().st_size) for p in (model, other)]
    library.add(name="tiny", format="gguf", path=model, files=files, quant="F16", source="import")
    return library


def served_as_text_and_refusing_images(library: Library, why: str) -> None:
    with serving(library, "test-misfit-host") as client:
        r = ask(client, "tiny", "What is this?", data_uri((220, 20, 30)))
        assert r.status_code == 400, r.text[:300]
        error = r.json()["error"]
        assert error["param"] == "images" and "cannot see images" in error["message"] and why in error["message"]
        text = ask(client, "tiny", "Hello", None)
        assert text.status_code == 200, text.text[:300]
        assert ask(client, "tiny", "What is this?", data_uri((20, 40, 230))).status_code == 400


def test_another_models_projector_kept_with_it_leaves_it_serving_text(misfit_library):
    served_as_text_and_refusing_images(misfit_library, "made for a model 128 wide; this one is 256 wide")


def test_a_projector_llama_cpp_refuses_anyway_leaves_it_serving_text(misfit_library, monkeypatch):
    # Every header check passed (as for a layout Hearth cannot measure): only libmtmd refuses it.
    monkeypatch.setattr("app.core.library.projectors.projector_problem", lambda model, projector: None)
    monkeypatch.setattr("app.core.engines.llamacpp.engine._check_projector", lambda path, model: None)
    served_as_text_and_refusing_images(misfit_library, "llama.cpp could not open the vision projector")
