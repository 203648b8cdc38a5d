"""Images on llama.cpp through libmtmd, per sequence, inside the one generation loop.

llama-cpp-python's own multimodal chat handlers clear the whole KV cache on every call, which would throw away
every slot and the prompt cache. Here libmtmd is driven directly: an image becomes libmtmd's chunks (the
wrapper tokens its model family puts around an image, and the image's embedding positions), and the image's
positions enter the prompt as a run of one pseudo token id, negative so it can never be a vocabulary id,
derived from the image's pixel hash. The slot cache compares prompts token by token, so a conversation that
keeps its image, or a second question about the same image, finds the image's cells already computed and never
encodes it again; a different image differs at its first position. When a sequence's next pending token is an
image run, the BatchRunner has `Projector.evaluate` encode it and write its embeddings into that sequence's
cells (at most one image a step, so the others keep streaming).

Models with M-RoPE (the Qwen2-VL, Qwen2.5-VL and Qwen3-VL families) place an image's tokens on a grid: all of
them at its first position in the KV cache, and the text after it max(columns, rows) positions on, not one a
token. So a sequence's positions fall behind its token count after each such image: `positions` maps a token
count to the position it reaches (the runner keeps each slot's difference), and every cut of the cache, a
prefix copied or a position written is placed by it.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.engines.base import ChatMessage
from app.core.engines.errors import EngineError, Unsupported
from app.core.engines.inputs.images import DecodedImage, ImageRejected, is_image, prompt_with_images, pseudo_id
from app.core.engines.llamacpp.log import route_mtmd_logs
from app.core.native import import_native

logger = logging.getLogger(__name__)

KEEP_IMAGES = 32  # tokenized images kept for reuse (each holds its preprocessed pixels until encoded)


@dataclass(eq=False)
class MediaChunk:
    """libmtmd's chunks for one image (owned: freed with this object) and which of them is the image."""

    chunks: Any
    index: int
    n_tokens: int
    free: Callable[[Any], None]
    n_pos: int = 0  # the positions the image takes: n_tokens, or fewer under M-RoPE

    def __del__(self) -> None:
        if self.chunks:
            self.free(self.chunks)
            self.chunks = None


