"""Which vision projector (an mmproj GGUF kept with a model's files) a model loads with.

A repo may hold one projector for every quant (usually F16), or one per precision (mmproj-F16, mmproj-Q8_0,
…); the library keeps whichever were downloaded or found beside the model. The quant's own precision is
taken when one matches it, else F16 (what llama.cpp's converters write by default), else the first.
"""

from __future__ import annotations

from pathlib import Path

from app.core.library.store import LocalModel
from app.core.models.files import matching_projector, quant_label
from app.core.models.vision_config import mlx_sees_images


def is_projector(path: Path | str) -> bool:
    return "mmproj" in Path(path).name.lower()


def projector_of(model: LocalModel) -> Path | None:
    """The projector `model` loads with, or None (a text-only model, or not a GGUF)."""
    if model.format != "gguf":
        return None
    found = [f.path for f in model.files if is_projector(f.path) and Path(f.path).is_file()]
    if not found:
        return None
    picked = matching_projector([str(p) for p in found], model.quant)
    return found[picked] if picked is not None else None


def projector_beside(path: Path) -> Path | None:
    """The projector a GGUF file outside the library loads with: one beside it (LM Studio's layout, one folder a
    model), the file's own precision first."""
    beside = sorted(p for p in path.parent.glob("*.gguf") if is_projector(p) and p.is_file())
    picked = matching_projector([p.name for p in beside], quant_label(path.name))
    return beside[picked] if picked is not None else None


def sees_images(model: LocalModel) -> bool:
    """Whether `model` takes images here: a GGUF kept with a projector, or an MLX vision-language checkpoint
    that mlx-vlm can read (mlx_vision)."""
    if model.format == "mlx":
        return mlx_sees_images(Path(model.path))
    return projector_of(model) is not None
