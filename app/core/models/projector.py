"""What a vision projector (an mmproj GGUF) costs beside its model: its weights, and the image encoder's compute
buffer, which libmtmd reserves at load for its largest image.

The encoder is a ViT over the image's patches: the buffer is dominated by the attention scores (patches² for
each head, in F32) and the feed-forward activations (patches × the wider of the two widths), a few of each
alive at once. The figure is an estimate from the header alone, as the planner's are for the model; it errs
large rather than small, since a projector that does not fit fails the load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.models.gguf import GGUFHeader, read_gguf_header

F32 = 4
LIVE_ACTIVATIONS = 4  # feed-forward and residual tensors alive together in one block
# Projectors that join each 2×2 patches into one token for the model (the Qwen-VL families'), unless the
# header names another merge.
MERGING = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"})


@dataclass(frozen=True)
class ProjectorMemory:
    weights: int
    compute: int
    tokens_per_image: int  # at the encoder's own size (tiling models use more, one tile at a time)
    encoder_flops: float = 0.0  # one image through the encoder: the speed model's time per image

    @property
    def total(self) -> int:
        return self.weights + self.compute

    def with_default_compute(self) -> ProjectorMemory:
        patches = (224 // 14) ** 2
        compute = patches * patches * 16 * F32 + patches * 4096 * F32 * LIVE_ACTIVATIONS
        return ProjectorMemory(self.weights, compute, patches, 0.0)


def projector_from_size(size: int) -> ProjectorMemory:
    """When the header cannot be read: the file's size as its weights, the encoder's buffer at the defaults
    below (a 224-px ViT-L's); no time per image."""
    return ProjectorMemory(size, 0, 0).with_default_compute()


def projector_memory(path: Path) -> ProjectorMemory:
    """The projector's memory, from its header (raises ModelFileError or OSError when it cannot be read)."""
    return projector_memory_of(read_gguf_header(path, keep_array_items=0))


def projector_memory_of(header: GGUFHeader) -> ProjectorMemory:
    """As `projector_memory`, from a header already read (a local file's, or a Hub file's first bytes)."""
    meta = header.metadata

    def number(key: str, default: int) -> int:
        value = meta.get(f"clip.vision.{key}")
        return int(value) if isinstance(value, (int, float)) and value > 0 else default

    image, patch = number("image_size", 224), number("patch_size", 14)
    n_embd, n_ff, n_head = (
        number("embedding_length", 1024),
        number("feed_forward_length", 4096),
        number("attention.head_count", 16),
    )
    patches = (image // patch) ** 2
    merge = number("spatial_merge_size", 2 if meta.get("clip.projector_type") in MERGING else 1)
    scores = patches * patches * n_head * F32
    activations = patches * max(n_embd, n_ff) * F32 * LIVE_ACTIVATIONS
    weights = sum(t.nbytes for t in header.tensors)
    # Every weight meets every patch once (2 FLOPs a multiply-add), and attention's two products add
    # 2 × 2 × patches² × width a block.
    params = sum(t.n_elements for t in header.tensors)
    flops = 2.0 * params * patches + 4.0 * patches * patches * n_embd * number("block_count", 24)
    return ProjectorMemory(weights, scores + activations, max(1, patches // merge**2), flops)


# Where llama.cpp's clip_n_mmproj_embd finds the width a projector's embeddings come out at, for the layouts
# the legacy converters wrote (their clip.vision.projection_dim is CLIP's own projection, 768 or 0, not the
# text model's width): (tensor, which of its ggml dims).
_LEGACY_WIDTH = {
    "mlp": ("mm.2.weight", 1),
    "mlp_norm": ("mm.3.bias", 0),
    "ldp": ("mm.model.mb_block.1.block.2.1.bias", 0),
    "ldpv2": ("mm.model.peg.0.bias", 0),
    "resampler": ("resampler.proj.weight", 0),
    "adapter": ("adapter.linear.dense_4h_to_h.weight", 1),
}


def is_projector_header(header: GGUFHeader) -> bool:
    """A header libmtmd reads as a projector: architecture "clip", or a projector type named."""
    meta = header.metadata
    return header.architecture == "clip" or any(
        isinstance(meta.get(k), str) for k in ("clip.projector_type", "clip.vision.projector_type")
    )


def projector_width(header: GGUFHeader) -> int | None:
    """The embedding width the projector writes into the text model (which must be the model's own), as
    libmtmd works it out; None when this header does not say."""
    meta = header.metadata
    kind = meta.get("clip.vision.projector_type") or meta.get("clip.projector_type") or "mlp"
    tensors = {t.name: t for t in header.tensors}
    if kind == "mlp" and "mm.3.weight" in tensors:
        kind = "mlp_norm"  # libmtmd's Yi-style LLaVA
    if kind in _LEGACY_WIDTH:
        name, dim = _LEGACY_WIDTH[kind]
        tensor = tensors.get(name)
        return tensor.dims[dim] if tensor is not None and len(tensor.dims) > dim else None
    # llama.cpp's converter writes the text model's width here for every newer layout.
    value = meta.get("clip.vision.projection_dim")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def model_width(metadata: dict[str, Any]) -> int | None:
    """A text model's embedding width (`<arch>.embedding_length`), which its projector must write."""
    value = metadata.get(f"{metadata.get('general.architecture')}.embedding_length")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def projector_mismatch(projector: GGUFHeader, n_embd: int | None) -> str | None:
    """Why `projector` cannot be the vision of a model `n_embd` wide (not a projector, no vision, another
    width), or None when the headers say it fits (or do not say enough to tell)."""
    if not is_projector_header(projector):
        return f"its header says {projector.architecture or 'nothing'}, not a vision projector (clip)"
    if projector.metadata.get("clip.has_vision_encoder") is False:
        return "it reads audio, not images"
    width = projector_width(projector)
    if width is not None and n_embd is not None and width != n_embd:
        return f"it was made for a model {width} wide; this one is {n_embd} wide"
    return None
