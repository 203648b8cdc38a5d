"""Import models in place (nothing is copied): a GGUF file or folder, an MLX folder, the HF cache, LM Studio."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.formats import GGUF, MLX
from app.core.hub.names import is_allowed_file
from app.core.library.projectors import is_projector, pick_projector, projectors_beside
from app.core.models.errors import ModelFileError
from app.core.models.files import RepoFile, group_gguf, quant_label
from app.core.models.gguf_split import parse_split_name, split_shard_names

if TYPE_CHECKING:
    from app.core.library.store import Library, LocalModel

logger = logging.getLogger(__name__)

LMSTUDIO_ROOTS = ("~/.lmstudio/models", "~/.cache/lm-studio/models")


@dataclass
class Skipped:
    path: Path
    reason: str


@dataclass
class ImportResult:
    imported: list[LocalModel] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # Another app's folders: those looked in, and those looked for and not there (so "nothing" says where).
    searched: list[Path] = field(default_factory=list)
    absent: list[Path] = field(default_factory=list)

    def extend(self, other: ImportResult) -> None:
        self.imported += other.imported
        self.skipped += other.skipped
        self.searched += other.searched
        self.absent += other.absent

    def where(self) -> str:
        """Which folders were looked in, as a sentence ("" when none were: a file or folder the user named)."""
        parts = []
        if self.searched:
            parts.append("Looked in " + ", ".join(str(p) for p in self.searched) + ".")
        if self.absent:
            parts.append("Not there: " + ", ".join(str(p) for p in self.absent) + ".")
        return " ".join(parts)


def _validate(shards: Iterable[Path], *, weights: bool = True) -> str | None:
    """Check every shard's header and tensor layout; returns the file type label of the first. With
    `weights`, a model whose shards hold no tensor at all (a vocabulary-only file) is refused: it
    would be listed as ready and then fail to load."""
    from app.core.models.gguf import validate_gguf

    label = None
    tensors = 0
    shards = list(shards)
    for shard in shards:
        try:
            header = validate_gguf(shard)
        except ModelFileError as exc:
            raise ModelFileError(f"{shard.name}: {exc}") from exc
        label = label or header.ftype_label
        tensors += len(header.tensors)
    if weights and tensors == 0 and shards:
        raise ModelFileError(f"{shards[0].name} holds no tensors (no model weights, e.g. a vocabulary-only file)")
    return label


def gguf_problem(shards: Iterable[Path]) -> str | None:
    """Why these GGUF files cannot be a usable model (unreadable, inconsistent, no weights), or None."""
    try:
        _validate(shards)
    except ModelFileError as exc:
        return str(exc)
    return None


def _shards(path: Path) -> list[Path]:
    if not parse_split_name(path.name):
        return [path]
    shards = [path.parent / n for n in split_shard_names(path.name)]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise ModelFileError(f"split GGUF is incomplete: missing {', '.join(missing)}")
    return shards


def _display_name(stem: str, quant: str | None, repo_id: str | None) -> str:
    if repo_id:
        base = repo_id.split("/")[-1]
        return f"{base}:{quant}" if quant else base
    return stem


def _add_gguf(
    library: Library,
    shards: list[Path],
    mmproj: list[Path],
    *,
    source: str,
    repo_id: str | None,
    commit: str | None,
    name: str | None = None,
) -> LocalModel:
    from app.core.library.store import files_of

    existing = library.find(str(shards[0]))
    ftype = _validate(shards)
    for m in list(mmproj):
        try:
            _validate([m])
        except ModelFileError as exc:
            logger.warning("not attaching %s: %s", m, exc)
            mmproj.remove(m)
    if existing is not None and existing.ready and existing.source == "download":
        return existing  # already in the library as a verified download
    split = parse_split_name(shards[0].name)
    first = shards[0].name
    stem = split[0] if split else (first[: -len(".gguf")] if first.lower().endswith(".gguf") else first)
    quant = quant_label(stem) or ftype
    return library.add(
        name=name or _display_name(stem, quant, repo_id),
        format=GGUF,
        path=shards[0],
        files=files_of(shards + mmproj),
        quant=quant,
        repo_id=repo_id,
        commit=commit,
        source=source,
    )


def _add_mlx(library: Library, folder: Path, *, source: str, repo_id: str | None, commit: str | None) -> LocalModel:
    from app.core.library.store import files_of
    from app.core.models.hf_config import check_folder_configs
    from app.core.models.mlx_meta import mlx_label, read_mlx_folder

    check_folder_configs(folder)
    mlx = read_mlx_folder(folder)
    quant = mlx_label(mlx.bits, mlx.group_size)
    files = sorted(
        p for p in folder.iterdir() if p.is_file() and is_allowed_file(p.name) and not p.name.lower().endswith(".gguf")
    )
    return library.add(
        name=_display_name(folder.name, None, repo_id),
        format=MLX,
        path=folder,
        files=files_of(files),
        quant=quant,
        repo_id=repo_id,
        commit=commit,
        source=source,
    )


def is_mlx_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def import_path(
    library: Library,
    path: str | os.PathLike[str],
    *,
    source: str = "import",
    repo_id: str | None = None,
    commit: str | None = None,
) -> ImportResult:
    """Import what `path` holds; raises ModelFileError (with the reasons) when nothing could be imported."""
    path = Path(path).expanduser().absolute()
    result = ImportResult()
    kw: dict[str, Any] = dict(source=source, repo_id=repo_id, commit=commit)
    if path.is_file():
        if not path.name.lower().endswith(".gguf"):
            raise ModelFileError(f"{path.name} is not a GGUF file")
        if is_projector(path):
            raise ModelFileError(f"{path.name} is a vision projector (mmproj), not a model")
        projector, misfits = projectors_beside(path)  # the model's vision, if one beside it fits it
        result.imported.append(_add_gguf(library, _shards(path), [projector] if projector is not None else [], **kw))
        result.skipped += [Skipped(p, reason) for p, reason in misfits]
        return result
    if not path.is_dir():
        raise ModelFileError(f"no such file or folder: {path}")
    if is_mlx_folder(path):
        result.imported.append(_add_mlx(library, path, **kw))
        return result
    found = [RepoFile(p.relative_to(path).as_posix(), 0) for p in sorted(path.rglob("*.gguf")) if p.is_file()]
    projectors = [path / f.path for f in found if is_projector(f.path)]
    paired: set[Path] = set()
    refused: dict[Path, str] = {}
    for g in group_gguf(found):
        first = path / g.files[0].path
        try:
            shards = _shards(first)
            if len(shards) != len(g.files):
                raise ModelFileError(f"split GGUF {first.name} has stray shards next to it")
            # Of every projector in the folder, one that fits this model (another model's may sit beside it).
            projector, unfit = pick_projector(first, projectors, g.label)
            refused.update(unfit)
            mmproj = [projector] if projector is not None else []
            result.imported.append(_add_gguf(library, shards, mmproj, **kw))
            paired.update(mmproj)
        except ModelFileError as exc:
            result.skipped.append(Skipped(first, str(exc)))
    if result.imported:  # a projector no model here could use is said; one another model took is not
        result.skipped += [Skipped(p, reason) for p, reason in refused.items() if p not in paired]
    if not result.imported:
        if result.skipped:
            raise ModelFileError("; ".join(s.reason for s in result.skipped))
        raise ModelFileError(f"no GGUF or MLX model in {path}")
    return result


def _try(library: Library, result: ImportResult, path: Path, **kw) -> None:
    try:
        result.extend(import_path(library, path, **kw))
    except ModelFileError as exc:
        result.skipped.append(Skipped(path, str(exc)))


def hf_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache as the environment says now (huggingface_hub reads it only at import)."""
    environ = os.environ if env is None else env
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def import_hf_cache(library: Library, cache_dir: str | os.PathLike[str] | None = None) -> ImportResult:
    """GGUF files and MLX snapshots already in the Hugging Face cache, imported in place."""
    result = ImportResult()
    try:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound
    except ImportError:
        logger.info("huggingface_hub is not installed; no HF cache to import")
        return result
    cache_dir = Path(cache_dir) if cache_dir else hf_cache_dir()
    try:
        info = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return result
    except (OSError, ValueError) as exc:
        result.skipped.append(Skipped(Path(str(cache_dir or "")), f"cannot read the Hugging Face cache: {exc}"))
        return result
    for warning in info.warnings:
        result.skipped.append(Skipped(Path(getattr(warning, "path", "") or ""), str(warning)))
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        # A branch head wins over detached older snapshots; otherwise the most recently modified one.
        rev = max(repo.revisions, key=lambda r: (bool(r.refs), r.last_modified))
        snapshot = Path(rev.snapshot_path)
        kw = dict(source="hf-cache", repo_id=repo.repo_id, commit=rev.commit_hash)
        if is_mlx_folder(snapshot):
            if not _looks_mlx(snapshot, repo.repo_id):
                result.skipped.append(Skipped(snapshot, f"{repo.repo_id} is a safetensors model, not MLX"))
                continue
            _try(library, result, snapshot, **kw)
        elif any(f.file_name.lower().endswith(".gguf") for f in rev.files):
            _try(library, result, snapshot, **kw)
        else:
            result.skipped.append(Skipped(snapshot, f"{repo.repo_id} holds no GGUF or MLX model"))
    return result


