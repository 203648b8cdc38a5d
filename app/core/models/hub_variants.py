"""Variants of a Hub repo, with metadata read remotely: GGUF headers by Range, MLX configs, EXL2 branches."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.core.hub.variants import GgufVariant, RepoFile, group_gguf, pickle_only
from app.core.models.errors import ModelFileError
from app.core.models.recommend import Variant
from app.core.models.remote import new_http_client, read_remote_gguf_split, resolve_url
from app.core.models.spec import spec_from_gguf

logger = logging.getLogger(__name__)
HEADER_WORKERS = 4


def hf_api(endpoint: str | None, token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


def repo_files(info: Any) -> list[RepoFile]:
    out = []
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        out.append(RepoFile(s.rfilename, int(s.size or (lfs.size if lfs else 0) or 0),
                            getattr(lfs, "sha256", None) if lfs else None))
    return out


def _gguf(repo_id: str, g: GgufVariant, endpoint: str, commit: str, token: str | None, client) -> Variant:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    urls = [resolve_url(endpoint, repo_id, f.path, commit) for f in g.files]
    spec = spec_from_gguf(read_remote_gguf_split(urls, client=client, headers=headers))
    return Variant(label=spec.file_type if g.label == g.files[0].path else g.label, format="gguf",
                   size_bytes=g.size, spec=spec, repo_id=repo_id, revision=commit,
                   files=[f.path for f in g.files + g.mmproj])


def variants_from_repo(
    repo_id: str, *, endpoint: str | None = None, token: str | None = None, revision: str = "main",
    api: Any = None,
) -> list[Variant]:
    """Every variant a user can choose in `repo_id`, each with a ModelSpec from its real metadata."""
    from huggingface_hub.utils import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    api = api or hf_api(endpoint, token)
    endpoint = (endpoint or getattr(api, "endpoint", None) or "https://huggingface.co").rstrip("/")
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    except RepositoryNotFoundError as exc:
        raise ModelFileError(f"{repo_id}: no such model on the Hub (or it is private: add a token)") from exc
    except GatedRepoError as exc:
        raise ModelFileError(f"{repo_id} is gated: accept the licence on the model page, then add a token") from exc
    except HfHubHTTPError as exc:
        raise ModelFileError(f"{repo_id}: the Hub answered {exc}") from exc
    files = repo_files(info)
    if pickle_only(files):
        raise ModelFileError(f"{repo_id} offers only pickle weights (.bin/.pt), which Hearth never loads")
    tags = set(getattr(info, "tags", None) or [])
    library = getattr(info, "library_name", None)
    commit = info.sha or revision
    out: list[Variant] = []
    groups = group_gguf(files)
    if groups:
        with new_http_client() as client, ThreadPoolExecutor(HEADER_WORKERS) as pool:
            futures = [pool.submit(_gguf, repo_id, g, endpoint, commit, token, client) for g in groups]
            for g, fut in zip(groups, futures):
                try:
                    out.append(fut.result())
                except ModelFileError as exc:
                    logger.warning("%s %s: %s", repo_id, g.label, exc)
                    out.append(Variant(label=g.label, format="gguf", size_bytes=g.size, repo_id=repo_id,
                                       revision=commit, files=[f.path for f in g.files]))
    names = {f.path for f in files}
    if ("mlx" in tags or library == "mlx") and "config.json" in names:
        from app.core.models.mlx_meta import read_mlx_repo

        mlx = read_mlx_repo(repo_id, endpoint=endpoint, revision=commit, files=sorted(names), token=token)
        label = f"{mlx.bits}-bit g{mlx.group_size}" if mlx.quantized else f"{mlx.bits}-bit"
        out.append(Variant(label=label, format="mlx", size_bytes=mlx.weight_bytes, spec=mlx.spec, bpw=mlx.bpw,
                           repo_id=repo_id, revision=commit, files=list(mlx.files)))
    if "exl2" in tags or library == "exllamav2":
        from app.core.models.exl2 import list_exl2_variants

        for v in list_exl2_variants(api, repo_id, token=token):
            out.append(Variant(label=f"{v.bpw:g}bpw", format="exl2", size_bytes=v.weight_bytes, spec=v.spec,
                               bpw=v.bpw, repo_id=repo_id, revision=v.branch, files=list(v.files)))
    if not out:
        raise ModelFileError(f"{repo_id} has no GGUF, MLX or EXL2 model Hearth can use")
    return out
