"""FitView: the planner's verdict, per-device bars, and live re-planning from the context slider / KV type."""

import os
import sys

import pytest
from PySide6.QtGui import QImage

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "models"))
from synthetic import GiB, MiB, llama3_8b_spec, profile

from app.core.models.calibration import Correction
from app.core.models.devices import machine_from_profile
from app.ui.widgets.fit_view import FitView, context_steps
from app.ui.widgets.stacked_bar import SEGMENTS, StackedMemoryBar, overflow_colour

KV_8K = 131_072 * 8192  # f16, 32 layers × 8 KV heads × 128 dims, K and V: 1 GiB


def rtx4090():
    return machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]))


def rtx4060():
    return machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4060", 8 * GiB, 7 * GiB, 272)]))


def tiny_cpu():
    return machine_from_profile(profile(ram_total=4 * GiB, ram_free=3 * GiB))


@pytest.fixture
def make_view(qtbot):
    def make(machine, spec=None, **kw):
        view = FitView(spec or llama3_8b_spec(), machine, **kw)
        qtbot.addWidget(view)
        view.resize(720, 420)
        return view

    return make


def test_24gb_card_shows_full_gpu_with_a_bar_per_device(make_view):
    view = make_view(rtx4090(), n_ctx=8192)
    assert view.badge.text() == "Full GPU offload"
    assert view.badge.property("verdict") == "full_gpu"
    assert list(view.bars) == ["CPU", "CUDA0"]
    assert "all 33 layers on the GPU" in view.explanation_label.text()
    gpu = view.bars["CUDA0"]
    assert gpu.parts["kv"] == KV_8K and gpu.overflow_bytes == 0
    assert gpu.description() == (
        "weights 4.27 GiB, KV 1.00 GiB, compute 0.56 GiB, overhead 0.29 GiB = 6.13 GiB of 22.0 GiB usable VRAM"
    )
    assert gpu.toolTip() == gpu.description()
    assert "CUDA0 · VRAM: 6.13 GiB of 22.0 GiB usable · 33 layers" in view.text()
    assert "CPU · RAM: " in view.text() and "usable · 0 layers" in view.captions["CPU"].text()
    assert "8,192 tokens" in view.text() and "over budget" not in view.text()


def test_speed_line_and_calibration(make_view):
    view = make_view(rtx4090(), n_ctx=8192)
    base = view.speed.decode_tok_s
    assert 0 < view.speed.decode_tok_s_full_ctx < base
    assert view.speed_label.text().startswith("≈ ")
    assert "tok/s decode" in view.speed_label.text() and "tok/s at full context" in view.speed_label.text()
    assert view.speed_label.text().endswith("table bandwidth, uncalibrated")
    calibrated = make_view(rtx4090(), n_ctx=8192, correction=Correction(decode=0.5, prefill=1.0, runs=3))
    assert calibrated.speed.decode_tok_s == pytest.approx(base / 2)
    assert "calibrated on 3 runs" in calibrated.speed_label.text()


def test_8gb_card_is_partial_then_full_at_2048(make_view, qtbot):
    view = make_view(rtx4060(), n_ctx=8192)
    assert view.badge.text() == "Partial GPU offload"
    assert view.captions["CPU"].text().endswith("· 1 layer") and view.captions["CUDA0"].text().endswith("32 layers")
    kv_before = view.bars["CUDA0"].parts["kv"]
    with qtbot.waitSignal(view.plan_changed, timeout=2000) as sig:
        view.slider.setValue(view.context_steps.index(2048))
    assert sig.args[0] is view.plan
    assert view.plan.requested_ctx == 2048 and view.plan.options.n_ctx == 2048
    assert view.bars["CUDA0"].parts["kv"] * 4 == kv_before
    assert view.context_label.text() == "2,048 tokens"
    assert view.badge.text() == "Full GPU offload"


def test_slider_drag_is_debounced_into_one_replan(make_view, qtbot):
    view = make_view(rtx4090(), n_ctx=8192)
    plans = []
    view.plan_changed.connect(plans.append)
    with qtbot.waitSignal(view.plan_changed, timeout=2000):
        for ctx in (4096, 2048, 1024):
            view.slider.setValue(view.context_steps.index(ctx))
    qtbot.wait(80)
    assert len(plans) == 1 and plans[0].requested_ctx == 1024


def test_tiny_ram_will_not_fit_and_overflows_in_red(make_view):
    view = make_view(tiny_cpu(), n_ctx=8192)
    assert view.badge.text() == "Will not fit"
    assert list(view.bars) == ["CPU"]
    bar = view.bars["CPU"]
    assert bar.overflow_bytes == bar.total_bytes - bar.budget_bytes > 0
    assert "over" in view.captions["CPU"].text() and "over)" in bar.description()
    assert view.speed is None and "does not fit" in view.speed_label.text()
    assert "not even at 2,048 context" in view.text() and "over budget" in view.text()
    image = bar.grab().toImage()
    w, mid = image.width(), image.height() // 2
    right = image.pixelColor(w - 4, mid)
    left = image.pixelColor(4, mid)
    assert right.red() > 120 and right.red() > 2 * right.green(), right.name()  # the red (hatched) overhang
    assert left.name() == SEGMENTS[0][2].name()  # weights colour at the start


