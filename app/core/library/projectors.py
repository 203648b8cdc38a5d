"""Which vision projector (an mmproj GGUF kept with a model's files) a model loads with.

A repo may hold one projector for every quant (usually F16), or one per precision (mmproj-F16, mmproj-Q8_0,
…); the library keeps whichever were downloaded or found beside the model. The quant's own precision is
taken when one matches it, else F16 (what llama.cpp's converters write by default), else the first.

A file named mmproj is only a candidate: it is paired when its header says it is a vision projector and the
width its embeddings come out at is the model's (a folder can hold another model's projector; libmtmd then
refuses to open it, and the model would fail every load).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from app.core.formats import GGUF, MLX
from app.core.library.store import LocalModel
from app.core.models.errors import ModelFileError
from app.core.models.files import matching_projector, quant_label
from app.core.models.gguf_split import split_shard_names
from app.core.models.vision_config import mlx_sees_images

logger = logging.getLogger(__name__)


def is_projector(path: Path | str) -> bool:
    return "mmproj" in Path(path).name.lower()


def projector_problem(model: Path, projector: Path) -> str | None:
    """Why `projector` cannot be `model`'s vision (its header is no projector's, or it was made for another
    width), or None when it fits. Remembered per file version: the picker asks for every model it lists."""
    try:
        return _problem(_identity(model), _identity(projector))
    except OSError as exc:
        return f"cannot read {projector.name}: {exc.strerror or exc}"


def _identity(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _problem(model: tuple[str, int, int], projector: tuple[str, int, int]) -> str | None:
    from app.core.models.gguf import read_gguf_header, read_gguf_metadata_until
    from app.core.models.projector import model_width, projector_mismatch

    name = Path(projector[0]).name
    try:
        projector_header = read_gguf_header(projector[0], keep_array_items=0)
    except ModelFileError as exc:
        problem = f"{name} is not a readable GGUF: {exc}"
        logger.warning("not pairing %s with %s: %s", name, Path(model[0]).name, problem)
        return problem
    try:
        # Only the keys up to the width: the vocabulary after them takes seconds to walk.
        n_embd = model_width(read_gguf_metadata_until(model[0], lambda meta: model_width(meta) is not None))
    except ModelFileError:
        return None  # the model's own fault, said when it loads; nothing to hold against the projector
    reason = projector_mismatch(projector_header, n_embd)
    if reason is None:
        return None
    problem = f"{name} is not this model's vision projector: {reason}"
    logger.warning("not pairing %s with %s: %s", name, Path(model[0]).name, problem)
    return problem


def pick_projector(
    model: Path, candidates: Sequence[Path], quant: str | None
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The projector `model` loads with among `candidates` (those that fit it, by matching_projector), and
    each candidate refused, with why."""
    refused = [(p, problem) for p in candidates if (problem := projector_problem(model, p)) is not None]
    fitting = [p for p in candidates if all(p != r for r, _ in refused)]
    picked = matching_projector([p.name for p in fitting], quant)
    return (fitting[picked] if picked is not None else None), refused


def projector_of(model: LocalModel) -> Path | None:
    """The projector `model` loads with, or None (a text-only model, not a GGUF, or none of its projectors
    fits it)."""
    found = _kept_projectors(model)
    return pick_projector(Path(model.path), found, model.quant)[0] if found else None


def projector_refusal(model: LocalModel) -> str | None:
    """Why `model`, kept with a projector, cannot see images with it (none of its projectors fits it), or None
    (it sees, or it was kept with none)."""
    projector, refused = pick_projector(Path(model.path), _kept_projectors(model), model.quant)
    return refused[0][1] if projector is None and refused else None


def _kept_projectors(model: LocalModel) -> list[Path]:
    """The files kept with a GGUF model that may be its projector: those named so, and those that are not its
    shards and have no other kind's suffix (Ollama's blobs are named by digest alone); the header decides."""
    if model.format != GGUF:
        return []
    shards = set(split_shard_names(Path(model.path).name))
    return [
        path
        for path in (Path(f.path) for f in model.files)
        if (is_projector(path) or (path.name not in shards and path.suffix.lower() in ("", ".gguf"))) and path.is_file()
    ]


def projector_beside(path: Path) -> Path | None:
    """The projector a GGUF file outside the library loads with: one beside it (LM Studio's layout, one folder a
    model) that fits it, the file's own precision first."""
    return projectors_beside(path)[0]


def projectors_beside(path: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """As `projector_beside`, with the projectors beside it that were refused, and why."""
    beside = sorted(p for p in path.parent.glob("*.gguf") if is_projector(p) and p.is_file())
    return pick_projector(path, beside, quant_label(path.name))


def sees_images(model: LocalModel) -> bool:
    """Whether `model` takes images here: a GGUF kept with a projector that fits it, or an MLX vision-language
    checkpoint that mlx-vlm can read (mlx.vision)."""
    if model.format == MLX:
        return mlx_sees_images(Path(model.path))
    return projector_of(model) is not None
