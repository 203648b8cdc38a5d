"""Draft models from the library: which can draft for a model (same tokenizer, smaller, fits beside its
plan), how the resolver and the fit check apply a pick, and how the pick is remembered in Settings."""

from __future__ import annotations

import logging

import pytest

from app.core.engines.base import LoadSpec
from app.core.library import Library, import_path
from app.core.models.devices import GiB
from app.core.models.gguf import read_gguf_header
from app.core.models.memory import LoadOptions
from app.core.models.planner import draft_fit, plan_load
from app.core.models.vocab import Vocab, vocab_mismatch, vocab_of
from app.core.runtime.drafts import DraftFinder, DraftPrefs
from app.core.runtime.preflight import LoadRefused, check_model, fit_check
from app.core.runtime.resolve import ModelResolver
from app.core.settings import Settings, SettingsStore, load_speculative
from tests.core.runtime.test_preflight import machine
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf
from tests.helpers import require_llama_cpp


@pytest.fixture
def family(tmp_path):
    """A library with a model, a smaller one with its tokenizer, and a smaller one with another."""
    big = write_tiny_llama_gguf(tmp_path / "big.gguf", n_layer=6, n_ctx=4096, seed=1)
    small = write_tiny_llama_gguf(tmp_path / "small.gguf", n_layer=1, n_embd=128, n_ff=256, n_ctx=4096, seed=2)
    other = write_tiny_llama_gguf(tmp_path / "other.gguf", n_layer=1, n_embd=128, n_ff=256, vocab_size=330)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    models = {p.stem: import_path(library, p).imported[0] for p in (big, small, other)}
    yield library, models
    library.close()


def test_vocabularies_compare_by_size_specials_and_every_token(tmp_path, family):
    _, models = family
    big, small, other = (vocab_of(read_gguf_header(models[n].path)) for n in ("big", "small", "other"))
    assert big is not None and small is not None and other is not None
    assert vocab_mismatch(big, small) is None  # other weights, the same tokenizer
    assert vocab_mismatch(big, other) == "its vocabulary has 330 tokens, the model's 320"
    respelled = Vocab(big.kind, big.size, big.bos, big.eos, "0" * 64)
    assert "spelled differently" in (vocab_mismatch(big, respelled) or "")
    assert "BOS/EOS" in (vocab_mismatch(big, Vocab(big.kind, big.size, big.bos, 7, big.digest)) or "")
    assert "cannot be read" in (vocab_mismatch(big, None) or "")


def test_candidates_are_smaller_models_with_the_same_tokenizer(family):
    library, models = family
    finder = DraftFinder(library)
    assert [m.id for m in finder.candidates(models["big"])] == [models["small"].id]
    assert finder.candidates(models["small"]) == []  # the big one would save nothing
    assert finder.candidates(models["other"]) == []


