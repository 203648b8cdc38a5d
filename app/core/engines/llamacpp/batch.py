"""Continuous batching for the llama.cpp engine: one context holding `slots` sequences, advanced together.

Each `step` builds one llama_batch: the next token of every sequence that is decoding, then prompt tokens
of the sequences still reading their prompt, oldest first, up to n_batch in all. So a new prompt joins
at the next step and a long one is read one chunk per step while the others keep streaming. Every
sequence has its own sampler chain (grammar and penalties included), stop-string scanner and stats.
The KV cache is either one stream per slot (each its own cells) or unified (n_ctx cells shared; a free
slot's cached tokens are dropped, least recently used first, when a running sequence needs their cells).
Either way a free slot keeps its tokens as the prompt cache. The rows decoded together change a token's
logits in their last bits (llama.cpp's kernels are not batch-invariant); a deterministic load decodes each
sequence on its own instead (llamacpp.exact). An image in a prompt is encoded into its slot's cells whole, at
a step of its own (one image a step, the oldest waiting sequence's), while the others read and decode text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.engines.base import Chunk, GenerationStats, Logprobs, SamplingParams
from app.core.engines.decoding.sequence_state import SequenceState
from app.core.engines.decoding.sequences import PromptCache, Slot, pick_slot
from app.core.engines.decoding.speculative import SeqDrafts, Speculator
from app.core.engines.errors import EngineError
from app.core.engines.inputs.images import is_image, text_run
from app.core.engines.llamacpp.cpu_share import CpuShare
from app.core.engines.llamacpp.exact import ExactDecoding
from app.core.engines.llamacpp.grammar import GRAMMAR_TOKEN_BUDGET_S, GrammarSampler, GrammarTooSlow, SamplingCancelled
from app.core.engines.llamacpp.logits import LogitRows
from app.core.engines.llamacpp.options import TextStream, build_sampler, peak_memory_bytes, plain_greedy
from app.core.engines.llamacpp.slot_cache import SlotCache, next_pos
from app.core.native import import_native

logger = logging.getLogger(__name__)


@dataclass(eq=False, kw_only=True)
class BatchSequence(SequenceState):
    """One generation in a slot, with what llama.cpp's batched decode needs of it."""

    slot: Slot
    sampler: Any  # the sampler chain, a GrammarSampler, or None for plain greedy (LogitRows.argmax)
    stream: TextStream
    visible: frozenset[int]
    pending: list[int]  # prompt tokens not yet evaluated
    order: int  # admission order: prompt chunks go to the oldest first
    next_token: int | None = None  # sampled, to be decoded at the next step
    logits_at: int = -1  # this step's batch index of its output, -1: none
    drafts: SeqDrafts | None = None  # with speculative decoding
    media: dict[int, Any] | None = None  # the images' chunks by their runs' id (llamacpp.vision)