class Projector:
    """libmtmd opened on a loaded model's weights; owned by the engine host's thread, like the engine."""

    def __init__(self, model: Any, path: Path, n_threads: int, use_gpu: bool) -> None:
        self._mtmd = import_native("llama_cpp.mtmd_cpp")
        route_mtmd_logs(self._mtmd)
        params = self._mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        self.path = path
        self._ctx = self._mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not self._ctx:
            raise EngineError(f"llama.cpp could not open the vision projector {path.name} for this model")
        try:
            if not self._mtmd.mtmd_support_vision(self._ctx):
                raise Unsupported(f"{path.name} reads audio, not images")
        except EngineError:
            self.close()
            raise
        self._marker = self._mtmd.mtmd_default_marker()
        self._no_callback = self._mtmd.mtmd_helper_post_decode_callback()  # a NULL function pointer
        self._media: OrderedDict[int, MediaChunk] = OrderedDict()
        self.mrope = bool(self._mtmd.mtmd_decode_use_mrope(self._ctx))
        # Under M-RoPE, each image's (tokens, positions) by its run's id, kept for the engine's life (a few
        # ints an image): a slot restored or copied long after the image was read still needs its size.
        self._grid: dict[int, tuple[int, int]] = {}

    def close(self) -> None:
        self._media.clear()
        if self._ctx:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None

    # -- prompts ------------------------------------------------------------------------------------

    def prompt(
        self,
        messages: list[ChatMessage],
        render: Callable[[list[ChatMessage]], list[tuple[str, bool]]],
        tokenize: Callable[[str, bool], list[int]],
    ) -> tuple[list[int], dict[int, MediaChunk]]:
        """The prompt's tokens with each image as its run, and the chunks those runs stand for. `render` gives
        the template's segments (text, is_content); images are found in the content by their markers."""
        media: dict[int, MediaChunk] = {}

        def run(image: DecodedImage) -> list[int]:
            ids, media[pseudo_id(image.digest)] = self.image_tokens(image)
            return ids

        return prompt_with_images(messages, render, tokenize, run), media

    def image_tokens(self, image: DecodedImage) -> tuple[list[int], MediaChunk]:
        """The tokens for one image: its family's wrapper tokens around the image's run."""
        pid = pseudo_id(image.digest)
        media = self._media.get(pid)
        if media is None:
            media = self._tokenize(image)
            self._media[pid] = media
            while len(self._media) > KEEP_IMAGES:
                self._media.popitem(last=False)  # a running sequence holds its own reference
        self._media.move_to_end(pid)
        return self._run(media, pid), media

    def _tokenize(self, image: DecodedImage) -> MediaChunk:
        m = self._mtmd
        pixels = (ctypes.c_uint8 * len(image.rgb)).from_buffer_copy(image.rgb)
        bitmap = m.mtmd_bitmap_init(image.width, image.height, pixels)
        if not bitmap:
            raise EngineError("llama.cpp could not take the image")
        chunks = m.mtmd_input_chunks_init()
        try:
            text = m.mtmd_input_text(self._marker, len(self._marker), False, True)
            bitmaps = (m.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = m.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
        finally:
            m.mtmd_bitmap_free(bitmap)
        media = MediaChunk(chunks, -1, 0, m.mtmd_input_chunks_free)
        if rc != 0:  # the pixels passed images.py's checks: what libmtmd refuses is still the image's fault
            raise ImageRejected(f"llama.cpp could not read the image (mtmd_tokenize returned {rc})")
        for i in range(m.mtmd_input_chunks_size(chunks)):
            chunk = m.mtmd_input_chunks_get(chunks, i)
            if m.mtmd_input_chunk_get_type(chunk) == m.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                media.index, media.n_tokens = i, int(m.mtmd_input_chunk_get_n_tokens(chunk))
                media.n_pos = int(m.mtmd_input_chunk_get_n_pos(chunk))
        if media.index < 0 or media.n_tokens < 1 or not 0 < media.n_pos <= media.n_tokens:
            raise EngineError("llama.cpp made no image tokens of the image")
        if self.mrope:
            self._grid[pseudo_id(image.digest)] = (media.n_tokens, media.n_pos)
        return media

    def _run(self, media: MediaChunk, pid: int) -> list[int]:
        m = self._mtmd
        ids: list[int] = []
        for i in range(m.mtmd_input_chunks_size(media.chunks)):
            chunk = m.mtmd_input_chunks_get(media.chunks, i)
            if i == media.index:
                ids += [pid] * media.n_tokens
                continue
            n = ctypes.c_size_t(0)
            tokens = m.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids += [int(tokens[k]) for k in range(n.value)]
        return ids

    # -- evaluation ---------------------------------------------------------------------------------

    def evaluate(self, media: MediaChunk, lctx: Any, n_past: int, seq_id: int, n_batch: int) -> float:
        """Encode the image and write its embeddings into `seq_id`'s cells from position `n_past`; returns the
        seconds the encoder took (the rest is the model reading the embeddings, like a prompt)."""
        m = self._mtmd
        chunk = m.mtmd_input_chunks_get(media.chunks, media.index)
        began = time.perf_counter()
        rc = m.mtmd_encode_chunk(self._ctx, chunk)
        if rc != 0:
            raise EngineError(f"llama.cpp could not encode the image (returned {rc})")
        encoded = time.perf_counter() - began
        embeddings = m.mtmd_get_output_embd(self._ctx)
        new_n_past = ctypes.c_int32(0)
        rc = m.mtmd_helper_decode_image_chunk(
            self._ctx,
            lctx,
            chunk,
            embeddings,
            n_past,
            seq_id,
            n_batch,
            ctypes.byref(new_n_past),
            self._no_callback,
            None,
        )
        if rc != 0:
            raise EngineError(f"llama.cpp could not read the image's embeddings (returned {rc})")
        if new_n_past.value != n_past + media.n_pos:
            raise EngineError("the image took a different number of positions than libmtmd said it would")
        return encoded

    def positions(self, tokens: list[int], n: int) -> int:
        """The position the first `n` of `tokens` reach (`grid_positions` with this projector's images)."""
        return grid_positions(tokens, n, self._grid)


def grid_positions(tokens: list[int], n: int, grid: dict[int, tuple[int, int]]) -> int:
    """The position the first `n` of `tokens` reach: `n`, less what the M-RoPE images among them save (`grid`:
    each one's tokens and positions by its run's id). An image that `n` cuts partway counts to its start (a cut
    there drops it whole)."""
    if not grid:
        return n
    pos = i = 0
    while i < n:
        token = tokens[i]
        if not is_image(token):
            pos += 1
            i += 1
            continue
        size, n_pos = grid.get(token, (1, 1))
        end = i
        while end < len(tokens) and tokens[end] == token:
            end += 1
        whole = (min(end, n) - i) // size  # the same image twice in a row is one run
        pos += whole * n_pos
        if i + whole * size < min(end, n):
            break
        i = end
    return pos
