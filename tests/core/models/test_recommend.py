"""Recommender: best quality that fits; drops a quant when memory shrinks; lowers context before Q3."""

import pytest
from synthetic import GiB, apple_profile, llama3_8b_spec, profile

from app.core.models.calibration import CalibrationStore, SpeedRun
from app.core.models.devices import machine_from_profile
from app.core.models.quality import kld_for, kld_for_bpw
from app.core.models.recommend import Variant, assess

BPW = {"Q8_0": 8.5, "Q6_K": 6.56, "Q4_K_M": 4.9, "Q3_K_M": 3.91, "Q2_K": 3.35}


def variants(with_spec=("Q4_K_M",)):
    base = llama3_8b_spec()
    out = []
    for label, bpw in BPW.items():
        size = int(base.weight_bytes * bpw / BPW["Q4_K_M"])
        out.append(Variant(label=label, format="gguf", size_bytes=size, spec=base if label in with_spec else None))
    return out


def pick(prof, n_ctx=8192, vs=None, **kw):
    rec = assess(vs or variants(), machine_from_profile(prof), n_ctx=n_ctx, **kw)
    return rec, (rec.recommended.variant.label if rec.recommended else None)


def test_higher_quality_quant_wins_when_both_fit():
    rec, label = pick(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]))
    assert label == "Q8_0"
    assert all(a.fits for a in rec.assessments)
    assert sum(a.recommended for a in rec.assessments) == 1


def test_drops_to_a_lower_quant_as_memory_shrinks():
    labels = []
    for free in (23, 9.5, 7):
        _, label = pick(profile(gpus=[("GPU", 24 * GiB, int(free * GiB), 500)], ram_total=6 * GiB, ram_free=3 * GiB))
        labels.append(label)
    # Each is the best quant that still fits entirely on the GPU (weights + 1 GiB KV + compute + overhead).
    assert labels == ["Q8_0", "Q6_K", "Q4_K_M"]


def test_lowers_context_before_dropping_below_q3():
    # CPU only, 5.0 GiB usable (8.2 free − 10 % of 32): at 8,192 ctx Q2_K needs 4.72 GiB and fits,
    # Q3_K_M needs 5.23 GiB and does not; at 4,096 ctx Q3_K_M needs 4.49 GiB.
    prof = profile(ram_total=32 * GiB, ram_free=int(8.2 * GiB))
    rec, label = pick(prof, n_ctx=8192)
    by = {a.variant.label: a for a in rec.assessments}
    assert by["Q2_K"].fits and not by["Q2_K"].plan.ctx_reduced
    assert by["Q3_K_M"].fits and by["Q3_K_M"].plan.ctx_reduced
    assert label == "Q3_K_M"
    assert "preferred to a quant below Q3" in rec.why


def test_will_not_fit_is_explained_with_numbers():
    rec, label = pick(profile(ram_total=4 * GiB, ram_free=2 * GiB))
    assert label is None
    assert "nothing fits" in rec.why and "needs" in rec.why and "GiB" in rec.why
    for a in rec.assessments:
        assert not a.fits and "will not fit" in a.plan.explanation


def test_exl2_and_mlx_say_why_they_cannot_run_on_linux_nvidia():
    base = llama3_8b_spec()
    vs = variants() + [
        Variant(label="4.0bpw", format="exl2", size_bytes=int(base.weight_bytes * 4 / 4.9), bpw=4.0),
        Variant(label="4-bit g64", format="mlx", size_bytes=int(base.weight_bytes * 4.5 / 4.9), bpw=4.5),
    ]
    rec, label = pick(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]), vs=vs)
    by = {a.variant.label: a for a in rec.assessments}
    assert "ExLlama" in by["4.0bpw"].reason and not by["4.0bpw"].runnable
    assert "does not ship" in by["4.0bpw"].reason  # the GPU is right; the engine is what is missing
    assert "Apple Silicon" in by["4-bit g64"].reason
    assert label == "Q8_0"
    cpu_only, _ = pick(profile(), vs=vs)
    exl2 = next(a for a in cpu_only.assessments if a.variant.format == "exl2")
    assert exl2.reason == "needs the ExLlama engine on an NVIDIA GPU" and not exl2.runnable


def test_apple_prefers_mlx():
    base = llama3_8b_spec()
    vs = variants() + [Variant(label="4-bit g64", format="mlx", size_bytes=int(base.weight_bytes * 4.5 / 4.9), bpw=4.5)]
    rec, label = pick(apple_profile("Apple M2 Max", 64 * GiB, 48 * GiB, 50 * GiB, 400), vs=vs)
    assert label == "4-bit g64"
    assert rec.recommended.speed.decode_tok_s > 0


def test_quality_ladder_orders_quants_and_interpolates_bpw():
    order = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K", "IQ1_S"]
    klds = [kld_for(q) for q in order]
    assert klds == sorted(klds)
    assert kld_for("Q4_K_M") < kld_for_bpw(4.5) < kld_for("Q3_K_M")
    assert kld_for(None, 6.5) < kld_for(None, 4.0)


def test_calibration_corrects_predicted_speed(tmp_path):
    prof = profile(ram_total=32 * GiB)
    rec, _ = pick(prof)
    before = rec.recommended.speed
    assert before.basis.endswith("uncalibrated")
    store = CalibrationStore(tmp_path / "calibration.json")
    for measured in (0.5, 0.6, 0.55):
        store.record(SpeedRun(backend="cpu", model="x", predicted_decode=10.0, measured_decode=10.0 * measured))
    rec2, _ = pick(prof, calibration=store)
    after = rec2.recommended.speed
    assert after.basis.endswith("calibrated on 3 runs")
    assert after.decode_tok_s == pytest.approx(before.decode_tok_s * 0.55)


def test_a_file_with_no_tensors_gets_no_prediction_and_is_not_recommended():
    from app.core.models.spec import ModelSpec

    empty = ModelSpec(architecture="llama", name="vocab only", n_vocab=32000)  # a header, no weights
    vs = [Variant(label="Q4_K_M", format="gguf", size_bytes=1_000_000, spec=empty)]
    rec = assess(vs, machine_from_profile(profile()), n_ctx=4096)
    (a,) = rec.assessments
    assert a.speed is None and a.plan is None and not a.runnable and "no model weights" in a.reason
    assert rec.recommended is None


def test_a_better_quant_passed_over_for_speed_is_named_with_its_speed():
    rec, label = pick(profile(ram_total=64 * GiB, ram_free=60 * GiB, bw=60))
    q8 = next(a for a in rec.assessments if a.variant.label == "Q8_0")
    assert label == "Q4_K_M" and q8.fits and q8.speed.decode_tok_s < 10
    assert f"Q8_0 also fits but would run at about {q8.speed.decode_tok_s:.1f} tok/s, below 10" in rec.why
    fast, label = pick(profile(ram_total=64 * GiB, ram_free=60 * GiB, bw=150))
    assert label == "Q8_0" and "also fits" not in fast.why  # nothing better was passed over


def test_the_verdict_in_the_why_keeps_its_capitals():
    """ "(runs on the CPU)", never "(runs on the cpu)": only the label's first letter is lowered."""
    # No GPU, fast memory: every variant runs on the CPU, some at a comfortable speed.
    rec, label = pick(profile(ram_total=64 * GiB, ram_free=48 * GiB, bw=400.0, cores=16))
    assert label is not None and "(runs on the CPU)" in rec.why and "cpu)" not in rec.why