def _looks_mlx(folder: Path, repo_id: str) -> bool:
    """mlx-lm writes `quantization` into config.json; unquantized MLX repos say so in their name."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(config, dict) and "quantization" in config) or "mlx" in repo_id.lower()


def lmstudio_roots() -> list[Path]:
    return [Path(p).expanduser() for p in LMSTUDIO_ROOTS]


def import_lmstudio(library: Library, roots: Iterable[str | os.PathLike[str]] | None = None) -> ImportResult:
    """LM Studio keeps models as `<root>/<publisher>/<model>/<files>`; each model folder is imported in place."""
    result = ImportResult()
    for root in [Path(r).expanduser() for r in roots] if roots is not None else lmstudio_roots():
        if not root.is_dir():
            result.absent.append(root)
            continue
        result.searched.append(root)
        for publisher in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for model in sorted(p for p in publisher.iterdir() if p.is_dir() and not p.name.startswith(".")):
                _try(library, result, model, source="lmstudio", repo_id=f"{publisher.name}/{model.name}")
    return result


def import_ollama(library: Library, roots: Iterable[str | os.PathLike[str]] | None = None) -> ImportResult:
    """Ollama's models, in place (ollama_import): each model blob once, named NAME:TAG (the `latest` tag when
    several tags name one blob), with its projector when one fits it."""
    from app.core.library.ollama_import import ollama_roots, scan_ollama

    result = ImportResult()
    for root in [Path(r).expanduser() for r in roots] if roots is not None else ollama_roots():
        if not (root / "manifests").is_dir():
            result.absent.append(root)
            continue
        result.searched.append(root)
        found, refused = scan_ollama(root)
        result.skipped += [Skipped(path, reason) for path, reason in refused]
        by_blob: dict[Path, list[Any]] = {}
        for model in found:
            by_blob.setdefault(model.model, []).append(model)
        for blob, tags in by_blob.items():
            model = next((m for m in tags if m.name.endswith(":latest")), tags[0])
            try:
                projector, misfits = pick_projector(blob, [model.projector] if model.projector else [], None)
                result.skipped += [Skipped(p, reason) for p, reason in misfits]
                result.imported.append(
                    _add_gguf(
                        library,
                        [blob],
                        [projector] if projector is not None else [],
                        source="ollama",
                        repo_id=None,
                        commit=None,
                        name=model.name,
                    )
                )
            except ModelFileError as exc:
                result.skipped.append(Skipped(model.manifest, f"{model.name}: {exc}"))
    return result
