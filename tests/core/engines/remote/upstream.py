"""A second Hearth server on loopback over the FakeEngine: the remote every remote-engine test talks to
(the only remote kind run for real here; the others are simulated by probe fixtures)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.engines.remote import RemoteStore
from app.core.library import Library
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread
from app.server.security import Policy
from tests.fixtures.fake_engine import FakeEngine, registry_with_fake
from tests.server.conftest import fake_library, no_preflight

UPSTREAM_KEY = "sk-upstream-7Qz9-very-secret-key"


@dataclass
class Upstream:
    url: str
    host: EngineHost
    runner: ServerThread
    context: ServerContext
    engines: list[FakeEngine]
    library: Library

    def stop(self) -> None:
        self.runner.stop(5)

    def close(self) -> None:
        self.runner.stop(5)
        self.host.shutdown(5)
        self.library.close()


@contextmanager
def upstream_server(
    folder: Path, *, api_key: str = UPSTREAM_KEY, n_ctx: int = 256, **engine_kwargs
) -> Iterator[Upstream]:
    engines: list[FakeEngine] = []
    library = fake_library(folder)
    resolver = ModelResolver(library, machine=lambda: None)
    host = EngineHost(
        registry_with_fake(engines, **engine_kwargs), preflight=no_preflight, resolver=resolver, name="upstream-host"
    )
    host.load_sync(LoadSpec(path=library.find("alpha").path, n_ctx=n_ctx), "fake")
    context = ServerContext(host, library, resolver)
    runner = ServerThread(create_app(context, Policy.of(api_key=api_key)), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    up = Upstream(runner.url, host, runner, context, engines, library)
    try:
        yield up
    finally:
        up.close()


def remote_store(folder: Path) -> RemoteStore:
    """A store that keeps keys in its file (never the test machine's keyring)."""
    return RemoteStore(folder / "remotes.json", keyring=None)