def test_the_draft_memory_is_added_to_the_plan_on_each_device(family):
    _, models = family
    spec, draft = check_model(models["big"].path, "gguf"), check_model(models["small"].path, "gguf")
    assert spec is not None and draft is not None
    opts = LoadOptions(n_ctx=4096, n_seq=2, kv_unified=False)
    plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=opts)
    fit = draft_fit(plan, draft, "small.gguf")
    # As the engine loads it: a KV stream per slot at the model's context, like a plan of its own.
    alone = plan_load(draft, machine(64 * GiB), n_ctx=4096, options=opts)
    assert fit.fits and fit.estimate.total == alone.estimate.total > 0
    assert fit.estimate.kv_cells == alone.estimate.kv_cells == 2 * 4096
    assert "small.gguf:" in fit.line and "more" in fit.line
    # A machine with room for the model and not for both: the draft does not fit, and the line says so.
    tight = machine(plan.estimate.total + fit.estimate.total // 2)
    snug = plan_load(spec, tight, n_ctx=4096, options=opts)
    assert snug.fits and not draft_fit(snug, draft, "small.gguf").fits
    assert "does not fit beside the model" in draft_fit(snug, draft, "small.gguf").line


def test_pick_says_why_a_draft_cannot_be_used(family):
    library, models = family
    finder = DraftFinder(library)
    big = models["big"]
    plan = plan_load(check_model(big.path, "gguf"), machine(64 * GiB), n_ctx=4096)  # type: ignore[arg-type]
    assert finder.pick(big, models["small"].id, plan).path == models["small"].path
    assert finder.pick(big, "small", plan).path == models["small"].path  # by name too
    assert "not in the library" in finder.pick(big, "missing", plan).note
    assert "not smaller" in finder.pick(models["small"], models["big"].id, None).note
    why = finder.pick(big, models["other"].id, plan)
    assert why.path is None and "330 tokens" in why.note


def test_the_resolver_loads_the_picked_draft_where_it_can(family, caplog):
    library, models = family
    picks = {models["big"].id: models["small"].id}
    resolver = ModelResolver(
        library, lambda: machine(64 * GiB), drafts=DraftFinder(library), draft_for=lambda m: picks.get(m.id)
    )
    load = resolver.load_spec(models["big"])
    assert (load.speculative, load.draft_model) == ("draft", models["small"].path)
    picks[models["big"].id] = models["other"].id  # another tokenizer: no draft, and a warning says why
    with caplog.at_level(logging.WARNING, logger="app.core.runtime.resolve"):
        other = resolver.load_spec(models["big"])
    assert other.draft_model is None and other.speculative == "auto"  # prompt lookup, as planned
    assert "without a draft model" in caplog.text and "330 tokens" in caplog.text
    picks.pop(models["big"].id)  # the pick dropped: the next plan has no draft (not a stale cached one)
    assert resolver.load_spec(models["big"]).draft_model is None
    picks[models["big"].id] = models["small"].id
    resolver.speculative = "off"  # Speculative decoding off wins over a pick
    assert resolver.load_spec(models["big"]).speculative == "off"
    # A machine without room for both: the model loads alone.
    spec = check_model(models["big"].path, "gguf")
    single = plan_load(spec, machine(64 * GiB), n_ctx=4096, max_slots=4)  # type: ignore[arg-type]
    tight = ModelResolver(
        library,
        lambda: machine(single.estimate.total + 1024 * 1024),
        drafts=DraftFinder(library),
        draft_for=lambda m: picks.get(m.id),
    )
    assert tight.load_spec(models["big"]).draft_model is None


def test_the_fit_check_refuses_a_draft_that_does_not_fit(family):
    _, models = family
    spec = check_model(models["big"].path, "gguf")
    assert spec is not None
    load = LoadSpec(path=models["big"].path, n_ctx=4096, speculative="draft", draft_model=models["small"].path)
    plan = plan_load(spec, machine(64 * GiB), n_ctx=4096, options=LoadOptions(n_ctx=4096))
    assert fit_check(spec, load, machine(64 * GiB), "big.gguf").plan is not None
    draft = draft_fit(plan, check_model(models["small"].path, "gguf"))  # type: ignore[arg-type]
    with pytest.raises(LoadRefused, match="with its draft model will not fit"):
        fit_check(spec, load, machine(plan.estimate.total + draft.estimate.total // 2), "big.gguf")


def test_the_pick_is_remembered_in_settings(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    current = {"now": Settings()}
    saves = []
    store.changed.connect(lambda s: (current.update(now=s), saves.append(s)))
    prefs = DraftPrefs(DraftFinder(None), lambda: current["now"], store.save)  # type: ignore[arg-type]
    prefs.remember("big-id", "small-id")
    assert prefs.picked("big-id") == "small-id"
    assert store.load().draft_models == {"big-id": "small-id"}  # on disk: the server's loads follow it
    prefs.remember("big-id", "small-id")
    assert len(saves) == 1  # unchanged: nothing written
    prefs.remember("big-id", None)
    assert store.load().draft_models == {} and prefs.picked("big-id") is None


def test_the_speculative_setting_maps_to_load_modes():
    assert [load_speculative(s) for s in ("auto", "on", "off")] == [None, "auto", "off"]
    with pytest.raises(ValueError):
        Settings(speculative="always")  # type: ignore[arg-type]


def test_a_jit_load_drafts_with_the_picked_model_on_the_real_engine(family):
    """Through the host as the API server runs it: the request names the model, the resolver plans it with
    its pick, llama.cpp loads both, and the reply's stats count the drafts checked."""
    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
    from app.core.runtime.engine_host import EngineHost
    from app.core.runtime.jobs import GenerateJob

    library, models = family
    picks = {models["big"].id: models["small"].id}
    resolver = ModelResolver(
        library, lambda: machine(64 * GiB), drafts=DraftFinder(library), draft_for=lambda m: picks.get(m.id)
    )
    host = EngineHost(default_registry(), resolver=resolver, jit=True, name="draft-jit-host")
    try:
        request = GenerateRequest(
            messages=[ChatMessage(role="user", content="abc abc abc abc")],
            sampling=SamplingParams(temperature=0.0, max_tokens=24),
        )
        handle = host.submit(GenerateJob(request=request, source="api", model="big"))
        result = host.wait_for(handle, 120)
        assert host.state.model is not None and host.state.model.extra["draft_model"] == "small.gguf"
        assert host.state.model.extra["speculative"] == "draft"
        assert result.final.stats.generated_tokens > 0 and result.final.stats.draft_tokens > 0
    finally:
        assert host.shutdown(30)


def test_mlx_models_draft_with_mlx_models_of_their_tokenizer_on_one_slot(tmp_path, family):
    pytest.importorskip("safetensors")
    from tests.fixtures.tiny_mlx import write_tiny_mlx_model

    library, models = family
    big = write_tiny_mlx_model(tmp_path / "mlx-big", n_layer=6, n_ctx=4096)
    small = write_tiny_mlx_model(tmp_path / "mlx-small", n_layer=1, n_embd=128, n_ff=256, n_ctx=4096)
    other = write_tiny_mlx_model(tmp_path / "mlx-other", n_layer=1, n_embd=128, n_ff=256, vocab_size=330)
    mlx = {p.name: import_path(library, p).imported[0] for p in (big, small, other)}
    finder = DraftFinder(library)
    assert vocab_mismatch(finder.vocab(big), finder.vocab(small)) is None
    assert "330 tokens" in (vocab_mismatch(finder.vocab(big), finder.vocab(other)) or "")
    # Same tokenizer as the GGUF family, but a draft must be of the model's own format.
    assert [m.id for m in finder.candidates(mlx["mlx-big"])] == [mlx["mlx-small"].id]
    assert "must be one too" in finder.pick(models["big"], mlx["mlx-small"].id, None).note
    picks = {mlx["mlx-big"].id: mlx["mlx-small"].id}
    resolver = ModelResolver(library, lambda: machine(64 * GiB), drafts=finder, draft_for=lambda m: picks.get(m.id))
    load = resolver.load_spec(mlx["mlx-big"])
    assert (load.speculative, load.draft_model, load.slots) == ("draft", small, 1)  # mlx-lm drafts on one stream
    picks.clear()
    assert resolver.load_spec(mlx["mlx-big"]).slots == 8  # without a draft: batched as planned (auto)
