"""A process that dies in native code mid-decode (simulated by a SIGSEGV raised while the host is generating,
through the real Services, host and llama.cpp engine): the next start names the model, loses no settings
or stored API responses, and the same model loads in a safer configuration and answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.paths import app_paths
from app.core.services import Services
from app.core.settings import SettingsStore
from tests.helpers import require_llama_cpp

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
    from app.core.paths import app_paths
    from app.core.runtime.jobs import ChunkEvent, GenerateJob
    from app.core.services import Services
    from app.core.settings import SettingsStore
    from app.server.responses.store import ResponseStore, Stored

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    store.save(store.load().model_copy(update={"parallel_downloads": 5}))
    ResponseStore(paths.responses_file).put(Stored({"id": "resp_kept", "object": "response"}, [], []))
    services = Services.open(paths, store.load())
    services.pool.load_sync(LoadSpec(path=Path(sys.argv[1]), n_ctx=256, n_threads=1), "gguf", plan_check=False)

    def sink(event):  # on the host thread, mid-decode: the process dies as a native fault would kill it
        if isinstance(event, ChunkEvent):
            os.kill(os.getpid(), signal.SIGSEGV)

    request = GenerateRequest(prompt="Hi", sampling=SamplingParams(temperature=0.0, max_tokens=8))
    services.pool.submit(GenerateJob(request, source="test"), sink)
    time.sleep(120)
    """
)


def test_a_crash_mid_decode_loses_nothing_and_the_model_then_loads_safer(tmp_path, monkeypatch, tiny_gguf_q8_0):
    require_llama_cpp()
    # Its own native-check store: the recorded crash must not steer the rest of the suite's loads.
    monkeypatch.setenv("HEARTH_NATIVE_CHECKS", str(tmp_path / "native-checks.json"))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tiny_gguf_q8_0)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-2000:]

    paths = app_paths().ensure()
    settings = SettingsStore(paths.settings_file).load()
    assert settings.parallel_downloads == 5
    from app.server.responses.store import ResponseStore

    assert ResponseStore(paths.responses_file).get("resp_kept") is not None

    services = Services.open(paths, settings)
    try:
        [note] = services.crash_notes
        assert f"{tiny_gguf_q8_0.name} was generating text" in note
        info = services.pool.load_sync(LoadSpec(path=tiny_gguf_q8_0, n_ctx=256, n_threads=1), "gguf", plan_check=False)
        assert info.extra["turned_off"] == ["extra_bufts"] and info.extra["extra_bufts"] is False
        _text, final = services.pool.generate_sync(
            GenerateRequest(prompt="Hi", sampling=SamplingParams(temperature=0.0, max_tokens=4))
        )
        assert final.finish_reason in ("stop", "length") and final.stats is not None
    finally:
        services.close()
