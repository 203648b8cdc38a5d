"""The same workload against any OpenAI-compatible server (Hearth's own, llama-server, Ollama, LM Studio,
vLLM) through streamed /v1/chat/completions, so engines compare on equal terms.

TTFT runs from sending the request to the first delta with content (or reasoning); decode is the server's
own rate where it reports llama-server's `timings` (Hearth and llama-server do), else the rate the tokens
arrived at (usage's completion_tokens over the time between the first and last delta). Prefill likewise:
`timings`, else the uncached prompt tokens over the TTFT (which then includes the network).
Concurrent requests go out on their own threads at once; what the server does with them is the server's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.core.bench.driver import BenchError, Described, Driver, ProgressCallback
from app.core.bench.measure import Sample
from app.core.bench.prompts import Messages
from app.core.bench.report import EngineFlags, EngineRecord, ModelRecord, WeightsRecord
from app.core.bench.workload import Workload
from app.core.hardware.profile import HardwareProfile

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0  # a long prompt on a slow machine, or a JIT load, before the first byte


def base_url(url: str) -> str:
    """`http://host:port` from what a user pastes (with or without `/v1`, a trailing slash); ValueError
    for anything that is not an http(s) URL."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080)")
    return text.removesuffix("/v1")


class EndpointRunner(Driver):
    def __init__(
        self,
        url: str,
        workload: Workload,
        *,
        api_key: str | None = None,
        model: str | None = None,
        hardware: HardwareProfile | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(workload, progress=progress, cancel=cancel)
        try:
            self.url = base_url(url)
        except ValueError as exc:
            raise BenchError(str(exc)) from None
        self.api_key = api_key
        self.model = model
        self.hardware = hardware
        self._transport = transport
        self._client: httpx.Client | None = None
        self._entry: dict[str, Any] = {}
        self._props: dict[str, Any] = {}
        self._health: dict[str, Any] = {}
        self._counted_by_usage = True

    # -- Driver ------------------------------------------------------------------------------------
    def prepare(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        most = max(self.workload.concurrency)
        self._client = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=most + 2, max_keepalive_connections=most + 2),
            transport=self._transport,
            trust_env=False,  # a loopback server must not be sent through a proxy
        )
        models = self._get("/v1/models").get("data") or []
        self.model = self.model or _pick_model(models, self.url)
        self._entry = next((m for m in models if m.get("id") == self.model), {})
        # llama-server's build and slots, Hearth's version; other servers answer 404, which is fine.
        self._props = self._optional("/props")
        self._health = self._optional("/health")

    def _optional(self, path: str) -> dict[str, Any]:
        assert self._client is not None
        try:
            r = self._client.get(path, timeout=CONNECT_TIMEOUT_S)
            data = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def finish(self) -> None:
        if self._client is not None:
            self._client.close()

    def count_tokens(self, messages: Messages) -> int:
        """The server's own count: usage.prompt_tokens of a one-token reply (an estimate if it has none)."""
        body = {**self._body(messages, stream=False), "max_tokens": 1}
        reply = self._post_json(body)
        usage = reply.get("usage") or {}
        if usage.get("prompt_tokens"):
            return int(usage["prompt_tokens"])
        self._counted_by_usage = False
        return 8 + round(1.3 * sum(len(m["content"].split()) for m in messages))

    def send(self, batch: list[Messages]) -> list[Sample]:
        samples = [Sample(submitted=0.0) for _ in batch]
        threads = [
            threading.Thread(target=self._one, args=(m, s), name=f"bench-client-{i}", daemon=True)
            for i, (m, s) in enumerate(zip(batch, samples))
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)  # sliced, so Ctrl-C reaches the waiting thread
        except KeyboardInterrupt:
            self.cancel.set()  # the request threads leave their streams: the server stops those replies
            raise
        return samples

    def describe(self) -> Described:
        entry, props = self._entry, self._props
        settings = props.get("default_generation_settings") or {}
        build = props.get("build_info")
        hearth = "context_by_route" in entry  # only Hearth lists a context per route
        version: str | None
        if build:
            name, version = "llama-server", str(build)
        elif hearth:
            name, version = "Hearth", str(self._health.get("version") or "") or None
        else:
            name, version = str(entry.get("owned_by") or "endpoint"), None
        notes = [
            "hardware is the machine that ran the benchmark; the endpoint may run elsewhere",
            "peak memory and headroom are not measured for an endpoint",
        ]
        if not self._counted_by_usage:
            notes.append("the server reports no usage: prompt lengths are estimates")
        return Described(
            model=ModelRecord(name=str(self.model), architecture=str(entry.get("architecture") or "")),
            weights=WeightsRecord(format=entry.get("format"), quant_type=entry.get("quant")),
            engine=EngineRecord(
                kind="endpoint",
                name=name,
                version=str(version) if version else None,
                build_info=props.get("system_info") or (str(build) if build else None),
                url=self.url,
                flags=EngineFlags(
                    n_ctx=settings.get("n_ctx") or entry.get("context_length") or None,
                    slots=props.get("total_slots") or (1 if hearth else None),
                ),
                concurrency_mode=(
                    "queued: Hearth runs one request at a time" if hearth else "as the server schedules them"
                )
                + " (the benchmark sends a cell's requests at once)",
            ),
            hardware=(self.hardware or _probe()).to_dict(),
            notes=notes,
        )

    # -- HTTP --------------------------------------------------------------------------------------
    def _body(self, messages: Messages, *, stream: bool) -> dict[str, Any]:
        s = self.workload.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.workload.gen_len,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": s.seed,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _get(self, path: str) -> dict[str, Any]:
        assert self._client is not None
        try:
            r = self._client.get(path)
        except httpx.HTTPError as exc:
            raise BenchError(f"cannot reach {self.url}: {_why(exc)}") from None
        return _json_or_fail(r, self.url + path)

    def _post_json(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self._client is not None
        try:
            r = self._client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise BenchError(f"cannot reach {self.url}: {_why(exc)}") from None
        return _json_or_fail(r, self.url + "/v1/chat/completions")

    def _one(self, messages: Messages, sample: Sample) -> None:
        """On its own thread: one request, its times into `sample`."""
        assert self._client is not None
        body = self._body(messages, stream=self.workload.streaming)
        deltas = 0
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}
        sample.submitted = time.perf_counter()
        try:
            if not self.workload.streaming:
                reply = self._post_json(body)
                sample.finished = sample.first_token = sample.last_token = time.perf_counter()
                usage, timings = reply.get("usage") or {}, reply.get("timings") or {}
            else:
                with self._client.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code >= 400:
                        r.read()
                        _json_or_fail(r, self.url + "/v1/chat/completions")
                    for line in r.iter_lines():
                        if self.cancel.is_set():
                            sample.error = "cancelled"
                            return  # leaving the stream closes it: the server stops the reply
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        event = json.loads(data)
                        if event.get("error"):
                            raise BenchError(_error_text(event))
                        delta = ((event.get("choices") or [{}])[0] or {}).get("delta") or {}
                        if delta.get("content") or delta.get("reasoning_content"):
                            now = time.perf_counter()
                            sample.first_token = sample.first_token or now
                            sample.last_token = now
                            deltas += 1
                            self.token()
                        usage = event.get("usage") or usage
                        timings = event.get("timings") or timings
                sample.finished = time.perf_counter()
        except BenchError as exc:
            sample.error = str(exc)
            return
        except (httpx.HTTPError, ValueError) as exc:
            sample.error = f"{type(exc).__name__}: {_why(exc)}"
            return
        _fill(sample, usage, timings, deltas)


