"""Model names as API clients send them → library models, and how each loads here.

A job that names a model is resolved when it starts (see engine_host.py); a JIT load uses the planner's
plan on this machine: the largest context up to `max_context` that fits (0: up to the model's trained
length, what agents need), GPU layers and KV cache type as planned, and as many parallel slots (up to
`max_slots`) as fit beside that context.

An embedding model or a reranker (models.roles) loads as what it is: for pooled output (rank pooling for a
reranker) in one sequence, without drafting, at its trained context up to ENCODER_MAX_CONTEXT.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.engines.registry import abilities
from app.core.engines.remote import FORMAT as REMOTE_FORMAT
from app.core.engines.remote import RemoteStore
from app.core.formats import GGUF
from app.core.library.projectors import projector_of
from app.core.library.store import Library, LocalModel
from app.core.models.devices import Machine
from app.core.models.errors import ModelFileError
from app.core.models.roles import ModelRole
from app.core.models.spec import ModelSpec
from app.core.runtime.drafts import DraftFinder
from app.core.runtime.jobs import LoadJob, ModelNotFound
from app.core.runtime.load_plan import ENCODER_MAX_CONTEXT, plan_load
from app.core.runtime.preflight import (
    FALLBACK_CTX,
    check_model,
    default_context,
    live_machine,
    plan_model,
    spec_from_plan,
)
from app.core.settings import DEFAULT_PARALLEL_REQUESTS

logger = logging.getLogger(__name__)


class ModelResolver:
    """`resolver(name) -> LoadJob` for the host; `load_spec(model)` and `context_length(model)` for listings.
    Thread-safe: the host thread resolves, the server's threads list."""

    def __init__(
        self,
        library: Library,
        machine: Callable[[], Machine | None] = live_machine,
        max_context: int | None = None,
        remotes: RemoteStore | None = None,
        max_slots: int = DEFAULT_PARALLEL_REQUESTS,
        speculative: str | None = None,
        drafts: DraftFinder | None = None,
        draft_for: Callable[[LocalModel], str | None] | None = None,
        template_for: Callable[[LocalModel], str | None] | None = None,
        deterministic: bool = False,
    ) -> None:
        """`max_context`: what a load asks the planner for (0: the trained length; None: the app's default);
        `remotes`: where `remote-name/model-id` names resolve when the library has no such model;
        `max_slots`: the parallel requests a load plans for (Settings → Parallel requests; 1: one at a time;
        AUTO_PARALLEL: as many as memory allows);
        `speculative`: speculative decoding for every load ("auto", "ngram", "off"; None: as planned);
        `draft_for(model)`: the library model picked to draft for it (Settings.draft_models, `serve
        --draft-model`), used where `drafts` finds it can (same tokenizer, smaller, fits beside the plan);
        `template_for(model)`: the chat template picked for it (Settings.chat_templates), a format's name or a
        template, carried to the engine in LoadSpec.chat_template."""
        self.library = library
        self.remotes = remotes
        self.machine = machine
        self.max_context = max_context
        self.max_slots = max_slots  # any thread may change it: the next plan uses it
        self.speculative = speculative  # any thread may change these two, like max_slots
        self.deterministic = deterministic  # Settings → Same answer every time; any thread may change it
        self.draft_for = draft_for
        self.drafts = drafts
        self.template_for = template_for  # any thread may change it, like draft_for
        self._lock = threading.Lock()
        # (path, size, mtime, context asked, slots asked, speculative, draft asked, deterministic)
        #   -> (spec, most it grows to)
        self._planned: dict[
            tuple[str, int, int, int | None, int, str | None, str | None, bool], tuple[LoadSpec, int]
        ] = {}
        self._roles: dict[tuple[str, int, int], ModelRole] = {}  # file version -> what it is for, once read
        self._trained_ctx: dict[tuple[str, int, int], int] = {}  # file version -> its trained context, read then

    def find(self, name: str) -> LocalModel:
        """The ready library model `name` means (its name, id, `repo:QUANT` or path); else ModelNotFound."""
        model = self.library.find(name) if name.strip() else None
        if model is None:
            raise ModelNotFound(f"the model {name[:200]!r} does not exist in Hearth's library (see GET /v1/models)")
        if not model.ready:
            raise ModelNotFound(f"{model.name} is {model.status} in the library: {model.reason or 'not usable'}")
        return model

    def __call__(self, name: str) -> LoadJob:
        try:
            model = self.find(name)
        except ModelNotFound:
            # A library model wins over a remote one of the same name: a remote never shadows a local file.
            spec = self.remotes.load_spec(name) if self.remotes is not None else None
            if spec is None:
                raise
            return LoadJob(spec=spec, format=REMOTE_FORMAT)
        spec, grow_to = self._load(model)
        return LoadJob(spec=spec, format=model.format, grow_to=grow_to)

    def path_of(self, name: str) -> Path:
        """The file (or remote pseudo-path) `name` loads, without planning: how the pool finds the model a
        job is for. Raises ModelNotFound."""
        try:
            return Path(self.find(name).path)
        except ModelNotFound:
            spec = self.remotes.load_spec(name) if self.remotes is not None else None
            if spec is None:
                raise
            return Path(spec.path)

    def load_spec(self, model: LocalModel) -> LoadSpec:
        """How `model` loads by default on this machine (planned once per file version)."""
        return self._load(model)[0]

    def context_length(self, model: LocalModel) -> int:
        """The context a request to `model` can use: what it loads with, or what it grows to if a request
        needs more (what /v1/models and /api/show announce, so agents size their prompts by it)."""
        spec, grow_to = self._load(model)
        return max(spec.n_ctx, grow_to)

    def sized(self, model: LocalModel, n_ctx: int) -> LoadSpec:
        """`model`'s load with `n_ctx` tokens of context (a request's num_ctx, LM Studio's context_length),
        at most its trained length: past it a model without rope scaling loses the thread, and llama.cpp
        would allocate whatever it is given. Planned like any load when it is submitted."""
        spec = self.load_spec(model)
        trained = self._trained(model)
        return spec.model_copy(update={"n_ctx": min(n_ctx, trained) if trained else n_ctx})

    def _trained(self, model: LocalModel) -> int:
        """`model`'s trained context (0: unknown), read from its file when it was planned, not per request."""
        key = _file_key(model.path)
        with self._lock:
            trained = self._trained_ctx.get(key)
        if trained is None:
            try:
                self.load_spec(model)
            except ModelNotFound:
                return 0
            with self._lock:
                trained = self._trained_ctx.get(key, 0)
        return trained

    def _load(self, model: LocalModel) -> tuple[LoadSpec, int]:
        """The planned load with the chat template picked for `model` (not part of the plan: a new pick
        applies at the next load without planning again), and the most it grows to."""
        spec, grow_to = self._planned_load(model)
        template = self.template_for(model) if self.template_for is not None else None
        return (spec.model_copy(update={"chat_template": template}) if template else spec), grow_to

    def _planned_load(self, model: LocalModel) -> tuple[LoadSpec, int]:
        draft = self.draft_for(model) if self.draft_for is not None and abilities(model.format).draft_model else None
        key = (*_file_key(model.path), self.max_context, self.max_slots, self.speculative, draft, self.deterministic)
        with self._lock:
            cached = self._planned.get(key)
        if cached is not None:
            return cached
        planned = self._plan(model, draft)
        with self._lock:
            self._planned[key] = planned
        return planned

    def role(self, model: LocalModel) -> ModelRole:
        """What `model` is for (chat, embedding, rerank), read from its file when it is planned; a model whose
        file cannot be read, and any format but GGUF, is taken as a chat model."""
        if model.format != GGUF:
            return "chat"
        key = _file_key(model.path)
        with self._lock:
            role = self._roles.get(key)
        if role is None:
            try:
                self.load_spec(model)
            except ModelNotFound:
                return "chat"
            with self._lock:
                role = self._roles.get(key, "chat")
        return role

    def _plan(self, model: LocalModel, draft: str | None = None) -> tuple[LoadSpec, int]:
        load, grow_to = self._plan_weights(model, draft)
        with self._lock:  # _plan_weights read the role from the file
            chat = self._roles.get(_file_key(Path(model.path)), "chat") == "chat"
        projector = projector_of(model) if chat else None
        return (load.model_copy(update={"projector": projector}) if projector is not None else load), grow_to

    def _plan_weights(self, model: LocalModel, draft: str | None) -> tuple[LoadSpec, int]:
        """The load and the most context a request may grow it to (0: it does not grow). With the largest
        context that fits asked (max_context 0), a chat model loads at its usual context (DEFAULT_CTX, as in
        the chat) and grows, up to the largest that fits, when a request needs it: a JIT load of a 32k-token
        model no longer reserves 32k tokens of KV cache per slot for a one-line question."""
        path = Path(model.path)
        try:
            spec = check_model(path, model.format)
        except ModelFileError as exc:
            raise ModelNotFound(f"{model.name} cannot be loaded: {exc}") from exc
        if spec is not None:
            with self._lock:
                self._roles[_file_key(path)] = spec.role
                self._trained_ctx[_file_key(path)] = spec.n_ctx_train or 0
        machine = self.machine()
        asked = self._asked(spec) if spec is not None else FALLBACK_CTX
        if spec is not None and spec.role != "chat":
            asked = self.max_context or ENCODER_MAX_CONTEXT  # its trained length, within the encoders' cap
        grow_to = 0
        if spec is not None and spec.role == "chat" and self.max_context == 0 and machine is not None:
            largest = plan_load(path, model.format, spec, machine, asked, max_slots=1).spec.n_ctx
            start = min(default_context(spec), largest)
            grow_to, asked = (largest, start) if largest > start else (0, asked)
        loaded = plan_load(
            path,
            model.format,
            spec,
            machine,
            asked,
            max_slots=self.max_slots,
            speculative=self.speculative,
            deterministic=self.deterministic,
        )
        load = loaded.spec
        if spec is None or machine is None or spec.role != "chat" or loaded.planned is None:
            return load, grow_to
        if draft and self.drafts is not None and self.speculative != "off":  # a picked draft, unless turned off
            plan = loaded.planned.plan
            if abilities(model.format).draft_alone:  # one slot with a draft model
                plan = plan_model(spec, machine, asked, label=path.name, max_slots=1).plan
            picked = self.drafts.pick(model, draft, plan)
            if picked.path is not None:
                base = spec_from_plan(path, plan) if abilities(model.format).draft_alone else load
                load = base.model_copy(update={"speculative": "draft", "draft_model": picked.path})
            else:
                logger.warning("%s loads without a draft model: %s", model.name, picked.note)
        return load, grow_to

    def _asked(self, spec: ModelSpec) -> int:
        trained = spec.n_ctx_train or FALLBACK_CTX
        if self.max_context is None:
            return default_context(spec)
        return trained if self.max_context == 0 else min(self.max_context, trained)


def _file_key(path: Path) -> tuple[str, int, int]:
    try:
        st = Path(path).stat()
        return str(path), st.st_size, st.st_mtime_ns
    except OSError:
        return str(path), -1, -1
