"""Prompts that hold images on MlxSequences' batched path (mlx.vision): a prompt whose images are not in its
cache waits (under a negative uid) while its images are read into its cache with their embeddings, one prefill
chunk a step (the oldest waiting prompt's, before the step's decode, as the BatchGenerator reads text prompts);
once its last image is read it joins the BatchGenerator, which reads the text after it. So image requests never
stall the others' streams for more than one chunk (and the encoding of an image it reaches) a step."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass
class Waiting:
    seq: Any  # mlx.batch.MlxSequence
    vision: Any  # mlx.vision.VisionPrompt
    cache: list[Any]  # its KV cache, holding `at` of its tokens
    shared: int  # what the cache held when it was admitted
    join: Callable[[int], int]  # into the BatchGenerator with this many tokens read; returns its uid
    at: int = 0


@dataclass(frozen=True)
class ImagesRead:
    """What a step's chunk came to for the oldest waiting prompt: still `reading` (its next chunk at the next
    step), `done` (its last image read: `waiting.at` tokens in its cache, it joins now), `cancelled` (Stop while
    it was read) or `error` (it could not be read, for `error`). Only `reading` leaves it waiting."""

    waiting: Waiting
    outcome: Literal["reading", "done", "cancelled", "error"]
    error: str = ""


class ImageQueue:
    """The prompts waiting for their images to be read, oldest first. Owned by the engine host's thread, like
    the MlxSequences that holds it."""

    def __init__(self, vision: Any, prefill_step: int) -> None:
        """`vision`: the model's mlx.vision.MlxVision (None for a text model: nothing ever waits)."""
        self._vision = vision
        self._step = prefill_step
        self._waiting: deque[Waiting] = deque()

    def add(self, waiting: Waiting) -> None:
        self._waiting.append(waiting)

    def clear(self) -> None:
        self._waiting.clear()

    def read(self) -> ImagesRead | None:
        """Read the next chunk of the oldest waiting prompt (those cancelled while they waited are dropped);
        None when none waits."""
        while self._waiting and self._waiting[0].seq.done:  # cancelled while it waited
            self._waiting.popleft()
        if not self._waiting:
            return None
        w = self._waiting[0]
        seq, step = w.seq, self._step
        began = time.perf_counter()
        try:
            read = int(self._vision.read(w.vision, w.cache, w.at, step, seq.cancel.is_set, w.at + step))
        except Exception as exc:
            self._waiting.popleft()
            return ImagesRead(w, "error", f"MLX could not read the images: {type(exc).__name__}: {exc}")
        stats = seq.stats
        stats.images_encoded, stats.image_encode_s = w.vision.encoded, w.vision.encode_s
        stats.image_s += time.perf_counter() - began
        if read < min(w.at + step, w.vision.end()):  # Stop while it was read
            self._waiting.popleft()
            return ImagesRead(w, "cancelled")
        w.at = read
        if read < w.vision.end():
            return ImagesRead(w, "reading")
        self._waiting.popleft()
        return ImagesRead(w, "done")
