"""A draft model for speculative decoding on the batched llama.cpp path (speculative.py checks its drafts).

The draft model runs in its own context, one sequence per slot. Before drafting for a sequence its cells
are cut back to the longest prefix they share with the sequence's tokens (what the main model accepted)
and the rest is read; then it proposes k tokens greedily, all drafting sequences decoded in one batch
per drafted token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from app.core.engines.base import LoadSpec
from app.core.engines.decoding.sequences import common_prefix
from app.core.engines.decoding.speculative import SeqDrafts
from app.core.engines.errors import EngineError
from app.core.engines.llamacpp.logits import LogitRows
from app.core.engines.llamacpp.options import supports_extra_bufts_switch
from app.core.engines.llamacpp.validate import validated_gguf
from app.core.native import import_native

logger = logging.getLogger(__name__)

# Token ids compared between the two vocabularies (besides their sizes and BOS/EOS): spread over the range.
VOCAB_PROBES = 64


def check_same_vocab(main: Any, draft: Any, name: str) -> None:
    """Raise EngineError unless the draft model's tokens are the main model's (a draft's token ids must
    mean the same text)."""
    n_main, n_draft = int(main.n_vocab()), int(draft.n_vocab())
    if n_main != n_draft:
        raise EngineError(
            f"the draft model {name} has a vocabulary of {n_draft} tokens, the model {n_main}: a draft model "
            "must share the model's tokenizer (pick one from the same family)"
        )
    if (main.token_bos(), main.token_eos()) != (draft.token_bos(), draft.token_eos()):
        raise EngineError(f"the draft model {name} has other BOS/EOS tokens than the model: it cannot draft for it")
    step = max(1, n_main // VOCAB_PROBES)
    for token in range(0, n_main, step):
        if main.token_get_text(token) != draft.token_get_text(token):
            raise EngineError(
                f"the draft model {name} spells token {token} differently from the model: its vocabulary is "
                "another one, so it cannot draft for it"
            )


class ModelDrafter:
    """Greedy drafts from a small model; owned by the BatchRunner (the host thread)."""

    def __init__(self, lib: Any, llm: Any, spec: LoadSpec) -> None:
        assert spec.draft_model is not None
        path = Path(spec.draft_model)
        validated_gguf(path)  # the draft model reaches llama.cpp too: the same checks as the model
        internals = import_native("llama_cpp._internals")
        self._lib = lib
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = spec.n_gpu_layers
        mparams.use_mmap = spec.use_mmap
        if supports_extra_bufts_switch(lib):
            mparams.use_extra_bufts = spec.extra_bufts  # the canary's verdict holds for the draft model too
        try:
            self._model = internals.LlamaModel(path_model=str(path), params=mparams, verbose=False)
        except Exception as exc:  # ValueError: a missing or unreadable file
            raise EngineError(f"llama.cpp could not load the draft model {path.name}: {exc}") from exc
        try:
            check_same_vocab(llm._model, self._model, path.name)
            params = type(llm.context_params).from_buffer_copy(llm.context_params)  # same threads
            params.n_ctx = spec.n_ctx * spec.slots
            params.n_batch = min(spec.n_batch, spec.n_ctx)
            params.n_ubatch = min(spec.n_ubatch, params.n_batch)
            params.n_seq_max = spec.slots
            params.kv_unified = False
            self._ctx = internals.LlamaContext(model=self._model, params=params, verbose=False)
        except Exception as exc:
            self._model.close()
            if isinstance(exc, EngineError):
                raise
            raise EngineError(f"llama.cpp could not open a context for the draft model: {exc}") from exc
        self.n_batch = int(params.n_batch)
        self._rows = LogitRows(lib, self._ctx.ctx, int(self._model.n_vocab()), keep=2 * self.n_batch)
        self._batch = internals.LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1, verbose=False)
        self._memory = lib.llama_get_memory(self._ctx.ctx)
        self._held: dict[int, list[int]] = {}  # per slot: the tokens its draft cells hold
        logger.info("draft model %s loaded for speculative decoding", path.name)

    def propose(self, wanted: list[tuple[SeqDrafts, int]]) -> list[list[int]]:
        # Bring each sequence's cells up to its tokens; the last one is read in the first drafting batch.
        feeds: list[list[int]] = []
        for state, _ in wanted:
            held = self._held.setdefault(state.seq_id, [])
            history = state.index.tokens
            keep = min(common_prefix(held, history), len(history) - 1)
            if keep < len(held):
                self._lib.llama_memory_seq_rm(self._memory, state.seq_id, keep, -1)
                del held[keep:]
            rest = history[keep:-1]
            for i in range(0, len(rest), self.n_batch):
                if not self._decode([(state.seq_id, len(held), rest[i : i + self.n_batch])], logits=False):
                    raise EngineError("the draft model could not read the prompt")
                held.extend(rest[i : i + self.n_batch])
            feeds.append([history[-1]])
        drafts: list[list[int]] = [[] for _ in wanted]
        live = list(range(len(wanted)))
        while live:
            # One token per live sequence (a batch of them at most n_batch; drafts are short).
            live = live[: self.n_batch]
            items = [(wanted[j][0].seq_id, len(self._held[wanted[j][0].seq_id]), feeds[j]) for j in live]
            if not self._decode(items, logits=True):
                break
            for row, j in enumerate(live):
                seq_id = wanted[j][0].seq_id
                self._held[seq_id].extend(feeds[j])
                token = self._rows.argmax(row)
                drafts[j].append(token)
                feeds[j] = [token]
            live = [j for j in live if len(drafts[j]) < wanted[j][1]]
        return drafts

    def _decode(self, items: list[tuple[int, int, list[int]]], logits: bool) -> bool:
        """Decode (seq id, first position, tokens) items; logits at each item's last token."""
        b = self._batch.batch
        i = 0
        for seq_id, pos, toks in items:
            for k, tok in enumerate(toks):
                b.token[i] = tok
                b.pos[i] = pos + k
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq_id
                b.logits[i] = logits and k == len(toks) - 1
                i += 1
        b.n_tokens = i
        rc = self._lib.llama_decode(self._ctx.ctx, b)
        if rc != 0:
            logger.warning("the draft model's llama_decode returned %d; its cells are dropped", rc)
            for seq_id, _, _ in items:
                self._lib.llama_memory_seq_rm(self._memory, seq_id, 0, -1)
                self._held[seq_id] = []
            return False
        return True

    def close(self) -> None:
        self._batch.close()
        self._ctx.close()
        self._model.close()
