"""What a user can choose in a repo: GGUF quants (split sets as one, with their mmproj), an MLX model,
EXL2 branches; each with the exact files to fetch, pinned to a commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.formats import EXL2, GGUF, MLX
from app.core.hub.errors import HubRefused
from app.core.hub.names import is_allowed_file, refuse_pickle_only
from app.core.hub.results import RepoDetails
from app.core.models.errors import ModelFileError
from app.core.models.exl2 import exl2_quant_method, parse_bpw
from app.core.models.files import RepoFile, group_gguf
from app.core.models.mlx_meta import mlx_label, mlx_quantization
from app.core.models.recommend import Format, Variant

if TYPE_CHECKING:
    from app.core.hub.client import HubClient

logger = logging.getLogger(__name__)


@dataclass
class VariantChoice:
    """One thing a user can download from a repo: a GGUF quant (all shards + mmproj), an MLX model, an EXL2 branch."""

    repo_id: str
    format: Format
    label: str  # "Q4_K_M", "4-bit g64", "4.0bpw"
    revision: str  # the commit sha to pin downloads to
    files: list[RepoFile]  # everything to download, each with size and sha256 (LFS)
    branch: str = "main"
    bits: float | None = None  # MLX bits / EXL2 bpw; None for GGUF (the label says)
    mmproj: list[RepoFile] = field(default_factory=list)  # part of `files`, listed for the UI
    gated: bool = False
    config: dict[str, Any] | None = None  # MLX / EXL2: the config.json already read for the label

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_variant(self) -> Variant:
        """The recommender's Variant from the listing alone (no spec: `metadata.assessable_variants` reads it)."""
        return Variant(
            label=self.label,
            format=self.format,
            size_bytes=self.size,
            bpw=self.bits,
            repo_id=self.repo_id,
            revision=self.branch if self.format == EXL2 else self.revision,
            files=[f.path for f in self.files],
        )


def gguf_choices(repo_id: str, files: list[RepoFile], revision: str, *, gated: bool = False) -> list[VariantChoice]:
    """GGUF quants of a repo as choices: a split set is one; mmproj files ride along with each."""
    return [
        VariantChoice(
            repo_id, GGUF, g.label, revision, list(g.files) + list(g.mmproj), gated=gated, mmproj=list(g.mmproj)
        )
        for g in group_gguf(files)
    ]


def folder_files(files: list[RepoFile]) -> list[RepoFile]:
    """What an MLX or EXL2 model folder needs from its (branch of the) repo: every allowed file but GGUFs."""
    return [f for f in files if is_allowed_file(f.path) and not f.path.lower().endswith(".gguf")]


def repo_variants(client: HubClient, repo_id: str, revision: str = "main") -> list[VariantChoice]:
    """Every variant of a repo from one listing (plus an MLX repo's config and EXL2 branches' trees)."""
    details = client.model(repo_id, revision)
    refuse_pickle_only(repo_id, [f.path for f in details.files])
    allowed = [f for f in details.files if is_allowed_file(f.path)]
    gated = bool(details.gated)
    out = gguf_choices(repo_id, allowed, details.sha, gated=gated)
    tags = set(details.tags)
    if ("mlx" in tags or details.library_name == "mlx") and any(f.path == "config.json" for f in allowed):
        out.append(_mlx_choice(client, details, allowed))
    if "exl2" in tags or details.library_name == "exllamav2":
        out += _exl2_choices(client, repo_id, gated)
    if not out:
        raise HubRefused(f"{repo_id} has no GGUF, MLX or EXL2 model Hearth can use")
    return out


def _mlx_choice(client: HubClient, details: RepoDetails, allowed: list[RepoFile]) -> VariantChoice:
    config = client.config(details.id, details.sha)
    try:
        bits, group, _, _ = mlx_quantization(config)
    except ModelFileError as exc:
        raise HubRefused(f"{details.id}: {exc}") from exc
    return VariantChoice(
        details.id,
        MLX,
        mlx_label(bits, group),
        details.sha,
        folder_files(allowed),
        bits=float(bits),
        gated=bool(details.gated),
        config=config,
    )


def _exl2_choices(client: HubClient, repo_id: str, gated: bool) -> list[VariantChoice]:
    """A quant per branch named for its bits (`4.0bpw`); `main` counts when its config says EXL2."""
    out = []
    for ref in client.branches(repo_id):
        bpw = parse_bpw(ref.name)
        if bpw is None and ref.name != "main":
            continue
        commit = ref.commit or ref.name
        files = folder_files(client.tree(repo_id, commit))
        names = {f.path for f in files}
        if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
            logger.debug("branch %s of %s holds no EXL2 model", ref.name, repo_id)
            continue
        config = None
        label = ref.name
        if bpw is None:  # main: only when its config says so, labelled by the bits it states
            config = client.config(repo_id, commit)
            quant = config.get("quantization_config")
            bits = quant.get("bits") if isinstance(quant, dict) else None
            if not exl2_quant_method(config) or not isinstance(bits, (int, float)) or isinstance(bits, bool):
                continue
            bpw, label = float(bits), f"{float(bits):g}bpw"
        out.append(
            VariantChoice(repo_id, EXL2, label, commit, files, branch=ref.name, bits=bpw, gated=gated, config=config)
        )
    return sorted(out, key=lambda v: v.bits or 0)
