"""Reproducible replies on the batched llama.cpp path (LoadSpec.deterministic): every token of a sequence is
computed by the same kernels on the same rows, whatever runs beside it and whatever its slot held before.

llama.cpp's kernels are not batch-invariant. On a CPU a matrix product of one row takes ggml's vec_dot and one
of two or more rows llamafile's tinyBLAS (F16, Q8_0, Q4_0 weights), the repacked and AMX kernels tile rows by
fours or sixteens, and llama.cpp splits a batch of several sequences into micro-batches by their tokens. So a
token's logits differ in their last bits with the rows decoded beside it, and a near-tie at temperature 0 can
flip (llama-server's README says as much of its prompt cache). In this mode the runner therefore:

- decodes each sequence in a llama_decode of its own: one token a step while it generates, never drafts;
- reads a prompt in chunks of n_ubatch tokens aligned to its start, each chunk whole (never cut by the step's
  budget), so the same prompt meets the same micro-batches;
- reuses a slot's cached tokens only as far as they were read in such whole chunks (the rest is read again,
  the last prompt token included), and restores nothing from the RAM cache or another slot.

Needs each slot's own KV cells (kv_unified off): in a shared cache another sequence's cells sit between a
sequence's own, and the order its attention sums them in would depend on who ran beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.engines.decoding.sequences import Slot, common_prefix
from app.core.engines.inputs.images import image_start, is_image, text_run

# A step's plan: (sequence, tokens taken, wants logits), as BatchRunner._fill makes it.
Plan = list[tuple[Any, int, bool]]


class ExactDecoding:
    """A deterministic BatchRunner's prompt chunks and what each slot holds exactly. Owned by the engine host's
    thread, like the BatchRunner that holds it."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk  # the context's n_ubatch: a prompt is read in chunks of it, aligned to its start
        # Per slot (seq id): how many of its leading tokens were read in whole aligned chunks, so hold exactly
        # what reading them again would compute.
        self._exact: dict[int, int] = {}

    def shared(self, slot: Slot, tokens: list[int]) -> int:
        """The prefix of `tokens` that `slot` keeps: what it holds exactly, in whole chunks, short of the last
        token (whose logits are computed again, in its chunk)."""
        n = min(common_prefix(slot.tokens, tokens), self._exact.get(slot.seq_id, 0), len(tokens) - 1)
        n = image_start(tokens, n - n % self.chunk)
        self._exact[slot.seq_id] = n
        return n

    def plan(self, running: list[Any], n_batch: int) -> Plan:
        """This step's (sequence, tokens, wants logits): every decoding sequence's next token, then the next
        aligned chunk of the oldest prompt, and of the next ones while they fit in n_batch."""
        decoding = [s for s in running if s.next_token is not None]
        plan: Plan = [(s, 1, True) for s in decoding]
        budget = n_batch - len(decoding)
        reading = False
        for seq in sorted((s for s in running if s.pending), key=lambda s: s.order):
            if is_image(seq.pending[0]):
                continue  # read by _read_image, one image a step
            take = min(len(seq.pending), text_run(seq.pending), self.chunk - len(seq.slot.tokens) % self.chunk)
            if reading and take > budget:
                break  # the oldest reads its chunk whatever the budget: a chunk is never cut to fit
            plan.append((seq, take, take == len(seq.pending)))
            budget -= take
            reading = True
        return plan

    def decode_each(self, plan: Plan, decode: Callable[[Plan], None]) -> None:
        """Decode the step's sequences one `decode` (the runner's llama_decode of a plan) each; a whole aligned
        chunk read extends its slot's exact prefix."""
        for item in plan:
            seq = item[0]
            if seq.done:
                continue
            slot, reading = seq.slot, seq.next_token is None
            before = len(slot.tokens)
            decode([item])
            if reading and self._exact.get(slot.seq_id, 0) == before and len(slot.tokens) - before == self.chunk:
                self._exact[slot.seq_id] = len(slot.tokens)
