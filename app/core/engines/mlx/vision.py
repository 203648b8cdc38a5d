"""Images on MLX models through mlx-vlm, where it is installed: its vision half makes an image's embeddings,
and mlx-lm's model (the one every text request runs on, batched or not) reads them.

mlx-vlm loads the whole checkpoint lazily, so only what images use is ever read from disk: the vision tower,
the projector and the token embeddings. An image goes through the model's own processor (resize, normalise,
its family's wrapper tokens and image-token count), and its features are the embeddings mlx-vlm merges in at
the image-token positions. In the prompt those positions are a run of the image's pseudo id (images.py), so
the slot and RAM caches compare images by content; a prompt is read up to the end of its last image with
embeddings (text pieces embedded by mlx-vlm's own table, which the load checks gives the same logits as
mlx-lm's tokens), and the rest as tokens, by whichever path runs it.

Refused at load, with the reason, so the model still chats: families whose images take 2-D positions
(M-RoPE, the Qwen-VL families; mlx-lm's text model reads positions in one dimension) and any whose mlx-vlm
embeddings do not give mlx-lm's logits for the same text.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.engines.base import ChatMessage
from app.core.engines.errors import EngineError, Unsupported
from app.core.engines.inputs.images import DecodedImage, image_start, is_image, prompt_with_images, pseudo_id
from app.core.models.vision_config import uses_mrope
from app.core.native import import_native

logger = logging.getLogger(__name__)

KEEP_IMAGES = 32  # images' features kept for reuse across requests (a running prompt holds its own)
PROBE_TEXT = "Hello, can you see this?"
PROBE_TOLERANCE = 1e-3  # relative to the logits' scale: float16 weights sum in another order


@dataclass(eq=False)
class KeptImage:
    """One image as its family's processor made it: its run in the prompt (wrapper tokens, and its positions as
    its pseudo id), and the encoder's inputs until its features are computed, then only those."""

    run: list[int]
    inputs: dict[str, Any] | None
    features: Any = None


@dataclass
class VisionPrompt:
    """A prompt with images: `keys` for the caches (each image a run of its pseudo id), `ids` for the model
    (each image position its image token), and its images by pseudo id."""

    keys: list[int]
    ids: list[int]
    images: dict[int, KeptImage] = field(default_factory=dict)
    encoded: int = 0  # images whose features were computed for this prompt (a kept one's were not)
    encode_s: float = 0.0

    def end(self) -> int:
        """Where the last image ends: what is read with embeddings; the rest is text."""
        return max((i + 1 for i, t in enumerate(self.keys) if is_image(t)), default=0)


