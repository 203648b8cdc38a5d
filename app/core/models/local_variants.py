"""Variants of a model on disk: one GGUF (or split set), a folder of GGUF quants, or an MLX folder."""

from __future__ import annotations

from pathlib import Path

from app.core.formats import GGUF, MLX
from app.core.models.errors import ModelFileError
from app.core.models.files import RepoFile, group_gguf, quant_label
from app.core.models.gguf import read_gguf_header
from app.core.models.gguf_split import parse_split_name, split_shard_names
from app.core.models.recommend import Variant
from app.core.models.spec import spec_from_gguf


def gguf_variant(path: Path) -> Variant:
    """A local GGUF; given any shard of a split set, every shard is read as one model."""
    path = Path(path)
    shards = [path]
    if parse_split_name(path.name):
        shards = [path.parent / n for n in split_shard_names(path.name)]
        missing = [s.name for s in shards if not s.exists()]
        if missing:
            raise ModelFileError(f"split GGUF is incomplete: missing {', '.join(missing)}")
    headers = [read_gguf_header(s) for s in shards]
    spec = spec_from_gguf(headers)
    label = spec.file_type or quant_label(path.name) or path.stem
    size = sum(s.stat().st_size for s in shards)
    return Variant(label=label, format=GGUF, size_bytes=size, spec=spec, files=[s.name for s in shards], path=shards[0])


def variants_from_path(path: str | Path) -> list[Variant]:
    path = Path(path).expanduser()
    if path.is_file():
        if not path.name.lower().endswith(".gguf"):
            raise ModelFileError(f"{path.name} is not a GGUF file")
        return [gguf_variant(path)]
    if not path.is_dir():
        raise ModelFileError(f"no such file or folder: {path}")
    if (path / "config.json").exists() and any(path.glob("*.safetensors")):
        from app.core.models.mlx_meta import mlx_label, read_mlx_folder

        mlx = read_mlx_folder(path)
        label = mlx_label(mlx.bits, mlx.group_size)
        return [
            Variant(
                label=label,
                format=MLX,
                size_bytes=mlx.weight_bytes,
                spec=mlx.spec,
                bpw=mlx.bpw,
                files=list(mlx.files),
                path=path,
            )
        ]
    files = [RepoFile(str(p.relative_to(path)), p.stat().st_size) for p in sorted(path.rglob("*.gguf"))]
    groups = group_gguf(files)
    if not groups:
        raise ModelFileError(f"no GGUF or MLX model in {path}")
    return [gguf_variant(path / g.files[0].path) for g in groups]
