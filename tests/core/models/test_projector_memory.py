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
from tests.fixtures.tiny_projector import (
    IMAGE_SIZE,
    PATCH_SIZE,
    QWEN2VL_PATCH_SIZE,
    TOKENS_PER_IMAGE,
    write_tiny_projector,
    write_tiny_qwen2vl_projector,
)


def test_weights_are_the_files_tensors_and_the_buffer_grows_with_the_patches(tmp_path):
    small = write_tiny_projector(tmp_path / "mmproj-small.gguf", n_embd_text=256)
    memory = projector_memory(small)
    assert memory.weights == sum(t.nbytes for t in read_gguf_header(small).tensors)
    assert memory.tokens_per_image == TOKENS_PER_IMAGE == (IMAGE_SIZE // PATCH_SIZE) ** 2
    wide = write_tiny_projector(tmp_path / "mmproj-wide.gguf", n_embd_text=256, n_head=8)
    assert projector_memory(wide).compute > memory.compute  # twice the heads: twice the attention scores


def test_a_qwen2vl_projector_gives_the_model_one_token_for_each_four_patches(tmp_path):
    path = write_tiny_qwen2vl_projector(tmp_path / "mmproj-qwen2vl.gguf", n_embd_text=256)
    image_size = read_gguf_header(path).metadata["clip.vision.image_size"]
    patches = (image_size // QWEN2VL_PATCH_SIZE) ** 2
    assert projector_memory(path).tokens_per_image == patches // 4


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


def test_the_time_per_image_grows_with_the_encoder_and_is_shorter_on_a_gpu(model_and_projector, tmp_path):
    from app.core.models.projector import projector_from_size
    from app.core.models.speed import image_seconds
    from tests.core.models.test_planner_slots import gpu_machine

    _, projector, spec = model_and_projector
    small = projector_memory(projector)
    wide = projector_memory(write_tiny_projector(tmp_path / "mmproj-wide.gguf", n_embd_text=256, n_embd=64, n_ff=96))
    assert wide.encoder_flops > small.encoder_flops > 0
    cpu_plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=LoadOptions(n_ctx=4096))
    on_cpu = image_seconds(spec, cpu_plan, small)
    assert on_cpu is not None and 0 < on_cpu < image_seconds(spec, cpu_plan, wide)
    gpu_plan = plan_load(spec, gpu_machine(12), n_ctx=4096, options=LoadOptions(n_ctx=4096, n_gpu_layers=-1))
    assert image_seconds(spec, gpu_plan, small) < on_cpu
    assert image_seconds(spec, cpu_plan, projector_from_size(10**8)) is None  # no header: no time is made up


def test_a_variant_whose_projector_does_not_fit_is_not_picked(model_and_projector):
    from dataclasses import replace

    from app.core.models.recommend import Variant, assess

    _, projector, spec = model_and_projector
    plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=LoadOptions(n_ctx=4096))
    room = machine(plan.estimate.total + 64 * 2**20)
    memory = projector_memory(projector)
    fits = Variant(
        "F16", "gguf", spec.file_bytes, spec=spec, projector_memory=memory, files=["m.gguf", "mmproj-m.gguf"]
    )
    huge = Variant("Q8_0", "gguf", spec.file_bytes, spec=spec, projector_memory=replace(memory, compute=2**30))
    rec = assess([fits, huge], room, n_ctx=4096)
    good, bad = rec.assessments
    assert good.fits and good.projector is not None and good.image_s is not None and good.image_s > 0
    assert not bad.fits and bad.reason == "its vision projector does not fit beside it" and bad.plan.fits
    assert rec.recommended is good
