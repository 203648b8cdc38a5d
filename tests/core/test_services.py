from app.core.paths import app_paths
from app.core.services import Services
from app.core.settings import Settings


def test_services_open_and_close_cleanly():
    paths = app_paths().ensure()
    services = Services.open(paths, Settings(parallel_downloads=3), env={})
    try:
        assert services.pool.state.status == "idle"
        assert services.library.list() == []
        assert services.chats.list_conversations() == []
        assert services.downloads.items() == []
        assert (paths.data / "library.db").exists() and (paths.data / "chats.sqlite3").exists()
    finally:
        services.close()
    assert services.pool.residents() == [] and not services.pool._reaper.is_alive()


def test_the_speculative_setting_and_draft_picks_reach_the_resolver():
    from app.core.library.store import LocalModel

    paths = app_paths().ensure()
    services = Services.open(paths, Settings(speculative="off", draft_models={"m1": "d1"}), env={})
    try:
        assert services.resolver.speculative == "off" and services.resolver.drafts is not None
        model = LocalModel(
            "m1", "m", "gguf", None, 1, paths.models / "m.gguf", (), None, None, "import", 0.0, None, "ready"
        )
        assert services.resolver.draft_for is not None and services.resolver.draft_for(model) == "d1"
        services.apply_settings(Settings(speculative="on"))
        assert services.resolver.speculative == "auto"  # on: drafting (still only while faster) on any device
        assert services.resolver.draft_for(model) is None  # the pick went with the settings
        services.apply_settings(Settings())
        assert services.resolver.speculative is None  # automatic: as each load's plan says
    finally:
        services.close()


def test_a_crash_left_by_the_last_run_is_recorded_and_told(tmp_path):
    """A marker left by a process that died in native code becomes a crash record and one sentence."""
    import json
    import subprocess
    import sys

    from app.core.hardware.native_checks import NativeCheckStore, default_store_path, fingerprint_of
    from app.core.native import import_native
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    paths = app_paths().ensure()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    marker = {
        "pid": int(gone.stdout),
        "phase": "decoding",
        "model": str(tmp_path / "Crashy-Model.Q4_0.gguf"),
        "weights": "F32,Q4_0",
        "config": {"extra_bufts": True, "flash_attn": False, "gpu_offload": False},
        "at": 0.0,
    }
    (paths.data / "inflight").mkdir(parents=True)
    (paths.data / "inflight" / f"{marker['pid']}-llama-1.json").write_text(json.dumps(marker))
    store_before = len(NativeCheckStore(default_store_path()).records(fingerprint_of(import_native("llama_cpp"))))
    services = Services.open(paths, Settings(), env={})
    try:
        [note] = services.crash_notes
        assert "Crashy-Model.Q4_0.gguf was generating text" in note
        records = NativeCheckStore(default_store_path()).records(fingerprint_of(import_native("llama_cpp")))
        assert len(records) == store_before + 1
        crash = records[-1]
        assert (crash.weights, crash.passed, crash.source) == ("F32,Q4_0", False, "crash")
    finally:
        services.close()
    # Read once: the next start has nothing to say
    again = Services.open(paths, Settings(), env={})
    try:
        assert again.crash_notes == []
    finally:
        again.close()


def test_the_server_settings_reach_the_model_pool():
    from app.core.settings import ServerSettings

    paths = app_paths().ensure()
    server = ServerSettings(max_loaded_models=3, idle_ttl_minutes=5, jit_load=False)
    services = Services.open(paths, Settings(server=server), env={})
    try:
        pool = services.pool
        assert (pool.max_models, pool.idle_ttl_s, pool.jit) == (3, 300, False)
        services.apply_settings(Settings(server=ServerSettings(max_loaded_models=1)))
        assert (pool.max_models, pool.idle_ttl_s, pool.jit) == (1, None, True)
    finally:
        services.close()


def test_closing_stops_the_engine_the_mcp_servers_and_the_downloads_at_once(monkeypatch):
    """Quitting waits for the slowest of them, not their sum: each close here waits at a barrier that only
    opens once all three are in their close at the same time (run one after another, it breaks)."""
    import threading

    paths = app_paths().ensure()
    services = Services.open(paths, Settings(), env={})
    barrier = threading.Barrier(3, timeout=10)
    met: list[str] = []
    for name, owner, method in (
        ("engine", services.pool, "shutdown"),
        ("mcp", services.tools, "close"),
        ("downloads", services.downloads, "close"),
    ):
        real = getattr(owner, method)

        def closing(*args, _real=real, _name=name, **kwargs):
            barrier.wait()  # BrokenBarrierError (logged as a failed close) if the others are not closing too
            met.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, method, closing)
    services.close()
    assert sorted(met) == ["downloads", "engine", "mcp"]
    assert services.pool.residents() == [] and not services.pool._reaper.is_alive()