class BatchRunner:
    """The slots' sequences, advanced a step at a time; what their slots' cells hold is `cells`' (slot_cache).
    Owned by the engine host's thread, like the engine that made it."""

    def __init__(
        self,
        lib: Any,
        llm: Any,
        ctx: Any,
        n_slots: int,
        n_batch: int,
        piece: Callable[[Any, int, bool], bytes],
        seed: int | None,
        unified: bool = False,
        cache_bytes: int = 0,
        speculator: Speculator | None = None,
        deterministic: bool = False,
        cpu_share: CpuShare | None = None,
    ) -> None:
        """`deterministic`: each sequence decoded on its own, prompts in aligned chunks (llamacpp.exact).
        `cpu_share`: a step's threads as the machine's other work leaves the cores (None: the context's
        own, always)."""
        self._lib = lib
        self._llm = llm
        self._ctx = ctx
        self._memory = lib.llama_get_memory(ctx.ctx)
        self.n_ctx = int(lib.llama_n_ctx(ctx.ctx))  # cells in all
        self.unified = unified
        # The most one sequence may hold: all the cells when shared, its own stream's otherwise.
        self.n_ctx_seq = self.n_ctx if unified else int(lib.llama_n_ctx_seq(ctx.ctx))
        self.n_batch = max(1, n_batch)
        self.cells = SlotCache(
            lib, ctx, self._memory, n_slots, n_ctx=self.n_ctx, unified=unified, cache_bytes=cache_bytes
        )
        self._piece = piece
        self._seed = seed
        self._vocab = llm._model.vocab
        self._rows = LogitRows(lib, ctx.ctx, int(llm.n_vocab()), keep=2 * self.n_batch)
        self._batch = import_native("llama_cpp._internals").LlamaBatch(
            n_tokens=self.n_batch, embd=0, n_seq_max=1, verbose=False
        )
        self._running: list[BatchSequence] = []
        self._order = 0
        self.speculator = speculator
        self.deterministic = deterministic
        self.exact = ExactDecoding(max(1, int(lib.llama_n_ubatch(ctx.ctx))))  # used when deterministic
        self.grammar_budget_s = GRAMMAR_TOKEN_BUDGET_S  # per token, for sequences under a grammar
        self._vision: Any = None
        # Where the chat template's turn ends, for Hearth's own templates (chat_formats): every reply stops
        # there, and reports it as the model's own end, not as a stop sequence the caller asked for.
        self.turn_ends: tuple[str, ...] = ()
        self.cpu_share = cpu_share
        self._threads = 0  # as last set on the context (0: as it was opened)

    @property
    def vision(self) -> Any:
        """A llamacpp.vision.Projector when the model sees images (set once its projector is open)."""
        return self._vision

    @vision.setter
    def vision(self, projector: Any) -> None:
        self._vision = projector
        self.cells.vision = projector  # its images' positions are what the slots' cells hold

    @property
    def slots(self) -> list[Slot]:
        return self.cells.slots

    @property
    def cache(self) -> PromptCache:
        """The RAM prompt cache."""
        return self.cells.cache

    # -- the host's interface ---------------------------------------------------------------------

    def free_slots(self) -> int:
        return sum(1 for s in self.slots if not s.busy)

    def active(self) -> int:
        return len(self._running)

    def shared(self, key: object) -> bool:
        return bool(getattr(key, "shared", False))

    def admit(
        self,
        tokens: list[int],
        sampling: SamplingParams,
        grammar: Any,
        visible: frozenset[int],
        cancel: Any,
        start: float,
        media: dict[int, Any] | None = None,
    ) -> BatchSequence:
        """Take a free slot for an already checked prompt; its cached prefix is kept, the rest dropped."""
        picked = pick_slot(self.slots, tokens)
        if picked is None:
            raise EngineError("every slot is busy")
        slot, shared = picked
        if self.deterministic:
            shared = self.exact.shared(slot, tokens)
        else:
            shared = self.cells.reuse(slot, tokens, shared)
        if shared >= len(tokens):
            shared = len(tokens) - 1  # re-read the last prompt token: fresh logits to sample from
        if shared < len(slot.tokens):
            self.cells.cut(slot, shared)
        seed = sampling.seed if sampling.seed is not None else self._seed
        seed = seed if seed is not None else self._lib.LLAMA_DEFAULT_SEED
        greedy = plain_greedy(sampling, grammar)
        if greedy:
            sampler = None
        elif grammar is not None:
            sampler = GrammarSampler(self._lib, self._llm, sampling, grammar, seed, self.grammar_budget_s)
        else:
            sampler = build_sampler(self._lib, self._llm, sampling, seed)
        slot.busy = True
        self._order += 1
        seq = BatchSequence(
            slot=slot,
            sampling=sampling,
            cancel=cancel,
            start=start,
            sampler=sampler,
            stream=TextStream([*sampling.stop, *self.turn_ends]),
            visible=visible,
            pending=list(tokens[shared:]),
            stats=GenerationStats(prompt_tokens=len(tokens)),
            order=self._order,
            # A draft model cannot read the images: a prompt with them decodes one token a step.
            drafts=self.speculator.start(slot.seq_id, tokens) if self.speculator is not None and not media else None,
            media=media or None,
        )
        logger.debug("slot %d: %d of %d prompt tokens cached", slot.seq_id, shared, len(tokens))
        self._running.append(seq)
        return seq

    def step(self) -> list[tuple[object, Chunk]]:
        """One decode for every running sequence; the chunks it produced, in order."""
        for seq in list(self._running):
            if seq.cancel.is_set():
                self._end(seq, "cancelled")
        if self.vision is not None:
            self._read_image()
        began = time.perf_counter()
        batch = self._fill() if self._running else []
        decoding_only = all(s.next_token is not None for s, _, _ in batch)
        if batch and self.deterministic:
            self.exact.decode_each(batch, self._decode)
        elif batch:
            self._decode(batch)
        out: list[tuple[object, Chunk]] = []
        for seq in self._running:
            out.extend((seq, c) for c in seq.out)
            seq.out.clear()
        if self.speculator is not None and batch and decoding_only and not any(s.done for s, _, _ in batch):
            # A decoding-only step: what a step of this many tokens costs ("auto" sizes drafts by it).
            self.speculator.record(sum(n for _, n, _ in batch), time.perf_counter() - began)
        self._running = [s for s in self._running if not s.done]
        return out

    def abort(self, key: object) -> None:
        """End a sequence now, its chunks unread (a direct caller that stopped reading)."""
        for seq in self._running:
            if seq is key:
                self._end(seq, "cancelled")
        self._running = [s for s in self._running if not s.done]

    def forget(self) -> None:
        """Drop every cached prompt (the free slots' KV cells and the RAM cache)."""
        self.cells.forget()

    def close(self) -> None:
        for seq in self._running:
            if seq.sampler is not None:
                seq.sampler.close()
        self._running = []
        self._batch.close()
        if self.speculator is not None:
            self.speculator.close()

    # -- one step ---------------------------------------------------------------------------------

    def _fill(self) -> list[tuple[BatchSequence, int, bool]]:
        """Plan this step's batch as (sequence, tokens taken, wants logits), making room in the KV cache:
        idle slots' cached tokens go first (least recently used first), then the newest decoding
        sequences end with "length" when the shared context is full."""
        if len(self._running) > 1:
            for s in self._running:
                s.shared = True
        if self.deterministic:
            return self.exact.plan(self._running, self.n_batch)
        decoding = [s for s in self._running if s.next_token is not None]
        reading = sorted((s for s in self._running if s.pending), key=lambda s: s.order)
        budget = self.n_batch - len(decoding)
        if self.speculator is not None and decoding:
            # Drafts get what the next tokens leave, half of it while a prompt is read (its chunk, the rest).
            room = budget // 2 if reading else budget
            budget -= self.speculator.plan([(s.drafts, self._draft_cap(s)) for s in decoding if s.drafts], room)
        plan: list[tuple[BatchSequence, int, bool]] = [
            (s, 1 + len(s.drafts.draft if s.drafts else ()), True) for s in decoding
        ]
        for seq in reading:
            if budget <= 0:
                break
            if is_image(seq.pending[0]):
                continue  # read by _read_image, one image a step
            take = min(budget, len(seq.pending), text_run(seq.pending))
            plan.append((seq, take, take == len(seq.pending)))
            budget -= take
        if not self.unified:
            return plan  # each slot has its own n_ctx_seq cells: a sequence ends at its own limit (_sample)
        need = sum(n for _, n, _ in plan)
        free = self.cells.free_cells(need)
        if need > free and self.speculator is not None:  # no drafts before anyone has to give way
            for s in decoding:
                if s.drafts:
                    s.drafts.draft = []
            plan = [(s, 1 if s.next_token is not None else n, lg) for s, n, lg in plan]
            need = sum(n for _, n, _ in plan)
        while need > free and plan:
            # The newest gives way first: the oldest keep going, so none starves.
            seq, n, _ = max(plan, key=lambda p: p[0].order)
            plan = [p for p in plan if p[0] is not seq]
            need -= n
            if seq.next_token is not None:
                self._end(seq, "length")
            elif not any(s.next_token is not None for s in self._running if not s.done and s is not seq):
                # Nothing running will finish and free cells: this prompt cannot be read now.
                self._end(seq, "error", "the context is full with other conversations; try again shortly")
            # else its chunk only waits for a decoding sequence to finish
            free += self.cells.evict_idle(need - free) if need > free else 0
        return plan

    def _read_image(self) -> None:
        """Encode the oldest pending image of a sequence whose text before it is read, into its cells (one image
        a step: the other sequences read and decode text in the step's batch)."""
        waiting = [s for s in self._running if s.pending and is_image(s.pending[0]) and not s.cancel.is_set()]
        if not waiting:
            return
        seq = min(waiting, key=lambda s: s.order)
        media = (seq.media or {})[seq.pending[0]]
        if self.unified and media.n_tokens > self.cells.free_cells(media.n_tokens):
            self._end(seq, "error", "the context is full with other conversations; try again shortly")
            return
        if not self.unified and len(seq.slot.tokens) + media.n_tokens >= self.n_ctx_seq:
            self._end(seq, "length")
            return
        began = time.perf_counter()
        slot = seq.slot
        try:
            encoded = self.vision.evaluate(media, self._ctx.ctx, next_pos(slot), slot.seq_id, self.n_batch)
        except EngineError as exc:
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, next_pos(slot), -1)
            self._end(seq, "error", str(exc))
            return
        slot.tokens.extend(seq.pending[: media.n_tokens])
        slot.pos_gap += media.n_tokens - media.n_pos
        del seq.pending[: media.n_tokens]
        took = time.perf_counter() - began
        seq.stats.prompt_tokens_evaluated += media.n_tokens
        seq.stats.images_encoded += 1
        seq.stats.image_s += took
        seq.stats.image_encode_s += encoded
        seq.prefill_s += took

    def _set_threads(self) -> None:
        """The step's threads, prompt and decode alike, as the CPU share gives them."""
        if self.cpu_share is None:
            return
        n = self.cpu_share.threads_now()
        if n != self._threads:
            self._lib.llama_set_n_threads(self._ctx.ctx, n, n)
            self._threads = n

    def _draft_cap(self, seq: BatchSequence) -> int:
        """Drafts that could all be kept: within the sequence's context and its max_tokens."""
        cap = self.n_ctx_seq - len(seq.slot.tokens) - 2
        if seq.sampling.max_tokens is not None:
            cap = min(cap, seq.sampling.max_tokens - seq.stats.generated_tokens - 1)
        return cap

    def _decode(self, plan: list[tuple[BatchSequence, int, bool]]) -> None:
        b = self._batch.batch
        i = 0
        for seq, n, logits in plan:
            slot = seq.slot
            every = seq.next_token is not None  # the next token and its drafts: logits at each
            if every:
                toks = [seq.next_token, *(seq.drafts.draft if seq.drafts else ())]
            else:
                toks = seq.pending[:n]
            pos = next_pos(slot)
            for k, tok in enumerate(toks):
                b.token[i] = tok
                b.pos[i] = pos + k
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = slot.seq_id
                b.logits[i] = every
                i += 1
            b.logits[i - 1] = logits
            seq.logits_at = i - len(toks) if every else (i - 1 if logits else -1)
        b.n_tokens = i
        self._set_threads()
        began = time.perf_counter()
        rc = self._lib.llama_decode(self._ctx.ctx, b)
        took = time.perf_counter() - began
        if rc != 0:
            logger.warning("llama_decode returned %d for a batch of %d tokens", rc, i)
            for seq, _, _ in plan:
                # Whatever part of the batch llama.cpp kept is dropped, so the slot matches its tokens.
                self._lib.llama_memory_seq_rm(self._memory, seq.slot.seq_id, next_pos(seq.slot), -1)
                self._end(seq, "error", f"generation failed: llama_decode returned {rc}")
            return
        for seq, n, _ in plan:
            if seq.next_token is not None:
                seq.slot.tokens.append(seq.next_token)
                seq.next_token = None
            else:
                seq.slot.tokens.extend(seq.pending[:n])
                del seq.pending[:n]
                seq.stats.prompt_tokens_evaluated += n
                seq.prefill_s += took
        for seq, _, _ in plan:
            if seq.logits_at >= 0 and not seq.done:
                try:
                    self._sample(seq)
                except SamplingCancelled:
                    self._end(seq, "cancelled")
                except GrammarTooSlow as exc:  # the request's grammar, not the engine: a warning
                    logger.warning("%s", exc)
                    self._end(seq, "error", str(exc), code=exc.code)
                except Exception as exc:  # a sampler failure ends that stream, not the others
                    logger.exception("sampling failed")
                    self._end(seq, "error", f"generation failed: {exc}")

    def _sample(self, seq: BatchSequence) -> None:
        """The next token, or with drafts in the batch, tokens while they equal the drafts (speculative.py)."""
        draft = seq.drafts.draft if seq.drafts else []
        if not draft:
            self._sample_at(seq, seq.logits_at)
            return
        assert seq.drafts is not None
        accepted = 0
        try:
            for i in range(len(draft) + 1):
                token = self._sample_at(seq, seq.logits_at + i)
                if i == len(draft) or token != draft[i]:
                    break
                accepted += 1
                if seq.done:
                    break
                seq.slot.tokens.append(token)  # the draft's cell holds it: context for the next one
                seq.next_token = None
        finally:
            # The cells of the drafts not kept go, so the sequence holds exactly its tokens.
            self._lib.llama_memory_seq_rm(self._memory, seq.slot.seq_id, next_pos(seq.slot), -1)
        seq.stats.draft_tokens += len(draft)
        seq.stats.draft_accepted += accepted
        if self.speculator is not None:
            self.speculator.checked(seq.drafts, len(draft), accepted)
        seq.drafts.draft = []

    def _sample_at(self, seq: BatchSequence, at: int) -> int | None:
        """Sample at batch index `at` and emit the token; None when the sequence ended without one."""
        sp = seq.sampling
        if len(seq.slot.tokens) >= self.n_ctx_seq:
            self._end(seq, "length")
            return None
        if seq.sampler is None:
            token = self._rows.argmax(at)
        elif isinstance(seq.sampler, GrammarSampler):
            token = seq.sampler.sample(self._ctx.ctx, at, seq.cancel)
        else:
            token = int(self._lib.llama_sampler_sample(seq.sampler.sampler, self._ctx.ctx, at))
        seq.sampled()
        if self._lib.llama_vocab_is_eog(self._vocab, token):
            self._end(seq, "stop")
            return None
        seq.stats.generated_tokens += 1
        if seq.drafts is not None:
            seq.drafts.index.extend([token])
        piece = self._piece(self._vocab, token, token in seq.visible)
        text = seq.stream.push(piece)
        if sp.logprobs is None:
            seq.out.append(Chunk(text=text, token=token))
        else:
            seq.out.append(Chunk(text=text, token=token, logprobs=self._logprobs(at, token, piece, sp.logprobs)))
        if seq.stream.stopped:
            self._end(seq, "stop")
        elif sp.max_tokens is not None and seq.stats.generated_tokens >= sp.max_tokens:
            self._end(seq, "length")
        else:
            seq.next_token = token
        return token

    def _logprobs(self, at: int, token: int, piece: bytes, n_top: int) -> Logprobs:
        from app.core.engines.decoding.logprobs import from_logits

        array = self._rows.row(at)
        return from_logits(array, token, piece, n_top, lambda i: self._piece(self._vocab, i, True))

    def _end(self, seq: BatchSequence, reason: str, error: str | None = None, code: str | None = None) -> None:
        if seq.done:
            return
        hit = seq.stream.hit if reason == "stop" and seq.stream.hit in seq.sampling.stop else None
        seq.finish(reason, seq.stream.flush(), peak_memory=peak_memory_bytes(), error=error, code=code, stop=hit)  # type: ignore[arg-type]
        seq.next_token = None
        seq.pending = []
        if seq.sampler is not None:
            seq.sampler.close()
