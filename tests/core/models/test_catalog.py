"""The shipped catalogue, ranked by the recommender for different machines."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from synthetic import GiB, apple_profile, profile

from app.core.models.catalog import load_catalog, ranked_catalog
from app.core.models.devices import machine_from_profile
from app.core.models.recommend import COMFORTABLE_TOK_S


def test_catalog_entries_are_complete():
    models = load_catalog()
    assert len(models) >= 15
    families = {m.family for m in models}
    assert {"Llama 3", "Qwen2.5", "Gemma 2", "Mistral"} <= families
    for m in models:
        formats = {v.format for v in m.variants}
        assert "gguf" in formats, m.name
        for v in m.variants:
            assert v.repo_id and "/" in v.repo_id and v.size_bytes > 0 and v.spec.n_layers > 0
        sizes = [v.size_bytes for v in m.variants if v.format == "gguf"]
        assert sizes == sorted(sizes, reverse=True), "GGUF quants go from best to smallest"


def test_big_gpu_ranks_capable_models_first_and_everything_fits():
    picks = ranked_catalog(machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)])))
    top = picks[:3]
    assert all(p.best and p.best.plan.verdict == "full_gpu" for p in top)
    assert min(p.model.params for p in top) > 10e9
    assert all(p.best.speed.decode_tok_s >= COMFORTABLE_TOK_S for p in top)


def test_small_cpu_machine_gets_small_fast_models():
    picks = ranked_catalog(machine_from_profile(profile(ram_total=8 * GiB, ram_free=5 * GiB, bw=20, cores=4)))
    fitting = [p for p in picks if p.best]
    assert fitting and all(p.best.plan.estimate.total <= 4 * GiB for p in fitting)
    assert fitting[0].best.speed.decode_tok_s >= COMFORTABLE_TOK_S
    assert any(p.best is None and "nothing fits" in p.recommendation.why for p in picks)  # the 32B
    assert picks[-1].best is None


def test_apple_small_models_use_mlx():
    picks = ranked_catalog(machine_from_profile(apple_profile("Apple M2 Max", 64 * GiB, 48 * GiB, 50 * GiB, 400)))
    fmts = {p.best.variant.format for p in picks if p.best}
    assert fmts == {"mlx"}


def test_the_order_follows_the_stated_rule():
    """ranking_note's rule, checked from the picks alone: comfortable at full context (most capable, at
    good quality, first), then comfortable with a shorter context (biggest first), then slow (fastest
    first), then what does not fit."""
    import math

    from app.core.models.catalog import ranking_note

    machines = [
        profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]),
        profile(gpus=[("NVIDIA GeForce RTX 4060", 8 * GiB, 7 * GiB, 272)]),
        profile(ram_total=16 * GiB, ram_free=12 * GiB),
        profile(ram_total=8 * GiB, ram_free=5 * GiB, bw=20, cores=4),
    ]
    for prof in machines:
        picks = ranked_catalog(machine_from_profile(prof))

        def group(p):
            b = p.best
            if b is None:
                return 3
            fast = b.speed is not None and b.speed.decode_tok_s >= COMFORTABLE_TOK_S
            return (0 if not b.plan.ctx_reduced else 1) if fast else 2

        groups = [group(p) for p in picks]
        assert groups == sorted(groups), groups
        first = [p for p in picks if group(p) == 0]
        capability = [math.log(p.model.params) - 10 * (p.best.kld or 0) for p in first]
        assert capability == sorted(capability, reverse=True)
        shorter = [p.model.params for p in picks if group(p) == 1]
        assert shorter == sorted(shorter, reverse=True)
        slow = [p.best.speed.decode_tok_s if p.best.speed else 0.0 for p in picks if group(p) == 2]
        assert slow == sorted(slow, reverse=True)
        note = ranking_note(picks)
        assert "Most capable first" in note and "comfortable speed" in note and "will not fit come last" in note