class MlxVision:
    """mlx-vlm's vision half of a loaded MLX model; owned by the host thread, like the engine."""

    def __init__(self, folder: Path, config: dict[str, Any], model: Any, encode: Callable[[str], list[int]]) -> None:
        """Raises Unsupported with the reason when this model's images cannot run here."""
        if uses_mrope(config):
            raise Unsupported(
                "its images take 2-D positions (M-RoPE, the Qwen-VL families), which mlx-lm's text model does "
                "not place; the GGUF build of this model sees images"
            )
        supports = getattr(import_native("mlx_lm.generate"), "does_model_support_input_embeddings", None)
        if supports is None or not supports(model):  # an older mlx-lm, or a family without the argument
            raise Unsupported("mlx-lm's model for this family cannot read image embeddings")
        utils = import_native("mlx_vlm.utils")
        try:
            self._vlm = utils.load_model(folder, lazy=True)  # the language half stays on disk, unread
            self._processor = utils.load_processor(folder, add_detokenizer=False)
        except Exception as exc:
            raise Unsupported(f"mlx-vlm could not load its vision half: {type(exc).__name__}: {exc}") from exc
        self._mx = import_native("mlx.core")
        self._model = model
        image_id = config.get("image_token_index", config.get("image_token_id"))
        self._image_id = int(image_id if isinstance(image_id, int) else getattr(self._processor, "image_token_id", -1))
        self._placeholder = getattr(self._processor, "image_token", None)
        if self._image_id < 0 or not isinstance(self._placeholder, str):
            raise Unsupported("its processor does not say which token stands for an image")
        self._kept: OrderedDict[int, KeptImage] = OrderedDict()
        self._check_embeddings(encode(PROBE_TEXT))

    def _check_embeddings(self, ids: list[int]) -> None:
        """mlx-vlm's text embeddings must give mlx-lm's logits for the same tokens, or its images would not
        mean to mlx-lm's model what they mean to mlx-vlm's."""
        mx = self._mx
        cache_mod = import_native("mlx_lm.models.cache")
        tokens, table = mx.array([ids]), self.text_embeddings(ids)
        self._dtype = table.dtype  # what the model reads: images' features are cast to it
        plain = self._model(tokens, cache=cache_mod.make_prompt_cache(self._model))
        embedded = self._model(tokens, cache=cache_mod.make_prompt_cache(self._model), input_embeddings=table[None])
        scale = float(mx.abs(plain).max().item()) or 1.0
        if float(mx.abs(plain - embedded).max().item()) > PROBE_TOLERANCE * scale:
            raise Unsupported("mlx-vlm's embeddings for this family do not give mlx-lm's model the same logits")

    # -- prompts ------------------------------------------------------------------------------------

    def prompt(
        self,
        messages: list[ChatMessage],
        render: Callable[[list[ChatMessage]], list[tuple[str, bool]]],
        tokenize: Callable[[str, bool], list[int]],
    ) -> VisionPrompt:
        """The prompt with each image as its family's tokens (its processor runs now; its encoder when the
        prompt is read)."""
        prompt = VisionPrompt([], [])

        def run(image: DecodedImage) -> list[int]:
            pid = pseudo_id(image.digest)
            kept = self._kept.get(pid)
            if kept is None:
                kept = self._kept[pid] = self._process(image, pid)
                while len(self._kept) > KEEP_IMAGES:
                    self._kept.popitem(last=False)  # a prompt holds its own
            self._kept.move_to_end(pid)
            prompt.images[pid] = kept
            return kept.run

        prompt.keys = prompt_with_images(messages, render, tokenize, run)
        prompt.ids = [self._image_id if is_image(t) else t for t in prompt.keys]
        return prompt

    def _process(self, image: DecodedImage, pid: int) -> KeptImage:
        from PIL import Image

        mx = self._mx
        pil = Image.frombytes("RGB", (image.width, image.height), image.rgb)
        try:
            out = self._processor(text=[self._placeholder], images=[pil], return_tensors="np")
            ids = [int(t) for t in out["input_ids"][0]]
            inputs = {k: mx.array(v) for k, v in out.items() if k != "attention_mask"}
        except Exception as exc:  # the pixels passed images.py's checks: this is mlx-vlm's failure
            raise EngineError(f"mlx-vlm could not process the image: {type(exc).__name__}: {exc}") from exc
        if self._image_id not in ids:
            raise EngineError("the processor made no image tokens of the image")
        return KeptImage([pid if t == self._image_id else t for t in ids], inputs)

    def _features(self, kept: KeptImage, prompt: VisionPrompt) -> Any:
        """The embeddings mlx-vlm merges in at the image's positions, computed once an image."""
        if kept.features is not None:
            return kept.features
        assert kept.inputs is not None
        mx, inputs = self._mx, dict(kept.inputs)
        began = time.perf_counter()
        ids, pixels = inputs.pop("input_ids"), inputs.pop("pixel_values")
        merged = self._vlm.get_input_embeddings(ids, pixels, **inputs)
        where = [i for i, t in enumerate(ids[0].tolist()) if t == self._image_id]
        kept.features = merged.inputs_embeds[0][mx.array(where)]
        mx.eval(kept.features)
        kept.inputs = None
        prompt.encoded += 1
        prompt.encode_s += time.perf_counter() - began
        return kept.features

    # -- reading ------------------------------------------------------------------------------------

    def text_embeddings(self, ids: list[int]) -> Any:
        return self._vlm.get_input_embeddings(self._mx.array([ids]), None).inputs_embeds[0]

    def read(
        self,
        prompt: VisionPrompt,
        cache: list[Any],
        start: int,
        step: int,
        cancelled: Callable[[], bool],
        until: int | None = None,
    ) -> int:
        """Read the prompt from `start` to the end of its last image (or to `until`, when sooner) into `cache`,
        `step` positions a forward pass; returns where it stopped (short of that when `cancelled`). `start` may
        fall inside an image, when a prompt is read in pieces: each image's features are computed once, whole."""
        mx = self._mx
        end = prompt.end() if until is None else min(until, prompt.end())
        base = image_start(prompt.keys, start)
        pieces, i = [], base
        while i < end:
            if is_image(prompt.keys[i]):
                features = self._features(prompt.images[prompt.keys[i]], prompt)
                pieces.append(features)
                i += int(features.shape[0])
            else:
                j = next((k for k in range(i, end) if is_image(prompt.keys[k])), end)
                pieces.append(self.text_embeddings(prompt.ids[i:j]))
                i = j
        if not pieces:
            return start
        embeddings = mx.concatenate([p.astype(self._dtype) for p in pieces])  # from `base`
        at = start
        while at < end:
            if cancelled():
                return at
            n = min(step, end - at)
            chunk = embeddings[None, at - base : at - base + n]
            self._model(mx.array([prompt.ids[at : at + n]]), cache=cache, input_embeddings=chunk)
            mx.eval([c.state for c in cache])
            at += n
        return at
