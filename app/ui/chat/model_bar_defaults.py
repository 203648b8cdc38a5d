"""What the chat's model bar loads with (Qt-free): the planner's defaults for a model on this machine,
the draft models that could run beside it, and a failed load's reason in words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.engines.registry import abilities
from app.core.formats import REMOTE
from app.core.library.projectors import projector_of
from app.core.library.store import LocalModel
from app.core.models.devices import Machine
from app.core.runtime.drafts import DraftPrefs
from app.core.runtime.load_plan import plan_load
from app.core.runtime.preflight import (
    FALLBACK_CTX,
    PROMPT_CACHE_MIB,
    check_model,
    default_context,
    prompt_cache_mib,
)
from app.core.settings import load_speculative

__all__ = ["FALLBACK_CTX", "LoadPlanDefaults", "load_failure_sentence", "plan_defaults"]


@dataclass
class LoadPlanDefaults:
    n_ctx: int = FALLBACK_CTX
    n_gpu_layers: int = 0
    kv_type: str = "f16"
    flash_attn: bool = False
    slots: int = 1  # parallel slots, each with its own n_ctx of KV cache
    prompt_cache_mib: int = PROMPT_CACHE_MIB  # RAM for conversations evicted from a slot
    predicted_tok_s: float = 0.0
    offload: str = ""  # "Full GPU offload (31/31 layers)"
    verdict: str = ""  # the plan's placement (planner.Verdict: "full_gpu", "partial", "cpu"); "" unplanned
    note: str = ""  # why there is no plan, when there is none
    speculative: str = "off"  # n-gram drafting as planned ("auto") or "off"
    drafts: tuple[tuple[str, str, str], ...] = ()  # (id, name, path): library models that can draft, and fit
    draft: str = ""  # the id of the one picked for this model, if it still can
    ngram: bool = True  # prompt-lookup drafting is offered (llama.cpp; mlx-lm drafts only with a model)
    # The engine cannot use the GPU the plan counts on (a CPU-only llama.cpp beside a GPU), and the fix.
    engine_note: str = ""
    # The planned load (runtime.load_plan, as the API plans it): the Advanced form's values go on top of it.
    spec: LoadSpec | None = None
    role: str = "chat"  # what the file is for: an embedding model or reranker shows no chat options


def plan_defaults(
    path: Path,
    fmt: str,
    machine_source: Callable[[], Machine | None] | None,
    max_slots: int = 1,
    entry: LocalModel | None = None,
    drafts: DraftPrefs | None = None,
) -> LoadPlanDefaults:
    """Background thread: the planner's context, GPU layers, KV type and slots (up to `max_slots`, as
    many as fit beside that context) for this model here, and the draft models that could run beside it."""
    if fmt == REMOTE:
        return LoadPlanDefaults(note="runs on a remote server: nothing to plan on this machine")
    if machine_source is None or not abilities(fmt).planned:
        return LoadPlanDefaults(note="no planner for this model; using safe defaults")
    model = check_model(path, fmt)
    machine = machine_source()
    if model is None or machine is None:
        return LoadPlanDefaults(note="hardware not probed yet; using safe defaults")
    speculative = load_speculative(drafts.setting()) if drafts is not None else None
    same = drafts.deterministic() if drafts is not None else False
    loaded = plan_load(
        path,
        fmt,
        model,
        machine,
        default_context(model),
        max_slots=max_slots,
        speculative=speculative,
        deterministic=same,
    )
    if loaded.planned is None:
        return LoadPlanDefaults(n_ctx=loaded.spec.n_ctx, spec=loaded.spec, role=model.role, note="nothing to plan")
    planned = loaded.planned
    plan, opts = planned.plan, planned.plan.options
    found: tuple[tuple[str, str, str], ...] = ()
    picked = ""
    if drafts is not None and entry is not None and plan.fits:
        found = tuple((m.id, m.name, str(m.path)) for m in drafts.finder.fitting(entry, plan))
        saved = drafts.picked(entry.id) or ""
        picked = saved if speculative != "off" and any(d[0] == saved for d in found) else ""
    return LoadPlanDefaults(
        n_ctx=opts.n_ctx,
        n_gpu_layers=opts.n_gpu_layers,
        kv_type=opts.cache_type_k,
        flash_attn=opts.flash_attn,
        slots=plan.slots,
        prompt_cache_mib=prompt_cache_mib(plan) if plan.fits else PROMPT_CACHE_MIB,
        predicted_tok_s=planned.predicted_decode_tok_s,
        offload=f"{plan.label} ({plan.layers_on_gpu}/{plan.n_layers} layers on GPU)",
        verdict=plan.verdict,
        note="" if plan.fits else plan.explanation,
        speculative=loaded.spec.speculative,
        drafts=found,
        draft=picked,
        ngram=abilities(fmt).ngram and model.role == "chat",
        engine_note=next((n for n in plan.notes if "make engine" in n), "") if abilities(fmt).llama_cpp_build else "",
        spec=_with_projector(loaded.spec, entry) if model.role == "chat" else loaded.spec,
        role=model.role,
    )


def _with_projector(spec: LoadSpec, entry: LocalModel | None) -> LoadSpec:
    """The load with the library entry's vision projector, as the API's resolver plans it."""
    projector = projector_of(entry) if entry is not None else None
    return spec.model_copy(update={"projector": projector}) if projector is not None else spec


# What a load failure's raw text (llama.cpp's, the engine's or the preflight's) means, in a few words;
# the first match wins, and the raw text stays one click away ("Details").
_LOAD_REASONS = (
    (
        ("magic", "not a gguf", "not a valid gguf", "invalid gguf", "gguf_init", "truncated"),
        "the file is not a valid GGUF model.",
    ),
    (
        ("unknown model architecture", "unknown architecture", "unsupported architecture"),
        "this version of llama.cpp does not support its architecture.",
    ),
    (
        ("out of memory", "failed to allocate", "cudamalloc", "not enough memory", "does not fit"),
        "there is not enough memory for it (try a smaller context or fewer GPU layers).",
    ),
    (
        ("does not exist", "no such file", "cannot read", "is not a file", "permission denied"),
        "the file could not be read.",
    ),
    (("load cancelled",), "the load was cancelled."),
    (("crashed on", "every configuration"), "llama.cpp crashed on it in every configuration Hearth tried."),
)


def load_failure_sentence(name: str, raw: str) -> str:
    """'Could not load NAME: <why, in words>.' for the raw text of a failed load."""
    low = raw.lower()
    why = next((w for keys, w in _LOAD_REASONS if any(k in low for k in keys)), "the engine reported an error.")
    return f"Could not load {name or 'the model'}: {why}"
