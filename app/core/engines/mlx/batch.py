"""Continuous batching for the MLX engine over mlx-lm's BatchGenerator, on the host thread.

`slots` sequences decode together: each `step` is one BatchGenerator step, which decodes one token for
every sequence past its prompt and then reads one prefill chunk (the engine's prefill step) of the
prompts that joined, so a new request joins at the next step and a long prompt never stalls the
others by more than a chunk. Each sequence has its own sampler (temperature, top-p/k, min-p) and logits
processors (logit bias, repetition/presence/frequency penalties, and a keeper of the raw logits when it
asks for logprobs), its own detokenizer, stop-string scanner, token limit and stats.

Runs alone: a request with a `seed`. mlx samples from one global random state, so a seeded stream is
only reproducible when nothing else draws from it; such a request waits until the running ones end,
and nothing joins it (`can_admit`). Grammars and JSON-schema output are refused as on the single
path (MLX has no constrained decoding). A model whose KV cache cannot be batched (a cache type without
`merge` in mlx-lm), or an mlx-lm older than the per-sequence BatchGenerator (samplers, logits processors,
stop sequences and caches per sequence; 0.32 has them), gets no batched path at all (`open_batch`
returns None; the engine runs one request at a time).

Prompt cache: a finished sequence's KV cache stays with its slot (BatchGenerator hands it back per
sequence), so the next request sharing its prefix reads only the rest: its trimmed cache is passed to
BatchGenerator.insert. A free slot's cache is copied for a request that shares a longer prefix with it
than its own slot, and caches evicted from slots are kept in a byte-budgeted RAM cache (slots.PromptCache).

At temperature 0 a batched sequence gives the tokens it gives alone on the single path (logprobs too):
padded positions are masked out and each row of a matrix product is computed as it is alone (the tests
check it on float32 and float16 weights on mlx's CPU backend; other backends are not checked here). On
that CPU backend a product over 4 rows costs about 4 times one row's, so batching gains little there.
"""

from __future__ import annotations

import copy
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.core.engines.base import Chunk, FinishReason, GenerateRequest, GenerationStats
from app.core.engines.decoding.sequence_state import SequenceState
from app.core.engines.decoding.sequences import PromptCache, Slot, drain, pick_slot
from app.core.engines.decoding.stops import StopScanner
from app.core.engines.errors import EngineError
from app.core.engines.mlx.batch_cache import SlotCaches
from app.core.engines.mlx.batch_images import ImageQueue, Waiting
from app.core.engines.mlx.sampling import build_sampling, logprobs_of
from app.core.native import import_native

logger = logging.getLogger(__name__)


def runs_alone(request: GenerateRequest) -> bool:
    """Whether a request must run with no other sequence beside it (see the module docstring)."""
    return request.sampling.seed is not None


@dataclass(frozen=True)
class Loaded:
    """What the batched path needs of the loaded MLX engine."""

    model: Any
    tokenizer: Any  # mlx-lm's TokenizerWrapper
    n_ctx: int
    prefill_step: int
    # A request's prompt tokens and, with images, what reads them (mlx.vision); or it raises.
    prepare: Callable[[GenerateRequest], tuple[list[int], Any]]
    token_bytes: Callable[[], Callable[[int], bytes]]  # for logprobs
    vision: Any = None  # mlx.vision.MlxVision when the model sees images


@dataclass(eq=False, kw_only=True)
class MlxSequence(SequenceState):
    """One generation in a slot, with what mlx-lm's BatchGenerator needs of it."""

    uid: int
    slot: Slot
    detok: Any
    stops: StopScanner
    alone: bool
    raw: deque[Any] | None  # each step's raw logits, oldest first, when it asks for logprobs
    keys: list[int] | None = None  # with images: the prompt as the caches compare it (each image its run)
    read: int = 0  # prompt tokens read before it joined the BatchGenerator (up to its last image)