def test_q8_kv_cache_shrinks_kv_and_turns_on_flash_attention(make_view, qtbot):
    view = make_view(rtx4090(), n_ctx=8192)
    kv_f16 = view.bars["CUDA0"].parts["kv"]
    assert not view.plan.options.flash_attn
    with qtbot.waitSignal(view.plan_changed, timeout=2000):
        view.kv_combo.setCurrentText("q8_0")
    opts = view.plan.options
    assert opts.cache_type_k == opts.cache_type_v == "q8_0" and opts.flash_attn
    assert view.bars["CUDA0"].parts["kv"] * 64 == kv_f16 * 34
    view.set_kv_type("f16")
    assert not view.plan.options.flash_attn and view.bars["CUDA0"].parts["kv"] == kv_f16


def test_set_machine_and_set_context_replan(make_view, qtbot):
    view = make_view(rtx4060(), n_ctx=8192)
    assert view.plan.verdict == "partial"
    with qtbot.waitSignal(view.plan_changed, timeout=1000):
        view.set_machine(rtx4090())
    assert view.plan.verdict == "full_gpu" and view.plan.machine.gpus[0].budget_bytes == 22 * GiB
    with qtbot.waitSignal(view.plan_changed, timeout=1000):
        view.set_context(3000)  # snaps down to a power of two
    assert view.plan.requested_ctx == 2048 and view.context_label.text() == "2,048 tokens"
    with qtbot.waitSignal(view.plan_changed, timeout=1000):
        view.set_machine(tiny_cpu())
    assert list(view.bars) == ["CPU"] and view.plan.verdict == "no_fit"


def test_context_steps():
    assert context_steps(8192) == [512, 1024, 2048, 4096, 8192]
    assert context_steps(0)[-1] == 131072 and context_steps(0)[0] == 512
    assert context_steps(40960)[-2:] == [32768, 40960]
    assert context_steps(256) == [256]


def test_unknown_trained_context_allows_128k(make_view):
    spec = llama3_8b_spec()
    spec.n_ctx_train = 0
    view = make_view(rtx4090(), spec=spec, n_ctx=8192)
    assert view.context_steps[view.slider.maximum()] == 131072
    assert view.plan.requested_ctx == 8192


def test_stacked_bar_geometry(qtbot):
    bar = StackedMemoryBar()
    qtbot.addWidget(bar)
    bar.set_values(
        {"weights": 600 * MiB, "kv": 200 * MiB, "compute": 100 * MiB, "overhead": 100 * MiB}, 800 * MiB, "RAM"
    )
    assert bar.overflow_bytes == 200 * MiB
    spans = bar.segment_spans(1000)
    assert [k for k, _, _ in spans] == ["weights", "kv", "compute", "overhead"]
    assert spans[0][2] == pytest.approx(600) and spans[-1][1] + spans[-1][2] == pytest.approx(1000)
    assert bar.budget_x(1000) == pytest.approx(800)
    bar.set_values({"weights": 100 * MiB}, 400 * MiB, "VRAM")
    assert bar.overflow_bytes == 0 and bar.budget_x(1000) == pytest.approx(1000)
    assert bar.segment_spans(1000) == [("weights", 0.0, pytest.approx(250))]


def test_grab_to_png(make_view, tmp_path, themed):
    from app.ui.theme import load_palettes

    view = make_view(rtx4060(), n_ctx=8192)
    view.show()
    path = tmp_path / "fit.png"
    assert view.grab().save(str(path))  # the badge's colour is the theme's, as in the app
    image = QImage(str(path))
    assert not image.isNull() and image.width() >= 300 and path.stat().st_size > 1000
    colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)}
    assert load_palettes()["light"]["fit_partial"] in colours  # the amber partial-offload badge was painted
    for bar in view.bars.values():  # nothing over budget on a load the planner made fit
        bar_image = bar.grab().toImage()
        assert overflow_colour().name() not in {
            bar_image.pixelColor(x, bar_image.height() // 2).name() for x in range(bar_image.width())
        }


def test_a_file_with_no_weights_shows_no_speed_number(make_view):
    from app.core.models.spec import ModelSpec

    view = make_view(rtx4090(), spec=ModelSpec(architecture="llama", name="vocab only", n_vocab=32000), n_ctx=4096)
    assert view.speed is None
    assert view.speed_label.text() == "Speed: not predicted, the file holds no model weights"
    assert "tok/s" not in view.text()


def test_a_vision_projector_is_in_the_bars_the_verdict_and_the_speed(make_view):
    from app.core.models.projector import ProjectorMemory

    projector = ProjectorMemory(weights=600 * MiB, compute=200 * MiB, tokens_per_image=256, encoder_flops=2e11)
    plain = make_view(rtx4090(), n_ctx=8192)
    seeing = make_view(rtx4090(), n_ctx=8192, projector=projector)
    assert seeing.badge.text() == plain.badge.text() == "Full GPU offload"
    gpu = seeing.bars["CUDA0"]
    assert gpu.parts["weights"] == plain.bars["CUDA0"].parts["weights"] + 600 * MiB  # on the GPU, with the model
    assert gpu.parts["compute"] == plain.bars["CUDA0"].parts["compute"] + 200 * MiB
    assert "→ With the vision projector: 800.00 MiB more" in seeing.explanation_label.text()
    assert "s to read an image" in seeing.speed_label.text() and "image" not in plain.speed_label.text()

    # On a card the model alone just fits, the projector tips it over: the verdict says so.
    squeezed = make_view(rtx4060(), n_ctx=2048, projector=ProjectorMemory(6 * GiB, 0, 256, 1e11))
    assert squeezed.badge.text() == "Does not fit with its vision projector"
    assert squeezed.badge.property("verdict") == "no_fit"
