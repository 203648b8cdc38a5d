"""A vision projector's memory in the plan: its weights as the file holds them and the image encoder's buffer,
which grows with the patches (attention is patches² a head); a projector that does not fit beside the model
is refused at load with the reason, one that fits is not."""

from __future__ import annotations

import pytest

from app.core.engines.base import LoadSpec
from app.core.models.devices import GiB
from app.core.models.gguf import read_gguf_header
from app.core.models.memory import LoadOptions
from app.core.models.planner import plan_load, projector_fit
from app.core.models.projector import projector_memory
from app.core.runtime.preflight import LoadRefused, check_model, fit_check
from tests.core.runtime.test_preflight import machine
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf
from tests.fixtures.tiny_projector import IMAGE_SIZE, PATCH_SIZE, TOKENS_PER_IMAGE, write_tiny_projector


def test_weights_are_the_files_tensors_and_the_buffer_grows_with_the_patches(tmp_path):
    small = write_tiny_projector(tmp_path / "mmproj-small.gguf", n_embd_text=256)
    memory = projector_memory(small)
    assert memory.weights == sum(t.nbytes for t in read_gguf_header(small).tensors)
    assert memory.tokens_per_image == TOKENS_PER_IMAGE == (IMAGE_SIZE // PATCH_SIZE) ** 2
    wide = write_tiny_projector(tmp_path / "mmproj-wide.gguf", n_embd_text=256, n_head=8)
    assert projector_memory(wide).compute > memory.compute  # twice the heads: twice the attention scores


@pytest.fixture
def model_and_projector(tmp_path):
    model = write_tiny_llama_gguf(tmp_path / "m.gguf", n_ctx=4096)
    projector = write_tiny_projector(tmp_path / "mmproj-m.gguf", n_embd_text=256)
    spec = check_model(model, "gguf")
    assert spec is not None
    return model, projector, spec


def test_a_projector_is_counted_on_the_cpu_beside_a_cpu_plan(model_and_projector):
    _, projector, spec = model_and_projector
    plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=LoadOptions(n_ctx=4096))
    fit = projector_fit(plan, projector_memory(projector), "mmproj-m.gguf")
    assert fit.fits and fit.estimate.total == projector_memory(projector).total
    assert [d.device for d in fit.estimate.devices] == ["CPU"] and "mmproj-m.gguf:" in fit.line


def test_the_fit_check_refuses_a_projector_that_does_not_fit(model_and_projector):
    model, projector, spec = model_and_projector
    load = LoadSpec(path=model, n_ctx=4096, projector=projector)
    assert fit_check(spec, load, machine(64 * GiB), "m.gguf").plan is not None
    plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=LoadOptions(n_ctx=4096))
    tight = machine(plan.estimate.total + projector_memory(projector).total // 2)
    with pytest.raises(LoadRefused, match="with its vision projector will not fit"):
        fit_check(spec, load, tight, "m.gguf")
    broken = projector.with_name("mmproj-broken.gguf")
    broken.write_bytes(b"GGUF not really")
    with pytest.raises(LoadRefused, match="cannot be read"):
        fit_check(spec, load.model_copy(update={"projector": broken}), machine(64 * GiB), "m.gguf")