def mlx_peak_memory() -> int:
    """The most memory MLX has held (0 where this mlx has no counter)."""
    return int(getattr(import_native("mlx.core"), "get_peak_memory", lambda: 0)())


class MlxSequences:
    """The SequenceRunner the MLX engine gives the host. Owned by the host thread, like the engine. A sequence
    waiting for its images to be read (batch_images) is in `_running` under a negative uid until it joins the
    BatchGenerator. What its slots' caches hold is `_kv`'s (batch_cache)."""

    def __init__(self, loaded: Loaded, n_slots: int, cache_bytes: int) -> None:
        gen_mod = import_native("mlx_lm.generate")
        self._loaded = loaded
        self._kv = SlotCaches(import_native("mlx_lm.models.cache"), loaded.model, n_slots, cache_bytes)
        self._gen = self._new_generator()
        eos = sorted(set(getattr(loaded.tokenizer, "eos_token_ids", None) or []))
        self._eos = frozenset(eos)
        # BatchGenerator drops a sequence at its end-of-generation token itself (one step sooner).
        self._stop_tokens = gen_mod.StopSequences([[t] for t in eos] or None)
        self._running: dict[int, MlxSequence] = {}  # by BatchGenerator uid
        self._images = ImageQueue(loaded.vision, loaded.prefill_step)
        self._samplers: dict[tuple[float, float, int, float], Any] = {}

    @property
    def slots(self) -> list[Slot]:
        return self._kv.slots

    @property
    def cache(self) -> PromptCache:
        """The RAM prompt cache."""
        return self._kv.cache

    # -- the host's interface ---------------------------------------------------------------------

    def free_slots(self) -> int:
        if any(s.alone for s in self._running.values()):
            return 0
        return sum(1 for s in self.slots if not s.busy)

    def active(self) -> int:
        return len(self._running)

    def can_admit(self, request: GenerateRequest) -> bool:
        return self.free_slots() > 0 and not (self._running and runs_alone(request))

    def shared(self, key: object) -> bool:
        return bool(getattr(key, "shared", False))

    def admit(self, request: GenerateRequest, cancel: Any) -> MlxSequence:
        """Check and start a request in a free slot; raises EngineError before anything runs."""
        start = time.perf_counter()
        ids, vision = self._loaded.prepare(request)
        if not self.can_admit(request):
            raise EngineError("every slot is busy" if self.free_slots() == 0 else "this request must run alone")
        picked = pick_slot(self.slots, ids)
        assert picked is not None  # free_slots() > 0
        slot, shared = picked
        cache, shared = self._kv.cache_for(slot, ids, shared)
        s = request.sampling
        alone = runs_alone(request)
        if alone:
            import_native("mlx.core").random.seed(s.seed)
        raw: deque[Any] | None = deque() if s.logprobs is not None else None
        sampler, processors = build_sampling(s, raw)
        # mlx-lm's samplers are stateless: sequences with the same settings share one, which
        # BatchGenerator then calls once for the whole batch instead of once a sequence.
        sampler = self._samplers.setdefault((s.temperature, s.top_p, s.top_k, s.min_p), sampler)
        limit = self._loaded.n_ctx - len(ids)
        if s.max_tokens is not None:
            limit = min(limit, s.max_tokens)
        stats = GenerationStats(prompt_tokens=len(ids))
        prompt = vision.ids if vision is not None else ids  # the model reads image positions as tokens

        def join(read: int) -> int:
            """Into the BatchGenerator, its first `read` tokens already in `cache`; returns its uid."""
            (uid,) = self._gen.insert(
                [prompt[read:]],
                max_tokens=[limit],
                caches=[cache],
                all_tokens=[list(prompt[:read])],
                samplers=[sampler],
                logits_processors=[processors],
                stop_sequences=[self._stop_tokens],
            )
            return int(uid)

        slot.busy = True
        slot.tokens = list(ids[:shared])
        detok = copy.copy(self._loaded.tokenizer.detokenizer)  # older mlx-lm hands out one shared instance
        detok.reset()
        seq = MlxSequence(
            uid=0,
            slot=slot,
            sampling=s,
            cancel=cancel,
            start=start,
            stats=stats,
            detok=detok,
            stops=StopScanner(s.stop),
            alone=alone,
            raw=raw,
            keys=ids if vision is not None else None,
        )
        logger.debug("slot %d: %d of %d prompt tokens cached", slot.seq_id, shared, len(ids))
        if vision is not None and shared < vision.end():
            # Its images are read at steps of their own (_join_waiting), under a uid no generator gives.
            seq.uid = min([0, *self._running]) - 1
            self._images.add(Waiting(seq, vision, cache, shared, join, at=shared))
        else:
            seq.uid = join(shared)
        self._running[seq.uid] = seq
        return seq

    def step(self) -> list[tuple[object, Chunk]]:
        """One BatchGenerator step (and before it, the images of at most one prompt waiting for them read);
        the chunks it produced, in order."""
        for seq in list(self._running.values()):
            if seq.cancel.is_set():
                self._end(seq, "cancelled")
        self._join_waiting()
        ended = self._collect()  # the cancelled ones' last chunks
        if not any(uid >= 0 for uid in self._running):
            return ended
        if len(self._running) > 1:
            for seq in self._running.values():
                seq.shared = True
        began = time.perf_counter()
        try:
            prompt_responses, responses = self._gen.next()
        except Exception as exc:  # the batch's state is unknown now: end every sequence, drop every cache
            logger.exception("MLX batched step failed")
            for seq in list(self._running.values()):
                self._end(seq, "error", f"MLX generation failed: {type(exc).__name__}: {exc}", gone=True)
            self._reset()
            return ended + self._collect()
        took = time.perf_counter() - began
        for seq in self._running.values():
            if not seq.first_token_at:
                seq.prefill_s += took
        for p in prompt_responses:
            found = self._running.get(p.uid)
            if found is not None:
                found.stats.prompt_tokens_evaluated = found.read + int(p.progress[0])
        for r in responses:
            found = self._running.get(r.uid)
            if found is not None and not found.done:
                self._token(found, r)
        return ended + self._collect()

    def abort(self, key: object) -> None:
        """End a sequence now, its chunks unread (a direct caller that stopped reading)."""
        if isinstance(key, MlxSequence) and not key.done:
            self._end(key, "cancelled")
            key.out.clear()
            self._running.pop(key.uid, None)

    def forget(self) -> None:
        """Drop every cached prompt (the free slots' caches and the RAM cache): the next prompt is read whole.
        Call it with no sequence running."""
        self._kv.forget()

    def close(self) -> None:
        self._running.clear()
        self._images.clear()
        self._kv.clear()
        self._gen.close()

    def run_one(self, request: GenerateRequest, cancel: Any) -> Iterator[Chunk]:
        """`Engine.generate` on a batched engine: this request alone (the host batches)."""
        return drain(self.step, self.abort, self.admit(request, cancel))

    def _new_generator(self) -> Any:
        n = len(self.slots)
        return import_native("mlx_lm.generate").BatchGenerator(
            self._loaded.model,
            completion_batch_size=n,
            prefill_batch_size=n,  # every prompt that joins is read beside the others, chunk by chunk
            prefill_step_size=self._loaded.prefill_step,
        )

    def _reset(self) -> None:
        self._images.clear()
        self._gen.close()
        self._gen = self._new_generator()
        self._kv.clear()

    def _join_waiting(self) -> None:
        """Read the next chunk of the oldest prompt waiting for its images; once its last image is read, it
        joins the BatchGenerator."""
        got = self._images.read()
        if got is None or got.outcome == "reading":
            return
        w = got.waiting
        seq = w.seq
        if got.outcome == "error":
            self._end(seq, "error", got.error)
        elif got.outcome == "cancelled":
            self._end(seq, "cancelled")
        else:
            del self._running[seq.uid]
            seq.uid, seq.read = w.join(w.at), w.at - w.shared
            seq.slot.tokens = list(w.vision.keys[: w.at])
            self._running[seq.uid] = seq

    # -- one token --------------------------------------------------------------------------------

    def _token(self, seq: MlxSequence, r: Any) -> None:
        token = int(r.token)
        logits = seq.raw.popleft() if seq.raw else None  # the keeper runs once per sampled token, in order
        seq.sampled()
        stats = seq.stats
        gone = r.finish_reason is not None  # BatchGenerator has dropped it and handed back its cache
        if gone:
            self._kv.keep(seq.slot, r.prompt_cache, r.all_tokens, seq.keys)
        if token in self._eos:
            self._end(seq, "stop", gone=gone)
            return
        stats.generated_tokens += 1
        seq.detok.add_token(token)
        text = seq.stops.feed(seq.detok.last_segment)
        if seq.sampling.logprobs is None or logits is None:
            seq.out.append(Chunk(text=text, token=token))
        else:
            lp = logprobs_of(logits, token, seq.sampling.logprobs, self._loaded.token_bytes())
            seq.out.append(Chunk(text=text, token=token, logprobs=lp))
        if seq.stops.hit is not None:
            self._end(seq, "stop", gone=gone)
        elif gone:
            self._end(seq, "length", gone=True)

    def _end(self, seq: MlxSequence, reason: FinishReason, error: str | None = None, *, gone: bool = False) -> None:
        if seq.done:
            return
        seq.done = True
        if not gone and seq.uid < 0:  # it never joined: its cache holds a part of its images at most
            self._kv.keep(seq.slot, None, None, seq.keys)
        elif not gone:
            # Its cache is worth keeping only once its prompt is read (mid-prompt it may be padded).
            caches = self._gen.remove([seq.uid], return_prompt_caches=bool(seq.first_token_at))
            cache, tokens = caches.get(seq.uid, (None, None))
            self._kv.keep(seq.slot, cache, tokens, seq.keys)
        tail = ""
        if reason != "cancelled" or seq.stats.generated_tokens:
            seq.detok.finalize()
            tail = seq.stops.feed(seq.detok.last_segment) if seq.stops.hit is None else ""
        tail += seq.stops.flush()
        hit = seq.stops.hit if reason == "stop" else None
        seq.finish(reason, tail, peak_memory=mlx_peak_memory(), error=error, stop=hit)

    def _collect(self) -> list[tuple[object, Chunk]]:
        out: list[tuple[object, Chunk]] = []
        for seq in self._running.values():
            out.extend((seq, c) for c in seq.out)
            seq.out.clear()
        self._running = {uid: s for uid, s in self._running.items() if not s.done}
        return out


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def open_batch(loaded: Loaded, slots: int, cache_bytes: int) -> MlxSequences | None:
    """The batched path for a loaded model, or None when mlx-lm cannot batch this model's KV cache."""
    gen_mod = import_native("mlx_lm.generate")
    cache_mod = import_native("mlx_lm.models.cache")
    batcher = getattr(gen_mod, "BatchGenerator", None)
    wanted = {"caches", "all_tokens", "samplers", "logits_processors", "stop_sequences"}
    if batcher is None or not hasattr(gen_mod, "StopSequences") or not wanted <= _parameters(batcher.insert):
        logger.warning("this mlx-lm has no per-sequence BatchGenerator (0.32 has); it runs one request at a time")
        return None
    if not all(hasattr(c, "merge") for c in cache_mod.make_prompt_cache(loaded.model)):
        logger.warning("mlx-lm cannot batch this model's KV cache; it runs one request at a time")
        return None
    logger.info("MLX: %d sequences decode together", slots)
    return MlxSequences(loaded, slots, cache_bytes)
