"""RemoteStore: remotes persisted owner-only, keys in the keyring or the file and never in a log."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest

from app.core.engines.remote import ProbeResult, RemoteError, RemoteModel, RemoteStore, RemoteUnreachable
from app.core.engines.remote.store import KeyringKeys, default_name
from app.core.logs import LOG_FORMAT
from tests.core.engines.remote.upstream import UPSTREAM_KEY, remote_store, upstream_server

KEY = "sk-test-Remote-Key-0123456789"


def fake_probe(url, api_key=None, **_):
    return ProbeResult(url, "vllm", "0.6.3", [RemoteModel("m-1", 32768, "vllm"), RemoteModel("org/m-2", None)])


class FakeKeyring:
    def __init__(self) -> None:
        self.saved: dict[tuple[str, str], str] = {}

    def get_password(self, service, name):
        return self.saved.get((service, name))

    def set_password(self, service, name, key):
        self.saved[(service, name)] = key

    def delete_password(self, service, name):
        del self.saved[(service, name)]


def test_add_probes_and_saves_owner_only_with_the_key_in_the_file(tmp_path):
    store = RemoteStore(tmp_path / "remotes.json", keyring=None, prober=fake_probe)
    remote = store.add("http://gpu-box:8000/v1", api_key=KEY, expose_locally=True)
    assert (remote.name, remote.url, remote.kind, remote.has_key) == ("gpu-box", "http://gpu-box:8000", "vllm", True)
    assert store.key_storage == "file" and store.api_key("gpu-box") == KEY
    if os.name == "posix":
        assert stat.S_IMODE(os.stat(tmp_path / "remotes.json").st_mode) == 0o600
    # Another store on the same file (a `hearth remote add` in a terminal) sees it
    again = RemoteStore(tmp_path / "remotes.json", keyring=None)
    assert [e.id for e in again.entries()] == ["gpu-box/m-1", "gpu-box/org/m-2"]
    assert again.find_model("gpu-box/org/m-2").model.context_length is None
    assert again.load_spec("gpu-box/m-1").n_ctx == 32768
    assert again.find_model("gpu-box/nope") is None and again.find_model("alpha") is None
    assert KEY not in repr(remote) and KEY not in repr(again.list())


def test_with_a_keyring_the_key_never_reaches_the_file(tmp_path):
    ring = FakeKeyring()
    store = RemoteStore(tmp_path / "remotes.json", keyring=KeyringKeys(ring), prober=fake_probe)
    store.add("http://box", name="box", api_key=KEY)
    assert store.key_storage == "keyring" and ring.saved == {("Hearth remote", "box"): KEY}
    assert KEY not in (tmp_path / "remotes.json").read_text() and store.api_key("box") == KEY
    assert store.remove("box") and ring.saved == {} and store.list() == []
    assert not store.remove("box")


def test_names_default_to_the_host_made_unique_and_bad_names_are_refused(tmp_path):
    store = RemoteStore(tmp_path / "r.json", keyring=None, prober=fake_probe)
    assert store.add("http://box:1").name == "box"
    assert store.add("http://box:2").name == "box-2"
    assert default_name("http://10.0.0.5:8000", set()) == "10.0.0.5"
    with pytest.raises(RemoteError, match="not a remote name"):
        store.add("http://box", name="a/b")
    assert [r.name for r in store.list()] == ["box", "box-2"]


def test_a_failed_probe_saves_nothing_and_a_failed_refresh_keeps_the_remote_as_unreachable(tmp_path):
    def down(url, api_key=None, **_):
        raise RemoteUnreachable(f"could not reach {url}: refused (tried 3 times)")

    store = RemoteStore(tmp_path / "r.json", keyring=None, prober=down)
    with pytest.raises(RemoteUnreachable):
        store.add("http://box")
    assert store.list() == []
    store.prober = fake_probe
    store.add("http://box")
    store.prober = down
    remote = store.refresh("box")
    assert not remote.reachable and "could not reach" in remote.error
    assert [m.id for m in store.get("box").models] == ["m-1", "org/m-2"]  # as last seen
    assert store.set_expose("box", True).expose_locally
    with pytest.raises(RemoteError, match="no remote named"):
        store.refresh("nope")


def test_a_damaged_file_is_an_empty_list_not_a_crash(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{not json")
    assert RemoteStore(path, keyring=None).list() == []
    path.write_text(json.dumps({"remotes": [{"name": "ok", "url": "http://ok"}, {"url": "no name"}]}))
    assert [r.name for r in RemoteStore(path, keyring=None).list()] == ["ok"]


def test_the_key_never_reaches_the_log_file(tmp_path):
    """Add, probe, refresh, load and chat with a keyed remote at DEBUG; the log file has no key."""
    from app.core.engines.base import ChatMessage, GenerateRequest
    from app.core.engines.registry import EngineRegistry
    from app.core.engines.remote import FORMAT, register_remote
    from app.core.runtime.engine_host import EngineHost

    log_file = tmp_path / "hearth.log"
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)  # httpx and httpcore log requests at DEBUG: headers must not show
    try:
        with upstream_server(tmp_path / "up", script="hello there") as up:
            store = remote_store(tmp_path)
            store.add(up.url, name="box", api_key=UPSTREAM_KEY)
            store.refresh("box")
            host = EngineHost(register_remote(EngineRegistry(), store))
            try:
                host.load_sync(store.load_spec("box/alpha"), FORMAT)
                text, _ = host.generate_sync(GenerateRequest(messages=[ChatMessage(role="user", content="hi")]))
            finally:
                host.shutdown()
            with pytest.raises(RemoteError):
                store.add(up.url, name="bad", api_key="sk-wrong-" + UPSTREAM_KEY)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()
    assert text == "hello there"
    logged = log_file.read_text()
    assert "box" in logged and "remote" in logged  # the operations were logged ...
    assert UPSTREAM_KEY not in logged  # ... and the key was not


def test_a_keyring_that_refuses_leaves_the_key_to_the_owner_only_file(tmp_path):
    class Locked(FakeKeyring):
        def set_password(self, service, name, key):
            raise RuntimeError("locked")

    store = RemoteStore(tmp_path / "r.json", keyring=KeyringKeys(Locked()), prober=fake_probe)
    store.add("http://box", api_key=KEY)
    assert store.api_key("box") == KEY and KEY in (tmp_path / "r.json").read_text()


def test_the_system_keyring_is_used_only_with_a_real_backend(monkeypatch):
    import sys
    import types

    from app.core.engines.remote.store import system_keyring

    fail = types.ModuleType("keyring.backends.fail")

    class FailKeyring:
        priority = 0

    fail.Keyring = FailKeyring
    backends = types.ModuleType("keyring.backends")
    backends.fail = fail
    module = types.ModuleType("keyring")
    module.backends = backends
    monkeypatch.setitem(sys.modules, "keyring", module)
    monkeypatch.setitem(sys.modules, "keyring.backends", backends)
    monkeypatch.setitem(sys.modules, "keyring.backends.fail", fail)
    module.get_keyring = FailKeyring
    assert system_keyring() is None  # the fail backend: keys go to the file

    class Real:
        priority = 5

    module.get_keyring = Real
    assert isinstance(system_keyring(), KeyringKeys)
