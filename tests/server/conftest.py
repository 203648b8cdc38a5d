"""Live servers on loopback for the API tests: one over the FakeEngine (fast, scriptable, made per test)
and one over the real SmolLM2 (loaded and warmed once per session)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.library import Library
from app.core.library.store import ModelFile
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.job_host import JobHost
from app.core.runtime.pool import ModelPool
from app.core.runtime.preflight import PreflightResult
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.body import BODY_TIMEOUT_S
from app.server.context import ServerContext
from app.server.runner import ServerThread
from app.server.security import Policy
from tests.fixtures.fake_engine import FakeEngine, registry_with_fake

SYSTEM_PROMPT = "You are a helpful assistant who answers in English."  # SmolLM2 answers in English only with one


@dataclass
class Live:
    """A running server: its URL, the host behind it, and a client (the API key, if any, is set)."""

    url: str
    host: JobHost
    runner: ServerThread
    context: ServerContext
    client: httpx.Client
    engines: list[FakeEngine]

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def no_preflight(spec, fmt, plan_check):
    return PreflightResult()


def fake_library(folder: Path, names: tuple[str, ...] = ("alpha", "beta")) -> Library:
    library = Library(folder / "models", folder / "library.db")
    for name in names:
        path = folder / f"{name}.fake"
        path.write_bytes(b"fake")
        library.add(name=name, format="fake", path=path, files=[ModelFile(path, 4)])
    return library


@pytest.fixture
def make_server(tmp_path) -> Iterator:
    made: list[tuple[Live, Library]] = []

    def make(
        *,
        policy: Policy | None = None,
        queue_size: int = 8,
        load: str | None = "alpha",
        n_ctx: int = 256,
        body_timeout_s: float = BODY_TIMEOUT_S,
        limits: dict | None = None,
        pool: bool = True,
        **pool_kwargs,
    ) -> Live:
        """`limits`: ServerThread's (header_timeout_s, max_connections, limit_concurrency); `pool`: the app's
        ModelPool (a host per model; `max_models`, `idle_ttl_s` go to it), else one EngineHost; other
        keywords go to the FakeEngine."""
        engines: list[FakeEngine] = []
        library = fake_library(tmp_path / f"lib{len(made)}")
        resolver = ModelResolver(library, machine=lambda: None)
        pooled = {k: pool_kwargs.pop(k) for k in ("max_models", "idle_ttl_s") if k in pool_kwargs}
        host: JobHost
        if pool:
            host = ModelPool(
                registry_with_fake(engines, **pool_kwargs),
                resolver=resolver,
                queue_size=queue_size,
                name="test-api-host",
                **pooled,
            )
        else:
            host = EngineHost(
                registry_with_fake(engines, **pool_kwargs),
                preflight=no_preflight,
                resolver=resolver,
                queue_size=queue_size,
                name="test-api-host",
            )
        if load is not None:
            path = library.find(load).path
            host.load_sync(LoadSpec(path=path, n_ctx=n_ctx), "fake")
        context = ServerContext(host, library, resolver)
        app = create_app(context, policy, body_timeout_s=body_timeout_s)
        runner = ServerThread(app, "127.0.0.1", 0, context.cancel_streams, **(limits or {}))
        runner.start()
        headers = {"Authorization": f"Bearer {policy.api_key}"} if policy and policy.api_key else {}
        live = Live(
            runner.url, host, runner, context, httpx.Client(base_url=runner.url, headers=headers, timeout=30), engines
        )
        made.append((live, library))
        return live

    yield make
    for live, library in made:
        live.client.close()
        assert live.runner.stop(5)
        assert live.host.shutdown(5)
        library.close()


@pytest.fixture(scope="session")
def smol_server(smollm2_gguf: Path, tmp_path_factory) -> Iterator[Live]:
    """SmolLM2 in the library, loaded (at the planner's context) and warmed, served on loopback."""
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.library import import_path

    folder = tmp_path_factory.mktemp("smol-server")
    library = Library(folder / "models", folder / "library.db")
    model = import_path(library, smollm2_gguf).imported[0]
    resolver = ModelResolver(library)
    host = EngineHost(default_registry(), resolver=resolver, name="test-smol-host")
    load = resolver(model.name)
    host.load_sync(load.spec, load.format)
    warm = GenerateRequest(prompt="Hello", sampling=SamplingParams(temperature=0.0, max_tokens=2))
    host.generate_sync(warm, source="test")
    context = ServerContext(host, library, resolver)
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    live = Live(runner.url, host, runner, context, httpx.Client(base_url=runner.url, timeout=120), [])
    yield live
    live.client.close()
    runner.stop(5)
    host.shutdown(10)
    library.close()


def sse_lines(response: httpx.Response) -> list[str]:
    """The non-empty lines of an SSE body."""
    return [line for line in response.iter_lines() if line]


def named_events(response: httpx.Response) -> list[dict]:
    """The events of an agent-route stream (Responses, Messages): each `data:` follows an `event:` line
    naming its type, which the data repeats."""
    out, name = [], None
    for line in sse_lines(response):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            event = json.loads(line[6:])
            assert event["type"] == name, (name, event)
            out.append(event)
            name = None
    return out


def flood(url: str, route: str, body: dict, clients: int = 8) -> list[httpx.Response]:
    """`clients` requests at once (each a moment after the last, so they queue in order); their answers."""
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def call() -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            r = c.post(route, json=body)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=call) for _ in range(clients)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(60)
    return results
