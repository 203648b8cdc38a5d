"""A draft model for the MLX engine's single-stream path: speculative decoding through mlx-lm's
`speculative_generate_step`, which checks the draft's tokens in one forward pass of the model and keeps
those the model's own sampler gives (so the reply is the one plain decoding gives).

The draft's KV cache is kept beside the model's, trimmed with it to the prefix a new prompt shares
(mlx.cache), and both read the prompt here, chunk by chunk, so a cancel is seen between chunks as on the
plain path.
mlx-lm's batched generation cannot draft: a load with a draft model runs one request at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from app.core.engines.errors import EngineError
from app.core.engines.mlx.cache import HeldCache
from app.core.native import import_native

logger = logging.getLogger(__name__)


def check_same_tokenizer(main: Any, draft: Any, name: str) -> None:
    """Raise EngineError unless the two Hugging Face tokenizers map the same texts to the same ids."""
    mine, theirs = main.get_vocab(), draft.get_vocab()
    if len(mine) != len(theirs):
        raise EngineError(
            f"the draft model {name} has a vocabulary of {len(theirs)} tokens, the model {len(mine)}: a draft "
            "model must share the model's tokenizer (pick one from the same family)"
        )
    if mine != theirs or main.eos_token_id != draft.eos_token_id:
        raise EngineError(f"the draft model {name} has another tokenizer than the model: it cannot draft for it")


class MlxDraft:
    """Owned by the MLX engine, on the host thread."""

    def __init__(self, folder: Path, main_tokenizer: Any, n_draft: int) -> None:
        from app.core.models.hf_config import check_no_remote_code

        folder = Path(folder).expanduser()
        if not (folder / "config.json").is_file():
            raise EngineError(f"the draft model {folder} is not an MLX model folder")
        try:
            import json

            check_no_remote_code(json.loads((folder / "config.json").read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot read the draft model's config.json: {exc}") from exc
        mlx_lm = import_native("mlx_lm")
        try:
            self.model, tokenizer = mlx_lm.load(str(folder))
        except Exception as exc:
            raise EngineError(f"MLX could not load the draft model {folder.name}: {exc}") from exc
        check_same_tokenizer(main_tokenizer, getattr(tokenizer, "_tokenizer", tokenizer), folder.name)
        self.name = folder.name
        self.n_draft = n_draft
        self.held = HeldCache(self.model)  # its KV cache, trimmed with the model's (mlx.cache.align)
        self.drafted = 0  # this generation's drafted and accepted tokens
        self.accepted = 0
        logger.info("MLX draft model %s loaded for speculative decoding", folder.name)

    def steps(
        self,
        model: Any,
        cache: list[Any],
        ids: list[int],
        reuse: int,
        *,
        sampler: Any,
        limit: int,
        prefill_step: int,
        progress: Callable[[int, int], None],
    ) -> Generator[int, None, None]:
        """The reply's tokens; both caches hold `ids[:reuse]` on entry. `progress(done, total)` is called
        between prompt chunks (it raises to cancel)."""
        mx = import_native("mlx.core")
        gen_mod = import_native("mlx_lm.generate")
        draft_cache = self.held.cache
        assert draft_cache is not None
        self.drafted = self.accepted = 0
        rest = ids[reuse:-1]
        for i in range(0, len(rest), prefill_step):
            chunk = mx.array(rest[i : i + prefill_step])[None]
            model(chunk, cache=cache)
            self.model(chunk, cache=draft_cache)
            mx.eval([c.state for c in (*cache, *draft_cache)])
            progress(reuse + i + chunk.shape[1], len(ids))
        steps = gen_mod.speculative_generate_step(
            mx.array(ids[-1:]),
            model,
            self.model,
            num_draft_tokens=self.n_draft,
            max_tokens=limit,
            sampler=sampler,
            prompt_cache=[*cache, *draft_cache],
            prefill_step_size=prefill_step,
        )
        emitted, new_round = 0, True
        try:
            for token, _logprobs, from_draft in steps:
                if new_round:  # each round drafts n tokens (fewer near the limit), then ends on one of the model's
                    self.drafted += min(self.n_draft, limit - emitted)
                new_round = not from_draft
                self.accepted += bool(from_draft)
                emitted += 1
                yield int(token)
        finally:
            steps.close()

    def close(self) -> None:
        self.held.forget()
        self.model = None


def untagged(tokens: Generator[int, None, None]) -> Generator[tuple[int, None], None, None]:
    """A draft's tokens as generate_step yields them, (token, logprobs); closing it closes theirs."""
    try:
        for token in tokens:
            yield token, None
    finally:
        tokens.close()
