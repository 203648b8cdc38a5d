"""Group a repo's files into variants a user chooses: GGUF quants (split sets as one), MLX, EXL2."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from app.core.models.gguf_split import parse_split_name

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt", ".pickle")
# The only files Hearth ever downloads (security.md T6): no code, no pickles.
ALLOWED_SUFFIXES = (".gguf", ".safetensors", ".json", ".jinja", ".md", ".txt")
ALLOWED_NAMES = ("tokenizer.model",)
# File-type labels as they appear in GGUF file names (longest first so Q4_K_M beats Q4_K).
QUANT_LABELS = sorted(
    """F32 F16 BF16 Q8_0 Q6_K Q5_K_M Q5_K_S Q5_K_L Q5_K Q5_1 Q5_0 Q4_K_M Q4_K_S Q4_K_L Q4_K Q4_1 Q4_0
    Q4_0_4_4 Q4_0_4_8 Q4_0_8_8 Q3_K_XL Q3_K_L Q3_K_M Q3_K_S Q3_K Q2_K_L Q2_K_S Q2_K IQ4_NL IQ4_XS IQ3_M IQ3_S
    IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ1_0 TQ2_0 MXFP4 MXFP4_MOE""".split(),
    key=len, reverse=True,
)
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(re.escape(q) for q in QUANT_LABELS) + r")(?![A-Za-z0-9])", re.IGNORECASE
)


@dataclass
class RepoFile:
    path: str
    size: int = 0
    sha256: str | None = None


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


def group_gguf(files: list[RepoFile]) -> list[GgufVariant]:
    """GGUF quants of a repo: a split set is one variant; mmproj files attach to every variant."""
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
    # Two files with the same quant label in one repo (e.g. different sub-models) keep their stems.
    return sorted(variants.values(), key=lambda v: (-v.size, v.label))


def pickle_only(files: list[RepoFile]) -> bool:
    """True when a repo's only weights are pickle files (which Hearth never loads)."""
    names = [f.path.lower() for f in files]
    has_safe = any(n.endswith((".gguf", ".safetensors")) for n in names)
    return not has_safe and any(n.endswith(PICKLE_SUFFIXES) for n in names)


def is_allowed_file(path: str) -> bool:
    """True for file types Hearth may download (`*.gguf`, `*.safetensors`, `*.json`, `tokenizer.model`, ...)."""
    name = PurePosixPath(path).name.lower()
    return name.endswith(ALLOWED_SUFFIXES) or name in ALLOWED_NAMES


@dataclass
class VariantChoice:
    """One thing a user can download from a repo: a GGUF quant (all shards + mmproj), an MLX model, an EXL2 branch."""

    repo_id: str
    format: str  # "gguf" | "mlx" | "exl2"
    label: str  # "Q4_K_M", "4-bit g64", "4.0bpw"
    revision: str  # the commit sha to pin downloads to
    files: list[RepoFile]  # everything to download, each with size and sha256 (LFS)
    branch: str = "main"
    bits: float | None = None  # MLX bits / EXL2 bpw; None for GGUF (the label says)
    mmproj: list[RepoFile] = field(default_factory=list)  # part of `files`, listed for the UI
    gated: bool = False

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_variant(self):
        """The recommender's Variant (without a spec: `hub_variants.variants_from_repo` reads that remotely)."""
        from app.core.models.recommend import Variant

        return Variant(label=self.label, format=self.format, size_bytes=self.size, bpw=self.bits,
                       repo_id=self.repo_id, revision=self.branch if self.format == "exl2" else self.revision,
                       files=[f.path for f in self.files])


def gguf_choices(repo_id: str, files: list[RepoFile], revision: str, *, gated: bool = False) -> list[VariantChoice]:
    """GGUF quants of a repo as choices: a split set is one; mmproj files ride along with each."""
    return [VariantChoice(repo_id, "gguf", g.label, revision, list(g.files) + list(g.mmproj), gated=gated,
                          mmproj=list(g.mmproj)) for g in group_gguf(files)]
