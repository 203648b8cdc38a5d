"""GGUF models in process through llama-cpp-python, with prefix reuse and cancellable prefill.

Owned by one thread (the EngineHost's). The chat prompt is rendered by `templates.render_chat`,
never by llama-cpp-python's chat handlers, so message content is tokenized with special-token
parsing off. Raw prompts are tokenized with special parsing off as well: a completion request
cannot create control tokens from its text either.
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.engines.base import (
    Capabilities,
    Chunk,
    Embeddings,
    GenerateRequest,
    LoadSpec,
    ModelInfo,
    Rankings,
    check_logit_bias,
    check_prompt_size,
    utf8,
)
from app.core.engines.canary.guard import NativeGuard, config_of, weights_of
from app.core.engines.canary.inflight import InflightMarkers, NativeActivity
from app.core.engines.chat_templates.formats import choose_template
from app.core.engines.errors import ContextLengthExceeded, EngineError, Unsupported
from app.core.engines.inputs.images import has_images, is_image
from app.core.engines.llamacpp.canary import guard_for
from app.core.engines.llamacpp.embed import POOLING_RANK, POOLINGS, pooling_for
from app.core.engines.llamacpp.log import route_llama_logs
from app.core.engines.llamacpp.options import (
    build_grammar,
    llama_kwargs,
    model_params_for,
)
from app.core.engines.llamacpp.prompt import (
    ChatTemplate,
    chat_ids,
    fim_tokens,
    raw_ids,
    single_token_ids,
    token_piece,
)
from app.core.engines.llamacpp.rerank import TEMPLATE_KEY, not_chat
from app.core.engines.llamacpp.slots import LlamaSequences, Prepared, open_slots
from app.core.engines.llamacpp.validate import validated_gguf
from app.core.engines.llamacpp.vectors import Vectors
from app.core.engines.llamacpp.vision import MediaChunk, Projector
from app.core.formats import GGUF
from app.core.hardware.engines import LLAMACPP
from app.core.models.roles import ModelRole, has_rank_head, role_of
from app.core.native import import_native

if TYPE_CHECKING:
    from app.core.models.gguf import GGUFHeader

logger = logging.getLogger(__name__)

# The context Llama opens when ours (multi-sequence) replaces it: as small as llama.cpp allows.
TOKEN_CONTEXT = 64


class LlamaCppEngine:
    name = LLAMACPP
    format = GGUF

    def __init__(
        self, guard: NativeGuard | None = None, *, checked: bool = True, markers: InflightMarkers | None = None
    ) -> None:
        """`checked`: loads go through the native canary (`guard`, by default this machine's); off only in
        the canary's own child. `markers`: where in-flight native work is marked (default: the data dir)."""
        self._guard = guard
        self._checked = checked
        self._markers = markers
        # Marks load and decode runs so a crash is attributed on the next start (the host calls it for decode).
        self.native_activity: NativeActivity | None = None
        self.capabilities = Capabilities(chat=True, completion=True, embeddings=False, grammar=True, logprobs=True)
        self.info: ModelInfo | None = None
        self._llm: Any = None
        self._lib: Any = None
        self._spec: LoadSpec | None = None
        self._template: str | None = None
        self._turn_end_ids: frozenset[int] = frozenset()  # the template's end-of-turn tokens (_open_turn_ends)
        self._bos_text = ""
        self._eos_text = ""
        self._vectors: Vectors | None = None  # embed and rerank, for the loaded model
        self._role: ModelRole = "chat"  # what the file is for (roles.role_of), for the refusals' wording
        self._marker_ids: dict[tuple[str, ...], frozenset[int]] = {}
        self._sequences: LlamaSequences | None = None  # slots > 1: the batched path
        self._batch_ctx: Any = None
        self._vision: Projector | None = None  # LoadSpec.projector, opened beside the slots
        self._vision_problem = ""  # why LoadSpec.projector could not be opened (the model then reads text only)

    # -- loading -------------------------------------------------------------------------

    def load(self, spec: LoadSpec) -> ModelInfo:
        if self._llm is not None:
            self.unload()
        path = Path(spec.path)
        header = validated_gguf(path)
        self._lib = import_native("llama_cpp")
        route_llama_logs(self._lib)
        tensor_types = [t.type_name for t in header.tensors]
        weights = weights_of(tensor_types)
        turned_off: list[str] = []
        native_note = ""
        if self._checked:
            if self._guard is None:
                self._guard = guard_for(self._lib)
            verdict = self._guard.safe_spec(spec, tensor_types)
            spec, turned_off, native_note = verdict.spec, verdict.turned_off, verdict.sentence
        config = vars(config_of(spec)).copy()
        # The canary's own child marks nothing: its crash is the answer it was started for, not one to report.
        markers = (self._markers or InflightMarkers()) if self._checked else None
        activity = NativeActivity(markers, f"llama-{id(self):x}", path, weights, config)
        kwargs = llama_kwargs(self._lib, spec)
        logger.info(
            "loading %s (n_ctx=%d, threads=%d, gpu layers=%d)",
            path.name,
            spec.n_ctx,
            kwargs["n_threads"],
            spec.n_gpu_layers,
        )
        names = {t.name for t in header.tensors}
        self._role = role_of(header.metadata, names)
        rerank_template = header.metadata.get(TEMPLATE_KEY)
        pooling = pooling_for(header.arch_value("pooling_type"))
        if spec.embedding:
            if spec.pooling is not None:
                pooling = POOLINGS[spec.pooling]
            # Rank pooling reads a classification head: a file without one is refused before native code runs.
            if pooling == POOLING_RANK and not has_rank_head(names):
                raise Unsupported(f"{path.name} has no classification head (cls tensors), so it cannot rerank")
            kwargs["pooling_type"] = pooling
            # A whole input in one micro-batch: non-causal (BERT-like) models cannot split one.
            kwargs["n_batch"] = kwargs["n_ubatch"] = spec.n_ctx
        # Generation always runs on our own slots context (one slot: a single stream), so one decode loop
        # serves both; Llama itself only gets a token context, for its weights and tokenizer.
        batched = not spec.embedding
        if batched:
            kwargs["n_ctx"] = kwargs["n_batch"] = kwargs["n_ubatch"] = TOKEN_CONTEXT
        activity.begin("loading")
        try:
            try:
                with model_params_for(self._lib, spec):
                    self._llm = self._lib.Llama(**kwargs)
            except Exception as exc:  # llama-cpp-python raises ValueError("Failed to load model from file: …")
                logger.warning("llama.cpp failed to load %s: %s", path, exc)
                raise EngineError(f"llama.cpp could not load {path.name}: {exc}") from exc
            self._spec = spec
            if batched:
                self._open_slots(spec, kwargs)
                if spec.projector is not None:
                    self._open_projector(spec.projector, header, kwargs["n_threads"], spec.n_gpu_layers != 0)
        finally:
            activity.end()
        self.native_activity = activity
        model = self._llm._model
        self._bos_text = model.token_get_text(model.token_bos()) if model.token_bos() >= 0 else ""
        self._eos_text = model.token_get_text(model.token_eos()) if model.token_eos() >= 0 else ""
        choice = choose_template(
            header.chat_template,
            header.architecture,
            _tokens(header.metadata.get("tokenizer.ggml.tokens")),
            pre=_text(header.metadata.get("tokenizer.ggml.pre")),
            override=spec.chat_template,
        )
        logger.info("%s: %s", path.name, choice.reason)
        self._template = choice.source
        notice = choice.notice
        self._open_turn_ends(choice.stops)
        chat = not spec.embedding  # an embeddings context yields pooled vectors, not logits
        rank = spec.embedding and pooling == POOLING_RANK  # a rank-pooled context yields scores, not vectors
        # A chat model embeds too, through a second context on its weights (opened on first use).
        self.capabilities = Capabilities(
            chat=chat,
            completion=chat,
            embeddings=not rank,
            rerank=rank,
            grammar=chat,
            logprobs=chat,
            vision=self._vision is not None,
        )
        self.info = ModelInfo(
            path=path,
            format=GGUF,
            n_ctx=self._sequences.runner.n_ctx_seq if self._sequences is not None else self._llm.n_ctx(),
            n_vocab=self._llm.n_vocab(),
            chat_template=self._template,
            template_notice=notice,
            extra={
                "n_threads": kwargs["n_threads"],
                "n_batch": kwargs["n_batch"],
                "architecture": header.architecture,
                "add_bos": self._add_bos(),
                "slots": spec.slots if batched else 0,
                "speculative": spec.speculative if batched and not spec.deterministic else "off",
                "deterministic": batched and spec.deterministic,  # llamacpp.exact
                "draft_model": spec.draft_model.name if batched and spec.draft_model is not None else "",
                # What the native canary turned off for this machine, and why (empty when nothing was).
                "turned_off": turned_off,
                "native_note": native_note,
                "extra_bufts": spec.extra_bufts,
                "flash_attn": spec.flash_attn,
                "n_gpu_layers": spec.n_gpu_layers,
                "projector": self._vision.path.name if self._vision is not None else "",  # it sees images
                "projector_problem": self._vision_problem,  # why a projector it was given is not open
                # Which template runs (a format's name, "file" or "custom") and why, in a sentence.
                "chat_template": choice.format or choice.origin,
                "chat_template_reason": choice.reason,
            },
        )
        self._vectors = Vectors(
            self._lib,
            self._llm,
            self.capabilities,
            role=self._role,
            pooling=pooling,
            n_threads=int(kwargs["n_threads"]),
            rerank_template=rerank_template if isinstance(rerank_template, str) else None,
            tokenize=self._tokenize_as,
        )
        return self.info

    def _open_turn_ends(self, stops: tuple[str, ...]) -> None:
        """Hearth's own template ends a turn with these: each reply stops there. Those that are one control
        token here are shown to the stop scanner (a control token is otherwise rendered as nothing)."""
        self._turn_end_ids = single_token_ids(list(stops), self._tokenize_as, {}) if stops else frozenset()
        if self._sequences is not None:
            self._sequences.runner.turn_ends = stops

    def _open_slots(self, spec: LoadSpec, kwargs: dict[str, Any]) -> None:
        try:
            piece = functools.partial(token_piece, self._lib)
            self._batch_ctx, runner = open_slots(self._lib, self._llm, spec, piece)
        except EngineError:
            self.unload()
            raise
        self._sequences = LlamaSequences(runner, self._prepare)
        kwargs["n_batch"] = runner.n_batch
        self._llm._ctx.close()  # the token context Llama opened: its buffers are not needed

    def _open_projector(self, path: Path, model: GGUFHeader, n_threads: int, use_gpu: bool) -> None:
        """Open the model's vision. A projector that cannot be opened (another model's, a broken file) costs
        the model its images, not its load: it chats as text, and an image is refused with the reason."""
        assert self._sequences is not None
        try:
            _check_projector(path, model)
            self._vision = Projector(self._llm._model.model, path, n_threads, use_gpu)
        except EngineError as exc:
            self._vision_problem = f"its vision projector {path.name} could not be opened: {exc}"
            name = Path(self._spec.path).name if self._spec is not None else "the model"
            logger.warning("%s loads without images: %s", name, self._vision_problem)
            return
        self._sequences.runner.vision = self._vision

    @property
    def sequences(self) -> LlamaSequences | None:
        """The batched path (a SequenceRunner) of a model loaded for chat (None for embeddings)."""
        return self._sequences

    def unload(self) -> None:
        vectors, self._vectors = self._vectors, None
        if vectors is not None:
            vectors.close()  # its context lives on the model's weights: freed first
        sequences, self._sequences = self._sequences, None
        if sequences is not None:
            sequences.runner.close()
        vision, self._vision = self._vision, None
        self._vision_problem = ""
        if vision is not None:
            vision.close()  # before the weights it was opened on
        ctx, self._batch_ctx = self._batch_ctx, None
        if ctx is not None:
            ctx.close()
        activity, self.native_activity = self.native_activity, None
        if activity is not None:
            activity.end()
        llm, self._llm = self._llm, None
        self._marker_ids = {}
        self.info = None
        self._spec = None
        self._template = None
        self._turn_end_ids = frozenset()
        if llm is not None:
            try:
                llm.close()
            except Exception:  # closing twice or a half-built context; memory is freed below anyway
                logger.debug("Llama.close failed", exc_info=True)
            del llm
            gc.collect()

    # -- embeddings and reranking (llamacpp.vectors) ----------------------------------------

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        return self._loaded_vectors().embed(texts, cancel, self.native_activity)

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        return self._loaded_vectors().rerank(query, documents, cancel, self.native_activity)

    def _loaded_vectors(self) -> Vectors:
        self._require()
        if self._vectors is None:  # a load that failed after the weights were read
            raise EngineError("no model is loaded")
        return self._vectors

    # -- tokens ---------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        llm = self._require()
        return list(llm.tokenize(utf8(text), add_bos=False, special=special))

    def prompt_tokens(self, request: GenerateRequest) -> list[int]:
        """The exact token ids `generate` would evaluate for `request` (an image: its run of one negative
        id, llamacpp.vision)."""
        return self._prompt(request)[0]

    def _prompt(self, request: GenerateRequest) -> tuple[list[int], dict[int, MediaChunk]]:
        llm = self._require()
        if (request.messages is None) == (request.prompt is None):
            raise EngineError("a request needs either messages or a prompt")
        check_prompt_size(request)
        name = self.info.path.name if self.info is not None else "this model"
        media: dict[int, MediaChunk] = {}
        if request.messages is not None:
            if self._vision is None and self._vision_problem and has_images(request.messages):
                raise Unsupported(f"{name} cannot see images: {self._vision_problem}", param="images")
            template = ChatTemplate(self._template, self._bos_text, self._eos_text)
            ids, media = chat_ids(request, template, self._tokenize_as, self._vision, name)
        else:
            ids = raw_ids(request, self._tokenize_as, lambda: fim_tokens(self._lib, llm._model.vocab, name))
        bos = llm.token_bos()
        if self._add_bos() and bos >= 0 and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids, media

    def count_tokens(self, request: GenerateRequest) -> int:
        return len(self.prompt_tokens(request))

    def _tokenize_as(self, text: str, special: bool) -> list[int]:
        return self.tokenize(text, special=special)

    @property
    def cached_tokens(self) -> list[int]:
        """Token ids whose keys/values are in the KV cache now (the reusable prefix; the most recently
        used slot's)."""
        if self._sequences is None:
            return []
        slots = self._sequences.runner.slots
        return list(max(slots, key=lambda s: s.last_used).tokens)

    def forget_cache(self) -> None:
        """Drop every cached prompt, so the next one is evaluated from scratch (the benchmark's cold runs)."""
        if self._sequences is not None:
            self._sequences.forget()

    # -- generation ------------------------------------------------------------------------

    def generate(self, request: GenerateRequest, cancel: threading.Event) -> Iterator[Chunk]:
        """Stream chunks; the last one has `finish_reason` and `stats`.

        Request problems (no model, prompt longer than the context, a bad grammar or template)
        raise EngineError here, before anything runs; failures while running end the stream
        with a chunk whose finish_reason is "error".
        """
        if self._sequences is None:
            self._require()
            raise Unsupported(not_chat(self._role))
        return self._sequences.run_one(request, cancel)

    def _prepare(self, request: GenerateRequest) -> Prepared:
        """Check a request and tokenize it; raises EngineError before anything runs."""
        llm = self._require()
        if not self.capabilities.chat:
            raise Unsupported(not_chat(self._role))
        tokens, media = self._prompt(request)
        if not tokens:
            raise EngineError("the prompt is empty")
        if is_image(tokens[-1]):
            raise EngineError("a prompt cannot end with an image: text has to follow it")
        n_ctx = self.info.n_ctx if self.info is not None else llm.n_ctx()
        if len(tokens) >= n_ctx:
            raise ContextLengthExceeded(len(tokens), n_ctx)
        check_logit_bias(request.sampling.logit_bias, llm.n_vocab())
        grammar = build_grammar(self._lib, request, llm._model.vocab)
        visible = single_token_ids(request.visible_tokens, self._tokenize_as, self._marker_ids) | self._turn_end_ids
        return tokens, request.sampling, grammar, visible, media

    # -- helpers ---------------------------------------------------------------------------

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineError("no model is loaded")
        return self._llm

    def _add_bos(self) -> bool:
        # llama.cpp resolves tokenizer.ggml.add_bos_token (and its per-vocab default) for us.
        return bool(self._llm is not None and self._llm._model.add_bos_token())


def _check_projector(path: Path, model: GGUFHeader) -> None:
    """The projector's own checks (its header, and that its width is the model's) before libmtmd opens it:
    libmtmd only says that it failed."""
    from app.core.models.projector import model_width, projector_mismatch

    reason = projector_mismatch(validated_gguf(path), model_width(model.metadata))
    if reason is not None:
        raise EngineError(reason)


def _tokens(value: Any) -> list[str]:
    """The vocabulary's token texts (a list; a summarized array is too large to be a real vocabulary)."""
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
