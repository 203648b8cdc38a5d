"""A vision projector that cannot be opened for the model costs the model its images, not its load: another
model's projector (made for another embedding width) is caught by its header before libmtmd sees it, and
one that libmtmd refuses anyway is survived the same way. The model chats as text, says why in the log and in
its info, and an image is refused with the reason (Unsupported: a 400 on the API, never a 500)."""

from __future__ import annotations

import logging
import threading

import pytest

from app.core.engines.errors import Unsupported
from tests.core.engines.fixtures import load_llamacpp
from tests.core.engines.llamacpp.test_llamacpp_batch import alone
from tests.core.engines.llamacpp.test_llamacpp_vision import RED, ask

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def misfit_mmproj(tmp_path_factory):
    """A projector for a model 128 wide: the tiny llama is 256 wide."""
    from tests.fixtures.tiny_projector import write_tiny_projector

    folder = tmp_path_factory.mktemp("misfit")
    return write_tiny_projector(folder / "mmproj-other-model-F16.gguf", n_embd_text=128)


def check_text_only(engine, why: str) -> None:
    assert not engine.capabilities.vision and engine.info.extra["projector"] == ""
    assert why in engine.info.extra["projector_problem"]
    tokens, final = alone(engine, ask(None, "Hello there"))
    assert len(tokens) == 4 and final.finish_reason == "length"  # it chats
    with pytest.raises(
        Unsupported, match=f"cannot see images: its vision projector mmproj-other-model-F16.gguf.*{why}"
    ):
        engine.generate(ask(RED), threading.Event())
    assert engine.sequences.active() == 0


def test_another_models_projector_leaves_the_model_chatting_without_images(tiny_gguf_f16, misfit_mmproj, caplog):
    caplog.set_level(logging.WARNING, logger="app.core.engines.llamacpp.engine")
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=512, slots=2, projector=misfit_mmproj)
    try:
        check_text_only(engine, "made for a model 128 wide; this one is 256 wide")
        assert any("loads without images" in r.getMessage() for r in caplog.records)
    finally:
        engine.unload()
    assert engine.info is None


def test_a_projector_llama_cpp_refuses_after_the_checks_is_survived_too(
    tiny_gguf_f16, misfit_mmproj, monkeypatch, caplog
):
    # Past Hearth's own header check, libmtmd itself refuses the width: the native refusal is not fatal either.
    monkeypatch.setattr("app.core.engines.llamacpp.engine._check_projector", lambda path, model: None)
    caplog.set_level(logging.WARNING, logger="app.core.engines.llamacpp.engine")
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=512, slots=2, projector=misfit_mmproj)
    try:
        check_text_only(engine, "llama.cpp could not open the vision projector")
    finally:
        engine.unload()
