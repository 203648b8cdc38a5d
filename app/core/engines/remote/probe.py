"""What is at a remote URL: which server (vLLM, SGLang, llama-server, Ollama, LM Studio, TGI, another
Hearth, or any OpenAI-compatible one), its version, and its models with their context length where the
server says. `/v1/models` is retried with backoff (a server still starting answers 502/503 or refuses);
the extra endpoints that tell the servers apart are asked once each, briefly, and may be missing."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.core.engines.remote.errors import RemoteError, RemoteRefused, RemoteUnreachable

logger = logging.getLogger(__name__)

KINDS = {
    "hearth": "Hearth",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llama-server": "llama-server (llama.cpp)",
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "tgi": "Text Generation Inference",
    "openai-compatible": "OpenAI-compatible server",
}
RETRY_STATUSES = (502, 503, 504)
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 10.0
EXTRA_TIMEOUT_S = 2.0  # the endpoints that only tell servers apart: missing ones must not slow a probe


@dataclass(frozen=True)
class RemoteModel:
    id: str
    context_length: int | None = None  # None: the server does not say
    owned_by: str = ""


@dataclass(frozen=True)
class ProbeResult:
    url: str
    kind: str  # a key of KINDS
    version: str = ""
    models: list[RemoteModel] = field(default_factory=list)

    @property
    def kind_name(self) -> str:
        return KINDS.get(self.kind, self.kind)


def normalize_url(url: str) -> str:
    """The server's base URL, without a trailing `/v1` (people paste either), with a scheme."""
    text = url.strip()
    if not text:
        raise RemoteError("the remote URL is empty")
    if "://" not in text:
        text = "http://" + text
    if not text.startswith(("http://", "https://")):
        raise RemoteError(f"{url!r} is not an http(s) URL")
    text = text.rstrip("/")
    if text.endswith("/v1"):
        text = text[:-3]
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise RemoteError(f"{url!r} is not a valid URL: {exc}") from exc
    if not parsed.host or text.endswith(":"):
        raise RemoteError(f"{url!r} has no host")
    return text


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def probe(
    url: str,
    api_key: str | None = None,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    read_timeout_s: float = READ_TIMEOUT_S,
    retries: int = 2,
    backoff_s: float = 0.25,
    transport: httpx.BaseTransport | None = None,
) -> ProbeResult:
    """Raises RemoteUnreachable (nothing answers after the retries), RemoteRefused (the key), or
    RemoteError (something answers, but not an OpenAI-compatible server)."""
    base = normalize_url(url)
    timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
    with httpx.Client(base_url=base, headers=auth_headers(api_key), timeout=timeout, transport=transport) as client:
        listing = _models_with_retry(client, base, retries, backoff_s)
        data = [m for m in listing.get("data") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        kind, version, contexts = _identify(client, data)
    models = [RemoteModel(m["id"], _context(m, contexts), str(m.get("owned_by") or "")) for m in data if m.get("id")]
    logger.info("probed %s: %s %s, %d models", base, kind, version, len(models))
    return ProbeResult(base, kind, version, models)


def _models_with_retry(client: httpx.Client, base: str, retries: int, backoff_s: float) -> dict[str, Any]:
    delay = backoff_s
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(delay)
            delay *= 2
        try:
            response = client.get("/v1/models")
        except httpx.TimeoutException:
            last = "it did not answer in time"
            continue
        except httpx.TransportError as exc:
            last = _transport_reason(exc)
            continue
        if response.status_code in RETRY_STATUSES:
            last = f"it answered {response.status_code} (still starting?)"
            continue
        if response.status_code in (401, 403):
            raise RemoteRefused(f"{base} refused the API key ({response.status_code}); check the key for this remote")
        if response.status_code == 404:
            raise RemoteError(f"{base} has no /v1/models: it is not an OpenAI-compatible server (or not its base URL)")
        if response.status_code >= 400:
            raise RemoteError(f"{base} answered /v1/models with {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise RemoteError(f"{base}/v1/models did not answer JSON: not an OpenAI-compatible server") from None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise RemoteError(f"{base}/v1/models is not a model list")
        return body
    tries = "once" if retries == 0 else f"{retries + 1} times"
    raise RemoteUnreachable(f"could not reach {base}: {last} (tried {tries})")


def _transport_reason(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"the connection failed ({exc or 'refused'})"
    return f"{type(exc).__name__}: {exc}"


def _get_json(client: httpx.Client, path: str) -> Any:
    """One quick GET; None when the endpoint is missing, slow or not JSON (that only rules a kind out)."""
    try:
        response = client.get(path, timeout=EXTRA_TIMEOUT_S)
        if response.status_code >= 400:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError):
        logger.debug("no %s on the remote", path)
        return None


def _identify(client: httpx.Client, data: list[dict[str, Any]]) -> tuple[str, str, dict[str, int]]:
    """(kind, version, context length by model id from endpoints other than /v1/models)."""
    owners = {str(m.get("owned_by") or "").lower() for m in data}
    if any("context_by_route" in m for m in data):
        health = _get_json(client, "/health")
        return "hearth", _version(health), {}
    if "vllm" in owners or any("max_model_len" in m and "root" in m for m in data):
        return "vllm", _version(_get_json(client, "/version")), {}
    if "sglang" in owners:
        info = _get_json(client, "/get_server_info")
        return "sglang", _version(info), {}
    if "llamacpp" in owners:
        return "llama-server", "", _llama_props(client, data)
    if "organization_owner" in owners:
        return "lmstudio", "", _lmstudio_contexts(client)
    tgi = _get_json(client, "/info")
    if isinstance(tgi, dict) and "model_id" in tgi and ("max_total_tokens" in tgi or "max_input_tokens" in tgi):
        ctx = tgi.get("max_total_tokens") or tgi.get("max_input_tokens")
        return "tgi", _version(tgi), {str(m["id"]): ctx for m in data} if isinstance(ctx, int) else {}
    ollama = _get_json(client, "/api/version")
    if isinstance(ollama, dict) and "version" in ollama:
        return "ollama", _version(ollama), {}
    props = _llama_props(client, data)
    if props:
        return "llama-server", "", props
    return "openai-compatible", "", {}


def _version(body: Any) -> str:
    return str(body.get("version") or "") if isinstance(body, dict) else ""


def _llama_props(client: httpx.Client, data: list[dict[str, Any]]) -> dict[str, int]:
    """llama-server runs one model: /props says the context each slot has."""
    props = _get_json(client, "/props")
    if not isinstance(props, dict):
        return {}
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    n_ctx = n_ctx or props.get("n_ctx")
    return {str(m["id"]): n_ctx for m in data} if isinstance(n_ctx, int) and n_ctx > 0 else {}


def _lmstudio_contexts(client: httpx.Client) -> dict[str, int]:
    body = _get_json(client, "/api/v0/models")
    out: dict[str, int] = {}
    for m in body.get("data") or [] if isinstance(body, dict) else []:
        ctx = m.get("loaded_context_length") or m.get("max_context_length") if isinstance(m, dict) else None
        if isinstance(ctx, int) and isinstance(m.get("id"), str):
            out[m["id"]] = ctx
    return out


def _context(model: dict[str, Any], contexts: dict[str, int]) -> int | None:
    """Hearth's context_length, vLLM's and SGLang's max_model_len, or what another endpoint said."""
    for key in ("context_length", "max_model_len", "context_window", "max_context_length"):
        value = model.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return contexts.get(model["id"])
