"""What the routes work with: the one engine host (shared with the chat), the library and the model
resolver, and the request log. Reached from a route as `hearth(request)`."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import Request

from app.core.documents.vector_stores import VectorStores
from app.core.engines.base import ModelInfo
from app.core.formats import GGUF, MLX
from app.core.library.projectors import projector_refusal, sees_images
from app.core.library.store import Library, LocalModel
from app.core.runtime.job_host import JobHost, Resident
from app.core.runtime.jobs import same_path
from app.core.runtime.resolve import ModelResolver
from app.server.errors import APIError
from app.server.job_stream import JobStream, cancel_all
from app.server.openai.token_ids import TokenTables
from app.server.remote_forward import RemotePool
from app.server.request_log import RequestLog
from app.server.responses.store import ResponseStore
from app.server.web_images import WebImageFetcher

if TYPE_CHECKING:
    from app.core.documents.service import Documents
    from app.core.downloads.manager import DownloadManager
    from app.core.hub.client import HubClient

LATEST_TAG = ":latest"  # Ollama's tag for a name typed without one
HUB_PREFIXES = ("hf.co/", "huggingface.co/")  # how Ollama's clients name a Hugging Face GGUF
_ROLE_NAMES = {"chat": "a chat model", "embedding": "an embedding model", "rerank": "a reranker"}


@dataclass
class ServerContext:
    host: JobHost
    library: Library | None = None
    resolver: ModelResolver | None = None
    log: RequestLog = field(default_factory=RequestLog)
    streams: weakref.WeakSet[JobStream] = field(default_factory=weakref.WeakSet)  # requests waiting on a job
    responses: ResponseStore = field(default_factory=ResponseStore)  # stored Responses (previous_response_id)
    remotes: RemotePool | None = None  # remote models this endpoint forwards to (None: none)
    # /api/pull: a Hub client for the current settings, and the download queue pulls join (None: no pulls).
    hub: Callable[[], HubClient] | None = None
    downloads: Callable[[], DownloadManager] | None = None
    # /v1/embeddings token-id input, read as OpenAI's cl100k_base tokens (openai/token_ids.py).
    token_tables: TokenTables = field(default_factory=TokenTables)
    # Images requests name by http(s) URL are fetched with this (None: refused; the setting is off).
    web_images: WebImageFetcher | None = None
    # The app's documents as the API sees them: /v1/files, /v1/vector_stores and the Responses file_search tool
    # (None: refused). Built by whoever builds the server (ApiService, `hearth serve`): VectorStores.over.
    stores: VectorStores | None = None

    @property
    def documents(self) -> Documents | None:
        return self.stores.documents if self.stores is not None else None

    @property
    def uploads(self) -> Path | None:
        """The folder uploads go to."""
        return self.stores.uploads.folder if self.stores is not None else None

    def vector_stores(self) -> VectorStores:
        """Any thread: the API's view of the documents; a 400 naming why when this server has none."""
        if self.stores is None:
            raise APIError("documents are not available on this server", code="documents_unavailable")
        return self.stores

    def cancel_streams(self) -> int:
        """Any thread: cancel the jobs of every open request (the server is stopping); returns how many."""
        return cancel_all(self.streams)

    def local_model(self, path: Path | str) -> LocalModel | None:
        """The library entry for a loaded file, if it has one."""
        return self.library.find(str(path)) if self.library is not None else None

    def job_model(self, name: str | None) -> str | None:
        """The model a job names for a request's `model`. Without a library to load from, only the loaded
        model answers (by its id); with one, the host resolves the name when the job starts (JIT)."""
        if not name:
            return None
        if self.resolver is not None:
            return name
        loaded = self.host.state.model
        if loaded is not None and name == self.model_id(loaded):
            return None
        raise APIError(
            f"the model {name[:200]!r} is not the one loaded here", code="model_not_found", param="model", status=404
        )

    def library_name(self, name: str | None) -> str | None:
        """The library model a request's `model` stands for when it is written the way Ollama's clients write
        names: `NAME:latest` (what /api/tags lists) or `hf.co/OWNER/REPO:QUANT` (what /api/pull took).
        Anything else, and a name the library has as it is, is passed on unchanged."""
        if not name or self.library is None or self.in_library(name):
            return name
        bare = name
        for prefix in HUB_PREFIXES:
            if bare.lower().startswith(prefix):
                bare = bare[len(prefix) :]
                break
        for candidate in (bare, bare.removesuffix(LATEST_TAG)):
            if candidate != name and self.in_library(candidate):
                return candidate
        return name

    def route(self, name: str | None) -> tuple[JobHost, str | None]:
        """The host a request's `model` runs on and the model its job names: an exposed remote model goes
        to its own host (the local model stays loaded); anything else to the one host, as `job_model`."""
        name = self.library_name(name)
        pool = self.remotes
        entry = pool.find(name) if name and pool is not None else None
        if name and pool is not None and entry is not None and not self.in_library(name):
            if not entry.remote.expose_locally:
                raise APIError(
                    f"the model {name[:200]!r} is on the remote {entry.remote.name}, which this endpoint does not "
                    "expose (turn on “expose on the local endpoint” for that remote)",
                    code="model_not_found",
                    param="model",
                    status=404,
                )
            return pool.host_for(name), name
        return self.host, self.job_model(name)

    def resident(self, model: LocalModel, residents: list[Resident] | None = None) -> Resident | None:
        """The loaded instance of a library model, if it is loaded; `residents`: the host's, when a listing
        has already asked for them (one snapshot for every model it describes)."""
        listed = self.host.residents() if residents is None else residents
        return next((r for r in listed if same_path(r.key, model.path)), None)

    async def check_role(self, name: str | None, serves: tuple[str, ...], route: str) -> None:
        """Refuse (400) a request naming a library model whose role (chat, embedding, rerank) is not in
        `serves`, before anything loads it: an embedding model asked to chat would otherwise be loaded,
        maybe unloading others to make room, only to refuse."""
        if not name or self.resolver is None or self.library is None:
            return
        resolver = self.resolver
        model = await asyncio.to_thread(self.library.find, self.library_name(name) or name)
        if model is None or not model.ready or model.format != GGUF:
            return  # not found answers as before, from the job; only a GGUF says its role before loading
        role = await asyncio.to_thread(resolver.role, model)
        if role not in serves:
            raise APIError(
                f"{model.name} is {_ROLE_NAMES[role]}; {route} needs {' or '.join(_ROLE_NAMES[r] for r in serves)}",
                code="unsupported",
                param="model",
                status=400,
            )

    async def check_vision(self, name: str | None) -> None:
        """Refuse (400, naming `images`) an image for a library model that cannot see (a GGUF without a vision
        projector, an MLX text model or one mlx-vlm cannot read here), before it loads, naming the library's
        models that can (the engine refuses too, for a model named otherwise)."""
        if not name or self.library is None:
            return
        library = self.library
        model = await asyncio.to_thread(library.find, self.library_name(name) or name)
        if model is None or model.format not in (GGUF, MLX) or await asyncio.to_thread(sees_images, model):
            return  # other formats answer from their engine
        seeing = await asyncio.to_thread(lambda: [m.name for m in library.list(status="ready") if sees_images(m)])
        where = (
            f"models here that can: {', '.join(seeing[:5])}"
            if seeing
            else (
                "no model here can yet: download one that has a vision projector (Gemma 3, SmolVLM, Mistral Small 3.1)"
            )
        )
        why = await asyncio.to_thread(projector_refusal, model)  # kept with another model's projector
        raise APIError(
            f"{model.name} cannot see images{f' ({why})' if why else ''}; {where}",
            code="unsupported",
            param="images",
            status=400,
        )

    def in_library(self, name: str) -> bool:
        return self.library is not None and self.library.find(name) is not None

    def model_id(self, info: ModelInfo) -> str:
        """How the API names a loaded model: its library name, else its file name."""
        model = self.local_model(info.path)
        return model.name if model is not None else Path(info.path).name


def hearth(request: Request) -> ServerContext:
    ctx = request.app.state.hearth
    assert isinstance(ctx, ServerContext)
    return ctx
