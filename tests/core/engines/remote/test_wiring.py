"""Remote ids in the resolver (the Chat page's and the API's JIT path) and in the app's services."""

from __future__ import annotations

import pytest

from app.core.engines.base import ChatMessage, GenerateRequest
from app.core.engines.remote import FORMAT, RemoteStore, register_remote
from app.core.library.store import ModelFile
from app.core.paths import app_paths
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import GenerateJob, ModelNotFound
from app.core.runtime.resolve import ModelResolver
from app.core.services import Services
from app.core.settings import Settings
from tests.core.engines.remote.upstream import UPSTREAM_KEY, remote_store, upstream_server
from tests.fixtures.fake_engine import registry_with_fake
from tests.server.conftest import fake_library, no_preflight

HI = GenerateRequest(messages=[ChatMessage(role="user", content="hi")])


def test_the_resolver_knows_remote_ids_and_a_library_model_wins(tmp_path):
    with upstream_server(tmp_path / "up") as up:
        store = remote_store(tmp_path)
        store.add(up.url, name="box", api_key=UPSTREAM_KEY)
    library = fake_library(tmp_path / "lib")
    shadow = tmp_path / "lib" / "shadow.fake"
    shadow.write_bytes(b"fake")
    library.add(name="box/beta", format="fake", path=shadow, files=[ModelFile(shadow, 4)])
    try:
        resolver = ModelResolver(library, machine=lambda: None, remotes=store)
        job = resolver("box/alpha")
        assert job.format == FORMAT and job.spec.n_ctx == 256
        assert resolver("box/beta").format == "fake"  # the library's own model of that name
        with pytest.raises(ModelNotFound):
            resolver("box/gamma")
        with pytest.raises(ModelNotFound):
            ModelResolver(library, machine=lambda: None)("box/alpha")  # no remotes: only the library
    finally:
        library.close()


def test_a_job_naming_a_remote_model_loads_it_in_place_of_the_local_one_and_back(tmp_path):
    with upstream_server(tmp_path / "up", script="from afar") as up:
        store = remote_store(tmp_path)
        store.add(up.url, name="box", api_key=UPSTREAM_KEY)
        library = fake_library(tmp_path / "lib")
        host = EngineHost(
            register_remote(registry_with_fake(script="from here"), store),
            preflight=no_preflight,
            resolver=ModelResolver(library, machine=lambda: None, remotes=store),
        )
        try:
            remote = host.submit(GenerateJob(HI, model="box/alpha"))
            local = host.submit(GenerateJob(HI, model="alpha"))
            assert remote.wait(10) and local.wait(10)
            assert (remote.result.text, local.result.text) == ("from afar", "from here")
            assert host.state.model.format == "fake"
        finally:
            host.shutdown(5)
            library.close()


def test_services_open_the_remotes_and_register_the_remote_engine():
    paths = app_paths().ensure()
    services = Services.open(paths, Settings(), env={})
    try:
        assert isinstance(services.remotes, RemoteStore)
        assert services.remotes.path == paths.data / "remotes.json"
        assert services.resolver.remotes is services.remotes
        assert FORMAT in services.pool.registry.formats()
    finally:
        services.close()
