"""How a model loads on this machine: the one place a LoadSpec is planned, for the chat and the API alike.

`plan_load` reads what the file is for (a chat model, an embedding model, a reranker) and plans it as such:
a chat model at the largest context up to what was asked that fits, with as many parallel slots as fit
beside it and n-gram drafting as the setting says; an embedding model or reranker for pooled output, one
sequence, a whole input per decode. The API's resolver takes the spec as it is; the chat's Advanced form
shows it and applies the user's changes on top (`LoadSpec.model_copy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.engines.registry import abilities
from app.core.models.devices import Machine
from app.core.models.memory import LoadOptions
from app.core.models.spec import ModelSpec
from app.core.runtime.preflight import FALLBACK_CTX, PlannedLoad, plan_model, spec_from_plan, speculation_for

# An embedding model's or reranker's context at most: a whole input goes in one micro-batch, and the compute
# buffer grows with the square of it (a 32k-trained encoder would ask for gigabytes to embed a sentence).
ENCODER_MAX_CONTEXT = 8192


def chat_load_slots(parallel_requests: int, serving: bool) -> int:
    """The parallel slots a load from the chat plans for: one for the person chatting, or Settings →
    Parallel requests while the API server is serving (0, auto: as many as memory allows), since its
    clients then share the model loaded. Each slot holds a whole context of KV cache, so reserving them unasked
    would cost memory for nothing."""
    return parallel_requests if serving else 1


@dataclass(frozen=True)
class ModelLoad:
    spec: LoadSpec
    planned: PlannedLoad | None = None  # None: nothing to plan with (no machine, a plug-in format)


def plan_load(
    path: Path,
    fmt: str,
    model: ModelSpec | None,
    machine: Machine | None,
    asked_ctx: int,
    *,
    max_slots: int = 1,
    speculative: str | None = None,
    deterministic: bool = False,
) -> ModelLoad:
    """`model` (its spec, from check_model) planned on `machine` at up to `asked_ctx` tokens of context and
    `max_slots` parallel sequences; `speculative`: the n-gram drafting setting (None: as planned);
    `deterministic` (Settings → Same answer every time): a llama.cpp chat model decodes each sequence on its
    own, so a reply is the same beside others as alone (no drafting; each slot its own KV cells)."""
    if model is not None and model.role != "chat":
        return _plan_encoder(path, model, machine, asked_ctx)
    if model is None or machine is None:
        spec = LoadSpec(path=path, n_ctx=min(asked_ctx, FALLBACK_CTX) or FALLBACK_CTX)
        return ModelLoad(same_answer(spec, fmt) if deterministic else spec)
    # An engine that cannot batch plans (and is checked for) one sequence.
    slots = max_slots if abilities(fmt).batches else 1
    planned = plan_model(model, machine, asked_ctx, label=path.name, max_slots=slots)
    spec = spec_from_plan(path, planned.plan).model_copy(update={"speculative": speculation_for(fmt, speculative)})
    return ModelLoad(same_answer(spec, fmt) if deterministic else spec, planned)


def same_answer(spec: LoadSpec, fmt: str) -> LoadSpec:
    """`spec` with deterministic decoding where the engine offers it (llama.cpp): each slot its own KV cells,
    no drafting. Other engines are left as they are."""
    if not abilities(fmt).llama_cpp_build:
        return spec
    return spec.model_copy(update={"deterministic": True, "kv_unified": False, "speculative": "off"})


def _plan_encoder(path: Path, model: ModelSpec, machine: Machine | None, asked_ctx: int) -> ModelLoad:
    """An embedding model or reranker: one sequence, its pooled output, a whole input per decode."""
    asked = min(model.n_ctx_train or FALLBACK_CTX, ENCODER_MAX_CONTEXT, asked_ctx or ENCODER_MAX_CONTEXT)
    planned = None
    if machine is None:
        spec = LoadSpec(path=path, n_ctx=asked)
    else:
        options = LoadOptions(n_ctx=asked, n_batch=asked, n_ubatch=asked, embeddings=True)
        planned = plan_model(model, machine, asked, options, label=path.name, max_slots=1)
        spec = spec_from_plan(path, planned.plan)
    n_ctx = spec.n_ctx
    spec = spec.model_copy(
        update={
            "embedding": True,
            "pooling": "rank" if model.role == "rerank" else None,
            "slots": 1,
            "kv_unified": False,
            "speculative": "off",
            "draft_model": None,
            "n_batch": n_ctx,
            "n_ubatch": n_ctx,
        }
    )
    return ModelLoad(spec, planned)
