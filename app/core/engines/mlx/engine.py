"""MlxEngine: MLX models (a Hugging Face folder) through mlx-lm, on the calling (host) thread.

MLX streams are thread-bound: load and generate must run on the same thread, never a pool.
Prompts are rendered by Hearth's sandboxed templates; message content is tokenized with
special-token parsing off (T4). The KV cache is kept across turns and trimmed to the common prefix.
Loaded with slots > 1 it generates through `sequences` (app.core.engines.mlx.batch, continuous batching
over mlx-lm's BatchGenerator), which the host drives; `generate` then runs one request through it.
A vision-language checkpoint sees images where mlx-vlm is installed (app.core.engines.mlx.vision).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.engines.base import (
    Capabilities,
    Chunk,
    Embeddings,
    FinishReason,
    GenerateRequest,
    GenerationStats,
    LoadSpec,
    ModelInfo,
    Rankings,
    check_logit_bias,
    check_prompt_size,
    utf8,
)
from app.core.engines.chat_templates.formats import FORMATS
from app.core.engines.decoding.sequence_state import SequenceState
from app.core.engines.decoding.stops import StopScanner
from app.core.engines.errors import ContextLengthExceeded, EngineError, Unsupported
from app.core.engines.inputs.fill_in_middle import fim_by_text
from app.core.engines.inputs.images import has_images
from app.core.engines.mlx.cache import HeldCache, align
from app.core.engines.mlx.draft import untagged
from app.core.engines.mlx.prompt import chat_template, read_json, token_text
from app.core.engines.mlx.sampling import build_sampling, logprobs_of, token_bytes_fn
from app.core.errors import HearthError
from app.core.formats import MLX
from app.core.native import import_native

if TYPE_CHECKING:
    from app.core.engines.mlx.batch import MlxSequences
    from app.core.engines.mlx.draft import MlxDraft
    from app.core.engines.mlx.vision import MlxVision, VisionPrompt

logger = logging.getLogger(__name__)

PREFILL_STEP = 512  # prompt tokens per forward pass; cancel is checked between them


class _Cancelled(Exception):
    pass


class MlxEngine:
    name = "mlx"  # the engine, as logs and the bench name it (its format is MLX)
    format = MLX

    def __init__(self, *, prefill_step: int = PREFILL_STEP) -> None:
        self.capabilities = Capabilities(chat=True, completion=True, logprobs=True)
        self.info: ModelInfo | None = None
        # MLX's crashes are not attributed to a configuration: there is no canary to feed (llama.cpp only).
        self.native_activity: None = None
        self.prefill_step = prefill_step
        self._model: Any = None
        self._tok: Any = None  # mlx_lm TokenizerWrapper
        self._hf: Any = None  # the Hugging Face tokenizer inside it
        self._template: str | None = None
        self._bos = ""
        self._eos = ""
        self._add_bos = False
        self._held: HeldCache | None = None  # the KV cache kept across turns, and what it holds
        self._token_bytes: dict[int, bytes] = {}  # for logprobs: each token's bytes, filled as they are shown
        self._sequences: MlxSequences | None = None  # slots > 1: the batched path
        self._draft: MlxDraft | None = None  # speculative decoding with a draft model (single stream)
        self._vision: MlxVision | None = None  # a vision-language checkpoint's image half (mlx-vlm)
        self._no_vision = ""  # why images are refused, when they are

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self, spec: LoadSpec) -> ModelInfo:
        from app.core.models.hf_config import check_no_remote_code

        folder = Path(spec.path).expanduser()
        if not folder.is_dir():
            raise EngineError(f"{folder} is not an MLX model folder")
        config = read_json(folder / "config.json")
        tok_config = read_json(folder / "tokenizer_config.json")
        check_no_remote_code(config)  # T6; mlx-lm would import `model_file` (CVE-2026-5843)
        check_no_remote_code(tok_config)
        self.unload()
        mlx_lm = import_native("mlx_lm")
        try:
            model, tokenizer = mlx_lm.load(str(folder))  # trust_remote_code stays at its default, False
        except Exception as exc:
            raise EngineError(f"MLX could not load {folder.name}: {exc}") from exc
        self._model, self._tok = model, tokenizer
        self._held = HeldCache(model)
        self._hf = getattr(tokenizer, "_tokenizer", tokenizer)
        if hasattr(self._hf, "model_max_length"):  # we check the context ourselves; silence its warning
            self._hf.model_max_length = 1 << 62
        self._open_vision(folder, config)
        self.capabilities = self.capabilities.model_copy(update={"vision": self._vision is not None})
        # A format picked by name (chat_formats) is its template; the end-of-turn stops are the folder's own.
        picked = FORMATS[spec.chat_template].source if spec.chat_template in FORMATS else spec.chat_template
        self._template = picked or chat_template(folder, tok_config)
        self._bos = token_text(tok_config.get("bos_token"))
        self._eos = token_text(tok_config.get("eos_token"))
        self._add_bos = bool(tok_config.get("add_bos_token")) and bool(self._bos)
        n_ctx = spec.n_ctx
        limit = config.get("max_position_embeddings")
        if isinstance(limit, int) and 0 < limit < n_ctx:
            n_ctx = limit
        notice = None
        if self._template is None:
            from app.core.engines.chat_templates.render import CHATML_NOTICE

            notice = CHATML_NOTICE
        self.info = ModelInfo(
            path=folder,
            format=MLX,
            n_ctx=n_ctx,
            n_vocab=int(config.get("vocab_size") or 0),
            chat_template=self._template,
            template_notice=notice,
            extra={
                "model_type": config.get("model_type"),
                "quantization": config.get("quantization"),
                "projector": "mlx-vlm" if self._vision is not None else "",  # it sees images
                "no_vision": self._no_vision,
            },
        )
        if spec.speculative == "draft" and spec.draft_model is not None:
            self._open_draft(spec)
        if spec.slots > 1 and self._draft is None:
            from app.core.engines.mlx.batch import Loaded, open_batch

            loaded = Loaded(model, tokenizer, n_ctx, self.prefill_step, self.prepare, self.token_bytes, self._vision)
            self._sequences = open_batch(loaded, spec.slots, spec.prompt_cache_mib * 1024 * 1024)
        self.info.extra["slots"] = spec.slots if self._sequences is not None else 1
        self.info.extra["speculative"] = "draft" if self._draft is not None else "off"
        self.info.extra["draft_model"] = self._draft.name if self._draft is not None else ""
        logger.info("MLX model %s loaded (ctx %d)", folder.name, n_ctx)
        return self.info

    def _open_vision(self, folder: Path, config: dict[str, Any]) -> None:
        """The image half of a vision-language checkpoint, or the reason it has none (the model still chats)."""
        from app.core.engines.mlx.vision import MlxVision
        from app.core.models.vision_config import has_vision_half, mlx_vlm_installed

        self._vision, self._no_vision = None, f"{folder.name} cannot see images: it is a text model"
        if not has_vision_half(config):
            return
        if not mlx_vlm_installed():
            self._no_vision = (
                f"{folder.name} could see images with mlx-vlm, which is not installed (pip install mlx-vlm)"
            )
            return
        try:
            self._vision = MlxVision(folder, config, self._model, lambda text: list(self._hf.encode(text)))
            self._no_vision = ""
        except Unsupported as exc:
            self._no_vision = f"{folder.name} cannot see images here: {exc}"
            logger.warning("%s", self._no_vision)

    def _open_draft(self, spec: LoadSpec) -> None:
        from app.core.engines.mlx.draft import MlxDraft

        cache_mod = import_native("mlx_lm.models.cache")
        try:
            if not cache_mod.can_trim_prompt_cache(cache_mod.make_prompt_cache(self._model)):
                raise EngineError("this model's KV cache cannot be rewound, which speculative decoding needs")
            assert spec.draft_model is not None
            self._draft = MlxDraft(Path(spec.draft_model), self._hf, spec.drafts_at_most())
        except BaseException:
            self.unload()
            raise
        if spec.slots > 1:  # mlx-lm's batched generation cannot draft
            logger.info("MLX with a draft model runs one request at a time (not %d slots)", spec.slots)

    @property
    def sequences(self) -> MlxSequences | None:
        """The batched path (a SequenceRunner) when loaded with slots > 1, else None."""
        return self._sequences

    def unload(self) -> None:
        was_loaded = self._model is not None
        sequences, self._sequences = self._sequences, None
        if sequences is not None:
            sequences.close()
        if self._draft is not None:
            self._draft.close()
        self._model = self._tok = self._hf = self._draft = self._held = self._vision = None
        self._token_bytes = {}
        self.info = None
        if was_loaded:
            gc.collect()
            mx = import_native("mlx.core")
            clear = getattr(mx, "clear_cache", None)
            if clear is not None:
                clear()

    def _name(self) -> str:
        return self.info.path.name if self.info is not None else "this model"

    def _require(self) -> ModelInfo:
        if self.info is None or self._model is None:
            raise EngineError("no model is loaded")
        return self.info

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        raise Unsupported("the MLX engine does not compute embeddings; use a GGUF embedding model")

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        raise Unsupported("the MLX engine does not rerank; use a GGUF reranker")

    # -- prompts -------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Special-token strings become control tokens only with `special=True` (template literals)."""
        self._require()
        utf8(text)  # a lone surrogate: the caller's 400, not the tokenizer's UnicodeEncodeError
        return list(self._hf.encode(text, add_special_tokens=False, split_special_tokens=not special))

    def _prompt_ids(self, request: GenerateRequest) -> tuple[list[int], str | None, VisionPrompt | None]:
        """The prompt's tokens (an image: a run of its pseudo id), the template's notice, and with images, what
        reads them."""
        from app.core.engines.chat_templates.render import render_chat, tokenize_segments

        check_prompt_size(request)
        vision = None
        notice: str | None = None
        if request.messages is not None:
            messages = request.messages

            def render(marked: list[Any]) -> list[tuple[str, bool]]:
                nonlocal notice
                out = render_chat(self._template, marked, tools=request.tools, bos_token=self._bos, eos_token=self._eos)
                notice = out.notice
                return out.segments

            def tokenize(text: str, special: bool) -> list[int]:
                return self.tokenize(text, special=special)

            if has_images(messages):
                if self._vision is None:
                    raise Unsupported(self._no_vision, param="images")
                vision = self._vision.prompt(messages, render, tokenize)
                ids = vision.keys
            else:
                ids = tokenize_segments(render(messages), tokenize)
        elif request.prompt is not None:
            # A raw prompt is caller text: no control tokens from it either.
            ids, notice = self.tokenize(request.prompt), None
            if request.suffix is not None:
                ids = fim_by_text(self._hf.get_vocab().get, self._name()).prompt(ids, self.tokenize(request.suffix))
        else:
            raise EngineError("a request needs messages or a prompt")
        if self._add_bos and (not ids or ids[0] != self._hf.bos_token_id):
            ids = [self._hf.bos_token_id, *ids]
            if vision is not None:
                vision.keys, vision.ids = ids, [self._hf.bos_token_id, *vision.ids]
        if not ids:
            raise EngineError("the prompt is empty")
        return ids, notice, vision

    def count_tokens(self, request: GenerateRequest) -> int:
        self._require()
        return len(self._prompt_ids(request)[0])

    def check(self, request: GenerateRequest) -> list[int]:
        """A request's prompt tokens, once it is known to be one this engine can run (else it raises)."""
        return self.prepare(request)[0]

    def prepare(self, request: GenerateRequest) -> tuple[list[int], VisionPrompt | None]:
        """`check`'s tokens, and with images, what reads them (each image processed now, encoded when read)."""
        info = self._require()
        ids, _notice, vision = self._prompt_ids(request)
        if len(ids) >= info.n_ctx:
            raise ContextLengthExceeded(len(ids), info.n_ctx)
        if request.json_schema is not None or request.grammar is not None:
            raise Unsupported("the MLX engine does not support grammars or JSON-schema output")
        check_logit_bias(request.sampling.logit_bias, self._vocab_size())
        return ids, vision

    def _vocab_size(self) -> int:
        """The logits' width: config.json's vocab_size (it may pad past the tokenizer), else the tokenizer's."""
        return (self.info.n_vocab if self.info else 0) or len(self._hf)

    # -- generation ------------------------------------------------------------------------------
    def generate(self, request: GenerateRequest, cancel: threading.Event) -> Iterator[Chunk]:
        """Stream chunks. Request problems (no model, an empty or too long prompt, a grammar) raise
        here, before anything runs; the returned iterator does the work."""
        if self._sequences is not None:
            return self._sequences.run_one(request, cancel)
        info = self._require()
        return self._stream(request, cancel, info, *self.prepare(request))

    def _stream(
        self,
        request: GenerateRequest,
        cancel: threading.Event,
        info: ModelInfo,
        ids: list[int],
        vision: VisionPrompt | None = None,
    ) -> Iterator[Chunk]:
        mx = import_native("mlx.core")
        gen_mod = import_native("mlx_lm.generate")
        s = request.sampling
        if s.seed is not None:
            mx.random.seed(s.seed)
        raw: deque[Any] = deque()  # each step's raw logits, oldest first (for logprobs)
        # generate_step's own logprobs come after the processors (bias, penalties); the model's own
        # distribution is what OpenAI reports, so a first processor keeps the logits it is handed.
        sampler, processors = build_sampling(s, raw if s.logprobs is not None else None)
        # The draft model drafts for plain sampling; logprobs, a logit bias or penalties take the plain path.
        # It cannot read images.
        draft = self._draft if s.logprobs is None and not processors and vision is None else None
        limit = info.n_ctx - len(ids)
        if s.max_tokens is not None:
            limit = min(limit, s.max_tokens)

        t0 = time.perf_counter()
        assert self._held is not None
        held = [self._held] + ([draft.held] if draft is not None else [])
        reuse = align(ids, held)
        cache = self._held.cache
        stats = GenerationStats(prompt_tokens=len(ids), prompt_tokens_evaluated=len(ids) - reuse)
        state = SequenceState(sampling=s, cancel=cancel, start=t0, stats=stats)
        fed: list[int] = []  # every token generate_step yielded (it feeds each one before yielding)
        if vision is not None and reuse < vision.end():
            assert self._vision is not None and cache is not None
            began = time.perf_counter()
            try:
                reuse = self._vision.read(vision, cache, reuse, self.prefill_step, cancel.is_set)
            except Exception as exc:
                self._held.forget()  # its state is unknown now
                raise EngineError(f"MLX could not read the images: {type(exc).__name__}: {exc}") from exc
            stats.images_encoded, stats.image_encode_s = vision.encoded, vision.encode_s
            stats.image_s = time.perf_counter() - began  # the encoder runs inside the read
            if reuse < vision.end():  # cancelled while reading
                from app.core.engines.mlx.batch import mlx_peak_memory

                self._held.settle(ids)
                yield state.finish("cancelled", "", peak_memory=mlx_peak_memory())
                return
        prompt = vision.ids if vision is not None else ids  # what the model reads: image positions as tokens

        def on_progress(done: int, total: int) -> None:  # called between prefill chunks
            if cancel.is_set():
                stats.prompt_tokens_evaluated = done
                raise _Cancelled

        if draft is not None and cache is not None:
            steps = untagged(
                draft.steps(
                    self._model,
                    cache,
                    ids,
                    reuse,
                    sampler=sampler,
                    limit=limit,
                    prefill_step=self.prefill_step,
                    progress=on_progress,
                )
            )
        else:
            steps = gen_mod.generate_step(
                mx.array(prompt[reuse:]),
                self._model,
                max_tokens=limit,
                sampler=sampler,
                logits_processors=processors or None,
                prompt_cache=cache,
                prefill_step_size=self.prefill_step,
                prompt_progress_callback=on_progress,
            )
        eos = set(getattr(self._tok, "eos_token_ids", None) or [])
        detok = self._tok.detokenizer
        detok.reset()
        stops = StopScanner(s.stop)
        generated: list[int] = []  # tokens the caller sees
        finish: FinishReason = "length"
        token_bytes = self.token_bytes() if s.logprobs is not None else None
        try:
            for token, _logprobs in steps:
                token = int(token)
                logits = raw.popleft() if s.logprobs is not None else None  # generate_step runs a step ahead
                if not fed:  # the prompt was read in one go before it: its time is the prefill's
                    state.prefill_s = max(time.perf_counter() - t0, 1e-9)
                state.sampled()
                fed.append(token)
                if token in eos:
                    finish = "stop"
                    break
                generated.append(token)
                detok.add_token(token)
                text = stops.feed(detok.last_segment)
                if token_bytes is None:
                    yield Chunk(text=text, token=token)
                else:
                    logprobs = logprobs_of(logits, token, s.logprobs, token_bytes)
                    yield Chunk(text=text, token=token, logprobs=logprobs)
                if stops.hit is not None:
                    finish = "stop"
                    break
                if cancel.is_set():
                    finish = "cancelled"
                    break
        except _Cancelled:
            finish = "cancelled"
        except HearthError:
            for h in held:
                h.forget()
            raise
        except Exception as exc:
            for h in held:
                h.forget()  # their state is unknown now
            raise EngineError(f"MLX generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            steps.close()
        for h in held:
            h.settle(ids + fed)
        if draft is not None:
            stats.draft_tokens, stats.draft_accepted = draft.drafted, draft.accepted
        tail = ""
        if finish != "cancelled" or generated:
            detok.finalize()
            tail = stops.feed(detok.last_segment) if stops.hit is None else ""
        tail += stops.flush()
        stats.generated_tokens = len(generated)
        from app.core.engines.mlx.batch import mlx_peak_memory

        yield state.finish(finish, tail, peak_memory=mlx_peak_memory(), stop=stops.hit)

    def token_bytes(self) -> Callable[[int], bytes]:
        """A token's bytes (for logprobs), from the detokenizer's own tables."""
        return token_bytes_fn(self._tok, self._hf, self._token_bytes)
