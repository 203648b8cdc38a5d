"""What MlxSequences does with prompts that hold images (mlx_vision): a prompt whose images are not in its
cache waits, under a negative uid, while its images are read into its cache with their embeddings, one prefill
chunk a step (the oldest waiting prompt's, before the step's decode, as the BatchGenerator reads text prompts);
once its last image is read it joins the BatchGenerator, which reads the text after it. So image requests never
stall the others' streams for more than one chunk (and the encoding of an image it reaches) a step."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.engines.base import FinishReason


@dataclass
class Waiting:
    seq: Any  # mlx_batch.MlxSequence
    vision: Any  # mlx_vision.VisionPrompt
    cache: list[Any]  # its KV cache, holding `at` of its tokens
    shared: int  # what the cache held when it was admitted
    join: Callable[[int], int]  # into the BatchGenerator with this many tokens read; returns its uid
    at: int = 0


class ImageJoining:
    """Mixed into MlxSequences, whose attributes these are."""

    _loaded: Any  # mlx_batch.Loaded
    _running: dict[int, Any]  # mlx_batch.MlxSequence by uid
    _waiting: deque[Waiting]

    if TYPE_CHECKING:

        def _end(self, seq: Any, reason: FinishReason, error: str | None = None, *, gone: bool = False) -> None: ...

    def _wait(self, seq: Any, vision: Any, cache: list[Any], shared: int, join: Callable[[int], int]) -> None:
        seq.uid = min([0, *self._running]) - 1
        self._waiting.append(Waiting(seq, vision, cache, shared, join, at=shared))

    def _join_waiting(self) -> None:
        """Read the next chunk of the oldest prompt waiting for its images; once its last image is read, it
        joins the BatchGenerator."""
        while self._waiting and self._waiting[0].seq.done:  # cancelled while it waited
            self._waiting.popleft()
        if not self._waiting:
            return
        w = self._waiting[0]
        seq, step = w.seq, self._loaded.prefill_step
        began = time.perf_counter()
        try:
            read = int(self._loaded.vision.read(w.vision, w.cache, w.at, step, seq.cancel.is_set, w.at + step))
        except Exception as exc:
            self._waiting.popleft()
            self._end(seq, "error", f"MLX could not read the images: {type(exc).__name__}: {exc}")
            return
        stats = seq.stats
        stats.images_encoded, stats.image_encode_s = w.vision.encoded, w.vision.encode_s
        stats.image_s += time.perf_counter() - began
        if read < min(w.at + step, w.vision.end()):  # Stop while it was read
            self._waiting.popleft()
            self._end(seq, "cancelled")
            return
        w.at = read
        if read < w.vision.end():
            return  # its next chunk at the next step
        self._waiting.popleft()
        del self._running[seq.uid]
        seq.uid, seq.read = w.join(read), read - w.shared
        seq.slot.tokens = list(w.vision.keys[:read])
        self._running[seq.uid] = seq
