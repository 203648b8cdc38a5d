"""What MlxSequences does with prompts that hold images (mlx_vision): a prompt whose images are not in its
cache waits, under a negative uid, for a step of its own, where its images are read into its cache with their
embeddings; then it joins the BatchGenerator, which reads the text after them. One such prompt a step, before
the step's decode, so several image requests arriving together never stall the others' streams for more than
one prompt's images at a time."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.engines.base import FinishReason, GenerationStats
from app.core.engines.errors import EngineError


@dataclass
class Waiting:
    seq: Any  # mlx_batch.MlxSequence
    vision: Any  # mlx_vision.VisionPrompt
    cache: list[Any]  # the KV cache it starts from, holding `shared` of its tokens
    shared: int
    join: Callable[[int], int]  # into the BatchGenerator with this many tokens read; returns its uid


class ImageJoining:
    """Mixed into MlxSequences, whose attributes these are."""

    _loaded: Any  # mlx_batch.Loaded
    _running: dict[int, Any]  # mlx_batch.MlxSequence by uid
    _waiting: deque[Waiting]

    if TYPE_CHECKING:

        def _end(self, seq: Any, reason: FinishReason, error: str | None = None, *, gone: bool = False) -> None: ...

    def _wait(self, seq: Any, vision: Any, cache: list[Any], shared: int, join: Callable[[int], int]) -> None:
        seq.uid = min([0, *self._running]) - 1
        self._waiting.append(Waiting(seq, vision, cache, shared, join))

    def _join_waiting(self) -> None:
        """Read the images of the oldest prompt waiting for them, and let it join the BatchGenerator."""
        while self._waiting and self._waiting[0].seq.done:  # cancelled while it waited
            self._waiting.popleft()
        if not self._waiting:
            return
        w = self._waiting.popleft()
        seq = w.seq
        try:
            read = self._read_images(w.vision, w.cache, w.shared, seq.stats, seq.cancel)
        except EngineError as exc:
            self._end(seq, "error", str(exc))
            return
        if read < w.vision.end():  # Stop while it was read
            self._end(seq, "cancelled")
            return
        del self._running[seq.uid]
        seq.uid, seq.read = w.join(read), read - w.shared
        seq.slot.tokens = list(w.vision.keys[:read])
        self._running[seq.uid] = seq

    def _read_images(self, vision: Any, cache: list[Any], shared: int, stats: GenerationStats, cancel: Any) -> int:
        """Read a prompt from `shared` to the end of its last image with their embeddings; returns where it
        stopped (short of the end when cancelled)."""
        began = time.perf_counter()
        try:
            read = self._loaded.vision.read(vision, cache, shared, self._loaded.prefill_step, cancel.is_set)
        except Exception as exc:
            raise EngineError(f"MLX could not read the images: {type(exc).__name__}: {exc}") from exc
        stats.images_encoded, stats.image_encode_s = vision.encoded, vision.encode_s
        stats.image_s = vision.encode_s + time.perf_counter() - began
        return int(read)
