"""A repo's variants with what the planner needs, read remotely and never the weights: GGUF headers by
HTTP Range, MLX config.json and safetensors headers, EXL2 branch configs. Every request goes through
the HubClient (its endpoint, its token or none); this module decides what to read."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.core.formats import EXL2, GGUF, MLX
from app.core.hub.errors import HubError, HubNotFound
from app.core.hub.ranged import HttpRangeSource, new_http_client
from app.core.hub.variants import VariantChoice, repo_variants
from app.core.models.errors import ModelFileError
from app.core.models.exl2 import read_exl2_branch
from app.core.models.files import quant_label
from app.core.models.mlx_meta import MlxVariant, mlx_variant, weight_files
from app.core.models.projector import ProjectorMemory, projector_from_size, projector_memory_of
from app.core.models.recommend import Variant
from app.core.models.safetensors_meta import INDEX_NAME, MAX_HEADER_BYTES, read_safetensors_model
from app.core.models.spec import spec_from_gguf
from app.core.models.vision_config import has_vision_half, mlx_vlm_installed, uses_mrope

if TYPE_CHECKING:
    import httpx

    from app.core.hub.client import HubClient

logger = logging.getLogger(__name__)

HEADER_WORKERS = 4  # GGUF quants of a repo read in parallel; each is a few ranged GETs
SAFETENSORS_CHUNK = 1024 * 1024
MAX_INDEX_BYTES = 8 * 1024 * 1024  # the largest models' weight maps run to a few MiB


def assessable_variants(client: HubClient, repo_id: str, revision: str = "main") -> list[Variant]:
    """Every variant of `repo_id`, each with a ModelSpec from its real metadata. A GGUF whose header
    cannot be read (gated, damaged) is still listed, by size only."""
    choices = repo_variants(client, repo_id, revision)
    ggufs = [c for c in choices if c.format == GGUF]
    out: list[Variant] = []
    with new_http_client(client.timeout) as http:
        if ggufs:
            with ThreadPoolExecutor(HEADER_WORKERS, thread_name_prefix="hub-headers") as pool:
                # One projector often serves every quant: each is read once.
                unique = {c.mmproj[0].path: c for c in ggufs if c.mmproj}
                read = {path: pool.submit(projector_cost, client, c, http) for path, c in unique.items()}
                projectors = {path: f.result() for path, f in read.items()}
                futures = [pool.submit(gguf_variant, client, c, http, projectors) for c in ggufs]
                for choice, future in zip(ggufs, futures):
                    try:
                        out.append(future.result())
                    except ModelFileError as exc:
                        logger.warning("%s %s: %s", repo_id, choice.label, exc)
                        out.append(choice.to_variant())
        for choice in choices:
            if choice.format == MLX:
                out.append(_mlx_as_variant(client, choice, http))
            elif choice.format == EXL2:
                out.append(exl2_variant(client, choice))
    return out


def gguf_variant(
    client: HubClient,
    choice: VariantChoice,
    http: httpx.Client | None = None,
    projectors: Mapping[str, ProjectorMemory] | None = None,
) -> Variant:
    """One GGUF quant with the spec read from every shard's header (the mmproj is not part of the model), and
    what its vision projector costs (from `projectors`, by path, else read here)."""
    shards = [f.path for f in choice.files if f not in choice.mmproj]
    spec = spec_from_gguf(client.gguf_headers(choice.repo_id, shards, choice.revision, http=http))
    projector = None
    if choice.mmproj:
        read = projectors.get(choice.mmproj[0].path) if projectors is not None else None
        projector = read or projector_cost(client, choice, http)
    # A file name that states no quant is labelled by what its header says it holds.
    label = choice.label if quant_label(choice.label) or not spec.file_type else spec.file_type
    return Variant(
        label=label,
        format=GGUF,
        size_bytes=choice.size,
        spec=spec,
        repo_id=choice.repo_id,
        revision=choice.revision,
        files=[f.path for f in choice.files],
        projector_memory=projector,
    )


def projector_cost(client: HubClient, choice: VariantChoice, http: httpx.Client | None = None) -> ProjectorMemory:
    """What a quant's vision projector costs, from its header (a few ranged reads), else from its size."""
    mmproj = choice.mmproj[0]
    try:
        header = client.gguf_headers(choice.repo_id, [mmproj.path], choice.revision, http=http)[0]
        return projector_memory_of(header)
    except (HubError, ModelFileError) as exc:
        logger.info("%s: the projector %s was sized, not read: %s", choice.repo_id, mmproj.path, exc)
        return projector_from_size(mmproj.size)


def read_mlx_repo(
    client: HubClient,
    repo_id: str,
    revision: str = "main",
    *,
    files: Iterable[str] | None = None,
    config: Mapping[str, Any] | None = None,
    http: httpx.Client | None = None,
) -> MlxVariant:
    """An MLX repo: config.json (checked for remote code before anything else is read), the index when
    the listing has one (probed when there is no listing), and each safetensors header by Range."""
    if config is None:
        config = client.config(repo_id, revision)
    listing = list(files) if files is not None else None
    index = None
    if listing is None or INDEX_NAME in listing:
        try:
            index = client.json_file(repo_id, INDEX_NAME, revision, max_bytes=MAX_INDEX_BYTES)
        except HubNotFound:
            if listing is not None:
                raise
    own = http is None
    http = http or new_http_client(client.timeout)
    try:

        def open_source(name: str) -> HttpRangeSource:
            return client.range_source(
                repo_id,
                name,
                revision,
                http=http,
                chunk_size=SAFETENSORS_CHUNK,
                max_bytes=MAX_HEADER_BYTES + SAFETENSORS_CHUNK,
            )

        model = read_safetensors_model(weight_files(listing, index), open_source)
    finally:
        if own:
            http.close()
    return mlx_variant(repo_id, config, model, revision=revision)


def _mlx_as_variant(client: HubClient, choice: VariantChoice, http: httpx.Client) -> Variant:
    config = choice.config if choice.config is not None else client.config(choice.repo_id, choice.revision)
    mlx = read_mlx_repo(
        client, choice.repo_id, choice.revision, files=[f.path for f in choice.files], config=config, http=http
    )
    return Variant(
        label=choice.label,
        format=MLX,
        size_bytes=mlx.weight_bytes,
        spec=mlx.spec,
        bpw=mlx.bpw,
        repo_id=choice.repo_id,
        revision=choice.revision,
        files=[f.path for f in choice.files],
        mlx_vision=has_vision_half(config) and not uses_mrope(config) and mlx_vlm_installed(),
    )


def exl2_variant(client: HubClient, choice: VariantChoice) -> Variant:
    """One EXL2 branch: its config.json and the safetensors sizes the branch listing gave."""
    config = choice.config if choice.config is not None else client.config(choice.repo_id, choice.revision)
    sizes = {f.path: f.size for f in choice.files}
    v = read_exl2_branch(config, sizes, choice.branch, repo_id=choice.repo_id)
    return Variant(
        label=choice.label,
        format=EXL2,
        size_bytes=v.weight_bytes,
        spec=v.spec,
        bpw=v.bpw,
        repo_id=choice.repo_id,
        revision=choice.branch,
        files=[f.path for f in choice.files],
    )