def _fill(sample: Sample, usage: dict[str, Any], timings: dict[str, Any], deltas: int) -> None:
    sample.prompt_tokens = int(usage.get("prompt_tokens") or timings.get("prompt_n") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None:
        cached = timings.get("cache_n")
    sample.cached_tokens = None if cached is None else int(cached)
    sample.output_tokens = int(usage.get("completion_tokens") or timings.get("predicted_n") or deltas)
    if timings.get("predicted_per_second"):
        sample.decode_tok_s = float(timings["predicted_per_second"])
    if timings.get("prompt_per_second"):
        sample.prefill_tok_s = float(timings["prompt_per_second"])
    elif sample.ttft_s and sample.prompt_tokens:
        fresh = sample.prompt_tokens - (sample.cached_tokens or 0)
        sample.prefill_tok_s = fresh / sample.ttft_s if fresh > 0 else None
    if timings.get("ttft_ms"):
        sample.engine_ttft_s = float(timings["ttft_ms"]) / 1000


def _pick_model(models: list[dict[str, Any]], url: str) -> str:
    ids = [str(m.get("id")) for m in models if m.get("id")]
    loaded = [str(m["id"]) for m in models if m.get("loaded") and m.get("id")]
    if len(loaded) == 1:
        return loaded[0]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise BenchError(f"{url} lists no models; name one with --model")
    raise BenchError(f"{url} serves {len(ids)} models ({', '.join(ids[:5])}); choose one with --model")


def _json_or_fail(r: httpx.Response, where: str) -> dict[str, Any]:
    if r.status_code == 401 or r.status_code == 403:
        raise BenchError(f"{where} refused the request ({r.status_code}): check --api-key")
    try:
        data = r.json()
    except ValueError:
        data = None
    if r.status_code >= 400:
        detail = _error_text(data) if isinstance(data, dict) else r.text[:200]
        raise BenchError(f"{where} answered {r.status_code}: {detail}")
    if not isinstance(data, dict):
        raise BenchError(f"{where} did not answer JSON; is it an OpenAI-compatible server?")
    return data


def _error_text(data: dict[str, Any]) -> str:
    err = data.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err or data.get("detail") or data)[:300]


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _probe() -> HardwareProfile:
    from app.core.hardware import probe_hardware
    from app.core.paths import app_paths

    return probe_hardware(cache_dir=app_paths().cache, measure_bandwidth=False)
