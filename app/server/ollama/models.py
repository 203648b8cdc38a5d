"""Ollama's model routes: `GET /` ("Ollama is running"), `GET /api/version`, `GET /api/tags`,
`POST /api/show`, `GET /api/ps`, `DELETE /api/delete`, and clear 501s for what Hearth does not do through
this API (`/api/copy`, `/api/create`, `/api/push`, `/api/blobs`). Library models are listed as
`NAME:latest` (names.py); what Ollama reads from its manifests is read here from the GGUF header."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from app.core.formats import GGUF, MLX
from app.core.library.projectors import sees_images
from app.core.library.store import LocalModel
from app.core.models.errors import ModelFileError
from app.core.models.gguf import ArraySummary, GGUFHeader, read_gguf_header
from app.core.runtime.chat_templates import header_template
from app.core.runtime.job_host import Resident
from app.core.runtime.jobs import ModelNotFound, same_path
from app.server.context import ServerContext, hearth
from app.server.errors import APIError
from app.server.models.admin import unload_library_model
from app.server.models.listing import capabilities as route_capabilities
from app.server.ollama.names import library_model, listed_name, rfc3339
from app.server.ollama.schemas import OllamaModelName

router = APIRouter()
# Ollama's clients gate features on its version (VS Code Copilot needs at least 0.6.4); this is the API level
# whose routes and fields Hearth answers, not Hearth's own version.
OLLAMA_API_VERSION = "0.12.6"
FOREVER = "2318-01-01T00:00:00Z"  # Ollama's expires_at for a model kept loaded for ever is far in the future
THINKING_MARKERS = ("<think>", "enable_thinking", "reasoning_content", "<|channel|>")


def digest(model: LocalModel) -> str:
    """A stable id for one version of a model's files (Ollama's is its manifest's sha256)."""
    files = "|".join(f"{f.path.name}:{f.size}" for f in model.files) or model.path.name
    return hashlib.sha256(f"{model.id}|{files}".encode()).hexdigest()


def parameter_size(n_params: int) -> str:
    """Ollama's "8.0B" / "135M"."""
    if n_params >= 1_000_000_000:
        return f"{n_params / 1e9:.1f}B"
    if n_params >= 1_000_000:
        return f"{n_params / 1e6:.0f}M"
    return str(n_params) if n_params else ""


def _header(model: LocalModel) -> GGUFHeader | None:
    if model.format != GGUF:
        return None
    try:
        return read_gguf_header(model.path, keep_array_items=0)
    except (ModelFileError, OSError):
        return None


def details(model: LocalModel, header: Any = None) -> dict[str, Any]:
    family = header.architecture if header is not None else None
    if family is None and model.format == MLX:
        family = MLX.value  # Ollama shows a family; an MLX folder's is its format
    n_params = header.n_params if header is not None else 0
    return {
        "parent_model": "",
        "format": GGUF.value if model.format == GGUF else "safetensors",  # Ollama's word for a file's format
        "family": family or "",
        "families": [family] if family else None,
        "parameter_size": parameter_size(n_params),
        "quantization_level": model.quant or (header.ftype_label if header is not None else "") or "",
    }


def listing(model: LocalModel) -> dict[str, Any]:
    name = listed_name(model.name)
    return {
        "name": name,
        "model": name,
        "modified_at": rfc3339(model.added_at),
        "size": model.size,
        "digest": digest(model),
        "details": details(model, _header(model)),
    }


FIM_KEYS = ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id")


def model_capabilities(ctx: ServerContext, model: LocalModel, header: GGUFHeader | None) -> list[str]:
    """Ollama's capability names, from the routes Hearth serves for the model's role. `insert` (a `suffix`
    on generate) where the GGUF names its fill-in-the-middle tokens; a model whose converter left them out,
    which llama.cpp finds by their text, still fills in the middle when asked."""
    role = ctx.resolver.role(model) if ctx.resolver is not None else "chat"
    serves = route_capabilities(model.format, role)
    template = header.chat_template if header is not None else None
    out = []
    if serves["chat"]:
        out += ["completion", "tools"]  # tools: in the template's own format, else Hearth's prompt fallback
        if template and any(m in template for m in THINKING_MARKERS):
            out.append("thinking")
        if header is not None and all(key in header.metadata for key in FIM_KEYS):
            out.append("insert")
        if sees_images(model):
            out.append("vision")
    if role == "embedding":
        out.append("embedding")
    return out


