"""Ollama's models, imported in place: Ollama keeps each model as a manifest (manifests/<host>/<namespace>/<name>/
<tag>, JSON listing its layers by media type and digest) and content-addressed blobs (blobs/sha256-<hex>). The
model layer is a GGUF file, the projector layer a vision projector; the template, system and params layers are
Ollama's own text. Nothing is copied: the library points at the blobs, named NAME:TAG as `ollama list` shows.

Everything read from the tree is untrusted (docs/security.md): a manifest is a bounded JSON file, names come
from folder names in Ollama's character set, a digest must be sha256 and 64 hex digits before it names a file,
and a blob must resolve inside the blobs folder (a link pointing elsewhere is refused).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
MODEL, PROJECTOR = "application/vnd.ollama.image.model", "application/vnd.ollama.image.projector"
TEMPLATE, SYSTEM = "application/vnd.ollama.image.template", "application/vnd.ollama.image.system"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few hundred bytes
MAX_TEXT_BYTES = 64 << 10  # a template or system prompt
MAX_MANIFESTS = 10_000
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # a name's part as Ollama allows it (a host: a port)


@dataclass(frozen=True)
class OllamaModel:
    """One manifest: its name (NAME:TAG, or namespace/NAME:TAG outside Ollama's library) and its blobs."""

    name: str
    manifest: Path
    model: Path
    projector: Path | None = None
    template: str | None = None  # Ollama's Go template (not a Jinja one: kept for reference, not run)
    system: str | None = None


def ollama_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where Ollama keeps its models: OLLAMA_MODELS when set (it replaces the default), else ~/.ollama/models
    and, on Linux, the system service's (/usr/share/ollama/.ollama/models)."""
    environ = os.environ if env is None else env
    if environ.get("OLLAMA_MODELS"):
        return [Path(environ["OLLAMA_MODELS"]).expanduser()]
    roots = [Path("~/.ollama/models").expanduser()]
    if sys.platform.startswith("linux"):
        roots.append(Path("/usr/share/ollama/.ollama/models"))
    return roots


def scan_ollama(root: Path) -> tuple[list[OllamaModel], list[tuple[Path, str]]]:
    """Every manifest under `root` with a usable model layer, and each one refused with why."""
    found: list[OllamaModel] = []
    refused: list[tuple[Path, str]] = []
    for manifest, parts in _manifests(root / "manifests"):
        try:
            found.append(_read(root / "blobs", manifest, parts))
        except ValueError as exc:
            refused.append((manifest, str(exc)))
    return found, refused


def _manifests(folder: Path) -> Iterable[tuple[Path, tuple[str, str, str, str]]]:
    """manifests/<host>/<namespace>/<name>/<tag>, in a fixed depth; folders outside Ollama's names are passed by."""
    n = 0
    for host in _children(folder):
        for namespace in _children(host):
            for name in _children(namespace):
                for tag in sorted(name.iterdir()) if name.is_dir() else ():
                    if not tag.is_file() or not _PART.fullmatch(tag.name):
                        continue
                    n += 1
                    if n > MAX_MANIFESTS:
                        logger.warning("more than %d Ollama manifests; the rest are left out", MAX_MANIFESTS)
                        return
                    yield tag, (host.name, namespace.name, name.name, tag.name)


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and _PART.fullmatch(p.name))
    except OSError:
        return []


def display_name(host: str, namespace: str, name: str, tag: str) -> str:
    """As Ollama shows it: NAME:TAG for its own library, the namespace or host in front otherwise."""
    if host == DEFAULT_HOST:
        prefix = "" if namespace == DEFAULT_NAMESPACE else f"{namespace}/"
    else:
        prefix = f"{host}/{namespace}/"
    return f"{prefix}{name}:{tag}"


def _read(blobs: Path, manifest: Path, parts: tuple[str, str, str, str]) -> OllamaModel:
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError("the manifest is too large to be Ollama's")
        data = json.loads(manifest.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read the manifest: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError("the manifest is not JSON") from exc
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ValueError("the manifest lists no layers")
    by_type: dict[str, list[object]] = {}
    for layer in layers:
        if isinstance(layer, dict) and isinstance(layer.get("mediaType"), str):
            by_type.setdefault(layer["mediaType"], []).append(layer.get("digest"))
    models = by_type.get(MODEL, [])
    if len(models) != 1:
        raise ValueError("no model layer" if not models else "several model layers (adapters are not supported)")
    projectors = by_type.get(PROJECTOR, [])
    return OllamaModel(
        name=display_name(*parts),
        manifest=manifest,
        model=blob_path(blobs, models[0]),
        projector=blob_path(blobs, projectors[0]) if len(projectors) == 1 else None,
        template=_text(blobs, by_type.get(TEMPLATE)),
        system=_text(blobs, by_type.get(SYSTEM)),
    )


def blob_path(blobs: Path, digest: object) -> Path:
    """The blob a digest names, checked: sha256 and 64 hex digits, a file that resolves inside `blobs`."""
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise ValueError(f"a layer's digest is not sha256 and 64 hex digits: {str(digest)[:80]!r}")
    path = blobs / f"sha256-{match[1]}"
    if not path.exists() and (blobs / f"sha256:{match[1]}").exists():
        path = blobs / f"sha256:{match[1]}"  # the name older releases wrote, outside Windows
    if not path.is_file():
        raise ValueError(f"blob {path.name} is missing (pulled partway, or removed)")
    try:
        inside = Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(blobs)))
    except OSError:
        inside = False
    if not inside:
        raise ValueError(f"blob {path.name} points outside Ollama's blobs folder")
    return path


def _text(blobs: Path, digests: list[object] | None) -> str | None:
    if not digests or len(digests) != 1:
        return None
    try:
        with open(blob_path(blobs, digests[0]), "rb") as f:
            return f.read(MAX_TEXT_BYTES).decode("utf-8", "replace")
    except (ValueError, OSError) as exc:
        logger.debug("an Ollama text layer could not be read: %s", exc)
        return None
