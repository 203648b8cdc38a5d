"""The model bar's load defaults are the preflight's planning step, presented."""

from __future__ import annotations

from app.core.models.devices import Device, GiB, Machine
from app.core.runtime.preflight import check_model, default_context, plan_model
from app.ui.chat.model_bar import FALLBACK_CTX, plan_defaults


def test_load_defaults_show_the_preflights_plan_and_speed(tiny_gguf_f16):
    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    model = check_model(tiny_gguf_f16, "gguf")
    planned = plan_model(model, roomy, default_context(model))
    defaults = plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy)
    assert defaults.n_ctx == planned.plan.options.n_ctx and defaults.n_gpu_layers == planned.plan.options.n_gpu_layers
    assert defaults.predicted_tok_s == planned.predicted_decode_tok_s > 0
    on_gpu = f"({planned.plan.layers_on_gpu}/{planned.plan.n_layers} layers on GPU)"
    assert defaults.note == "" and on_gpu in defaults.offload
    # Without a machine or a planner for the format: safe defaults, and why.
    waiting = plan_defaults(tiny_gguf_f16, "gguf", lambda: None)
    assert waiting.n_ctx == FALLBACK_CTX and "not probed" in waiting.note
    assert "no planner" in plan_defaults(tiny_gguf_f16, "fake", lambda: roomy).note


def test_load_defaults_plan_slots_up_to_the_setting_never_a_smaller_context(tiny_gguf_f16):
    from app.core.models.memory import LoadOptions
    from app.core.models.planner import plan_load

    roomy = Machine("cpu", Device("CPU", "cpu", 16 * GiB, 16 * GiB, 20.0, "RAM"), cores=2, simd=("avx2",))
    model = check_model(tiny_gguf_f16, "gguf")
    ctx = default_context(model)
    four = plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy, 4)
    assert four.slots == 4 and four.n_ctx == plan_defaults(tiny_gguf_f16, "gguf", lambda: roomy).n_ctx
    # A machine with room for the load and one more slot's KV, not two more: two slots, the same context.
    one = plan_load(model, roomy, n_ctx=ctx, options=LoadOptions(n_ctx=ctx)).estimate
    two = plan_load(model, roomy, n_ctx=ctx, options=LoadOptions(n_ctx=ctx, n_seq=2, kv_unified=False)).estimate
    budget = two.total + (two.total - one.total) // 2
    tight = Machine("cpu", Device("CPU", "cpu", budget, budget, 20.0, "RAM"), cores=2, simd=("avx2",))
    assert (plan_defaults(tiny_gguf_f16, "gguf", lambda: tight, 4).slots, four.n_ctx) == (2, ctx)
    assert plan_defaults(tiny_gguf_f16, "gguf", lambda: tight, 4).n_ctx == ctx