def show(ctx: ServerContext, model: LocalModel, verbose: bool) -> dict[str, Any]:
    header = _header(model)
    info: dict[str, Any] = {}
    template = ""
    if header is not None:
        for key, value in header.metadata.items():
            if isinstance(value, (list, ArraySummary)):
                info[key] = None if not verbose else (value if isinstance(value, list) else [])
            elif key != "tokenizer.chat_template":
                info[key] = value
        info["general.parameter_count"] = header.n_params
        # The template it runs with: the file's, the one picked for it, or its architecture's, and why.
        picked = ctx.resolver.template_for(model) if ctx.resolver is not None and ctx.resolver.template_for else None
        choice = header_template(header, picked)
        template = choice.source
        info["hearth.chat_template"] = choice.reason
    try:
        context = ctx.resolver.context_length(model) if ctx.resolver is not None else 0
    except ModelNotFound:
        context = 0
    parameters = f"num_ctx {context}" if context else ""
    return {
        # Named, not by its file: the path would tell any client the user's home folder and file layout.
        "modelfile": f"# Served by Hearth from its library\nFROM {listed_name(model.name)}\n",
        "parameters": parameters,
        "template": template,
        "details": details(model, header),
        "model_info": info,
        "capabilities": model_capabilities(ctx, model, header),
        "modified_at": rfc3339(model.added_at),
    }


@router.api_route("/", methods=["GET", "HEAD"], response_class=PlainTextResponse, include_in_schema=False)
async def root() -> str:
    """Ollama's answer to `GET /`, which its clients probe before anything else (open, as /api/version is:
    a fixed string that says only that a server is here)."""
    return "Ollama is running"


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": OLLAMA_API_VERSION}


@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    models = ctx.library.list(status="ready") if ctx.library is not None else []
    return {"models": await asyncio.to_thread(lambda: [listing(m) for m in models])}


@router.post("/api/show")
async def show_model(body: OllamaModelName, request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    model = await asyncio.to_thread(library_model, ctx, body.model)
    return await asyncio.to_thread(show, ctx, model, body.verbose)


def running(ctx: ServerContext, model: LocalModel, resident: Resident) -> dict[str, Any]:
    assert resident.state.model is not None
    info = resident.state.model
    if resident.pinned or resident.ttl_s is None or resident.ttl_s == float("inf"):
        expires = FOREVER
    else:
        left = resident.idle_left_s if resident.idle_left_s is not None else resident.ttl_s
        expires = rfc3339(time.time() + left)
    layers = info.extra.get("n_gpu_layers") or 0
    name = listed_name(model.name)
    return {
        "name": name,
        "model": name,
        "size": resident.memory_bytes or model.size,
        "digest": digest(model),
        "details": details(model, _header(model)),
        "expires_at": expires,
        # Hearth plans layers, not bytes, per device: a model offloaded at all is counted on the GPU whole.
        "size_vram": (resident.memory_bytes or model.size) if layers else 0,
        "context_length": info.n_ctx,
    }


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    residents = [r for r in ctx.host.residents() if r.state.model is not None]

    def describe() -> list[dict[str, Any]]:
        out = []
        for resident in residents:
            model = ctx.local_model(resident.key)
            if model is not None:
                out.append(running(ctx, model, resident))
        return out

    return {"models": await asyncio.to_thread(describe)}


@router.delete("/api/delete", response_class=Response, responses={200: {"description": "deleted", "content": {}}})
async def delete(body: OllamaModelName, request: Request) -> Response:
    """Forgets the model, unloading it first if it is loaded. Files in Hearth's models folder are deleted;
    a file imported in place stays where the user keeps it (only the app's own Delete removes those)."""
    ctx = hearth(request)
    model = await asyncio.to_thread(library_model, ctx, body.model)
    if any(same_path(r.key, model.path) for r in ctx.host.residents()):
        await unload_library_model(ctx, model)  # a pinned model refuses (409) and stays in the library
    assert ctx.library is not None
    await asyncio.to_thread(ctx.library.delete, model.id, True)
    return Response(status_code=200)


_NOT_HERE = {
    "/api/copy": "copying a model is not supported: Hearth's library names each file once",
    "/api/create": "creating a model from a Modelfile is not supported: import a GGUF in Hearth instead",
    "/api/push": "pushing to a registry is not supported",
}


async def _not_supported(request: Request) -> Response:
    raise APIError(_NOT_HERE.get(request.url.path, "not supported"), "not_supported_error", status=501)


for _path in _NOT_HERE:
    router.add_api_route(_path, _not_supported, methods=["POST"])
router.add_api_route("/api/blobs/{digest}", _not_supported, methods=["HEAD", "POST"], include_in_schema=False)
