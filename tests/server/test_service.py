"""The API server as the app runs it: start, stop, restart with new settings, a port in use, LAN mode's key."""

from __future__ import annotations

import socket

import httpx

from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.resolve import ModelResolver
from app.core.settings import ServerSettings
from app.server.service import ApiService, ServerStatus
from tests.fixtures.fake_engine import registry_with_fake
from tests.helpers import wait_until
from tests.server.conftest import fake_library, no_preflight


def _service(tmp_path, settings: ServerSettings, saved: list[str], responses_file=None):
    library = fake_library(tmp_path)
    resolver = ModelResolver(library, machine=lambda: None)
    host = EngineHost(registry_with_fake(), preflight=no_preflight, resolver=resolver, name="test-api-service")
    host.load_sync(LoadSpec(path=library.find("alpha").path, n_ctx=64), "fake")
    current = {"s": settings}
    api = ApiService(host, library, resolver, lambda: current["s"], saved.append, responses_file)
    return api, host, library, current


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_serve_stop_and_restart_on_another_port(tmp_path):
    saved: list[str] = []
    port = _free_port()
    api, host, library, current = _service(tmp_path, ServerSettings(port=port), saved)
    seen: list[ServerStatus] = []
    api.changed.connect(seen.append)
    try:
        status = api.start()
        assert status.running and status.url == f"http://127.0.0.1:{port}/v1"
        r = httpx.post(
            status.url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        )
        assert r.status_code == 200
        # Logged once the response is out, which the client may see a moment before the server's side ends.
        assert wait_until(lambda: len(api.log.items()) == 1, 5)
        assert [e.path for e in api.log.items()] == ["/v1/chat/completions"]
        assert api.log.items()[0].status == 200 and api.log.items()[0].model == "alpha"
        other = _free_port()
        current["s"] = ServerSettings(port=other)
        assert api.restart().url == f"http://127.0.0.1:{other}/v1"
        api.stop()
        assert not api.status.running and [s.running for s in seen] == [True, False, True, False]
    finally:
        api.stop()
        host.shutdown(5)
        library.close()
    assert saved == []  # loopback without a required key: none is made


def test_a_port_in_use_is_a_status_with_the_reason(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        api, host, library, _ = _service(tmp_path, ServerSettings(port=taken.getsockname()[1]), [])
        try:
            status = api.start()
            assert not status.running and "cannot listen" in status.error
        finally:
            api.stop()
            host.shutdown(5)
            library.close()


def test_lan_mode_makes_and_saves_a_key_and_requires_it(tmp_path):
    saved: list[str] = []
    api, host, library, _ = _service(tmp_path, ServerSettings(bind="lan", port=_free_port()), saved)
    try:
        status = api.start()
        assert status.running and len(saved) == 1 and saved[0].startswith("hearth-")
        assert httpx.get(status.url + "/models").status_code == 401
        ok = httpx.get(status.url + "/models", headers={"Authorization": f"Bearer {saved[0]}"})
        assert ok.status_code == 200
    finally:
        api.stop()
        host.shutdown(5)
        library.close()


def test_stored_responses_survive_a_restart_and_reach_disk_only_when_kept(tmp_path):
    file = tmp_path / "api-responses.json"
    api, host, library, current = _service(tmp_path / "a", ServerSettings(port=_free_port()), [], file)
    try:
        url = api.start().url
        first = httpx.post(url + "/responses", json={"input": "hi", "max_output_tokens": 2}).json()
        current["s"] = current["s"].model_copy(update={"port": _free_port()})
        url = api.restart().url  # a settings change restarts the server; its stored responses stay
        follow = {"input": "again", "max_output_tokens": 2, "previous_response_id": first["id"]}
        assert httpx.post(url + "/responses", json=follow).status_code == 200
        assert not file.exists()  # not kept across Hearth restarts unless the user says so
        current["s"] = current["s"].model_copy(update={"keep_responses": True})
        api.restart()
        assert file.exists() and first["id"] in file.read_text()
    finally:
        api.stop()
        host.shutdown(5)
        library.close()
    again, host, library, _ = _service(tmp_path / "b", ServerSettings(port=_free_port(), keep_responses=True), [], file)
    try:
        url = again.start().url
        r = httpx.get(url + f"/responses/{first['id']}")
        assert r.status_code == 200 and r.json()["id"] == first["id"]
    finally:
        again.stop()
        host.shutdown(5)
        library.close()


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _ollama_service(tmp_path, ollama_port: int, **settings):
    library = fake_library(tmp_path)
    resolver = ModelResolver(library, machine=lambda: None)
    host = EngineHost(registry_with_fake(), preflight=no_preflight, resolver=resolver, name="test-api-ollama")
    server = ServerSettings(port=_free_port(), ollama_port=True, **settings)
    return ApiService(host, library, resolver, lambda: server, ollama_port=ollama_port), host, library


def test_the_ollama_port_serves_every_route_through_the_same_front_door_and_stop_frees_both(tmp_path):
    ollama = _free_port()
    api, host, library = _ollama_service(tmp_path, ollama, require_api_key=True, api_key="hearth-k")
    try:
        status = api.start()
        main = int(status.url.removesuffix("/v1").rsplit(":", 1)[1])
        assert status.running and status.ollama_url == f"http://127.0.0.1:{ollama}" and status.ollama_error == ""
        key = {"Authorization": "Bearer hearth-k"}
        assert httpx.get(status.ollama_url + "/api/tags").status_code == 401  # the key holds here too
        tags = httpx.get(status.ollama_url + "/api/tags", headers=key)
        assert tags.status_code == 200 and {"alpha:latest", "beta:latest"} <= {m["name"] for m in tags.json()["models"]}
        assert (
            httpx.get(status.ollama_url + "/v1/models", headers=key).status_code == 200
        )  # all routes, not only Ollama's
        evil = httpx.get(status.ollama_url + "/api/tags", headers={**key, "Host": "evil.example:11434"})
        assert evil.status_code == 403  # the Host check (DNS rebinding) guards this port as well
        api.stop()
        assert not api.status.running and api.status.ollama_url == ""
        assert _port_is_free(ollama) and _port_is_free(main)
    finally:
        api.stop()
        host.shutdown(5)
        library.close()


def test_an_ollama_port_in_use_leaves_the_server_running_and_says_why(tmp_path):
    with socket.socket() as taken:  # Ollama itself, say
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        api, host, library = _ollama_service(tmp_path, port)
        try:
            status = api.start()
            main = status.url.removesuffix("/v1").rsplit(":", 1)[1]
            assert status.running and status.error == "" and status.ollama_url == ""
            assert status.ollama_error == (
                f"Port {port} is in use (is Ollama running?); Ollama's routes are still on port {main}"
            )
            assert httpx.get(status.url.removesuffix("/v1") + "/api/tags").status_code == 200
            api.stop()
            assert api.status.ollama_error == "" and _port_is_free(int(main))
        finally:
            api.stop()
            host.shutdown(5)
            library.close()


def test_the_ollama_port_is_off_by_default(tmp_path):
    api, host, library, _ = _service(tmp_path, ServerSettings(port=_free_port()), [])
    try:
        status = api.start()
        assert status.running and status.ollama_url == "" and status.ollama_error == ""
    finally:
        api.stop()
        host.shutdown(5)
        library.close()
