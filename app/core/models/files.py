"""A model's files by name, before any byte is read: which GGUF quant a name states, split sets and
vision projectors grouped into the variants a user chooses (a Hub listing or a local folder alike)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from app.core.models.gguf_split import parse_split_name

# File-type labels as they appear in GGUF file names (longest first so Q4_K_M beats Q4_K).
QUANT_LABELS = sorted(
    """F32 F16 BF16 Q8_0 Q6_K Q5_K_M Q5_K_S Q5_K_L Q5_K Q5_1 Q5_0 Q4_K_M Q4_K_S Q4_K_L Q4_K Q4_1 Q4_0
    Q4_0_4_4 Q4_0_4_8 Q4_0_8_8 Q3_K_XL Q3_K_L Q3_K_M Q3_K_S Q3_K Q2_K_L Q2_K_S Q2_K IQ4_NL IQ4_XS IQ3_M IQ3_S
    IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ1_0 TQ2_0 MXFP4 MXFP4_MOE""".split(),
    key=len,
    reverse=True,
)
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(re.escape(q) for q in QUANT_LABELS) + r")(?![A-Za-z0-9])", re.IGNORECASE
)


@dataclass
class RepoFile:
    """One file of a repo listing (or a local folder): LFS files carry `sha256`, small git files `blob_id`."""

    path: str
    size: int = 0
    sha256: str | None = None
    blob_id: str | None = None


@dataclass
class GgufVariant:
    label: str  # "Q4_K_M"
    files: list[RepoFile]  # every shard, in order
    mmproj: list[RepoFile] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def is_split(self) -> bool:
        return len(self.files) > 1


def quant_label(name: str) -> str | None:
    """The quant a GGUF file name states ("Llama-3-8B-Q4_K_M.gguf" → "Q4_K_M")."""
    stem = PurePosixPath(name).name
    matches = _QUANT_RE.findall(stem)
    return matches[-1].upper() if matches else None


def matching_projector(names: list[str], quant: str | None) -> int | None:
    """Which of a repo's (or a folder's) vision projectors a quant loads with, by index: one of its own
    precision where the repo has one per precision, else F16 (what llama.cpp's converters write by default),
    else the first; None when there is none."""
    if not names:
        return None
    lowered = [PurePosixPath(n).name.lower() for n in names]
    if quant:
        own = next((i for i, n in enumerate(lowered) if quant.lower() in n), None)
        if own is not None:
            return own
    return next((i for i, n in enumerate(lowered) if "f16" in n and "bf16" not in n), 0)


def group_gguf(files: list[RepoFile]) -> list[GgufVariant]:
    """GGUF quants of a repo: a split set is one variant; each carries the vision projector it loads with
    (matching_projector), so a download fetches that one and not every precision."""
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")]
    mmproj = [f for f in ggufs if "mmproj" in PurePosixPath(f.path).name.lower()]
    variants: dict[str, GgufVariant] = {}
    for f in ggufs:
        if f in mmproj:
            continue
        name = PurePosixPath(f.path).name
        split = parse_split_name(name)
        folder = str(PurePosixPath(f.path).parent)
        key_stem = split[0] if split else name[: -len(".gguf")]
        label = quant_label(key_stem) or quant_label(folder) or key_stem
        key = f"{folder}/{key_stem}"
        v = variants.setdefault(key, GgufVariant(label=label, files=[], mmproj=mmproj))
        v.files.append(f)
    for v in variants.values():
        v.files.sort(key=lambda f: f.path)
        picked = matching_projector([m.path for m in mmproj], v.label)
        v.mmproj = [mmproj[picked]] if picked is not None else []
    # Two files with the same quant label in one repo (e.g. different sub-models) keep their stems.
    return sorted(variants.values(), key=lambda v: (-v.size, v.label))
