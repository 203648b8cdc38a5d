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
