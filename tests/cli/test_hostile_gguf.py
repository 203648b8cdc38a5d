"""Issue 31 as a user meets it: a GGUF whose hyper-parameters make llama.cpp abort (block_count 0) gets a
one-line error and a normal exit code from `hearth run`, and a 4xx from the API's just-in-time load while
the server lives on. Before the fix both died of SIGABRT (exit 134) inside llama.cpp."""

from __future__ import annotations

import shutil
import signal

import httpx

from tests.cli.helpers import hearth, isolated_env
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

SHAPE = {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128}
SENTENCE = "llama.block_count is 0; a model needs at least one layer"


def test_hearth_run_on_a_hostile_file_fails_cleanly(tmp_path):
    bad = write_tiny_llama_gguf(tmp_path / "bad.gguf", **SHAPE, metadata={"llama.block_count": 0})
    done = hearth("run", str(bad), "hi", env=isolated_env(tmp_path, "http://127.0.0.1:9"), timeout=60)
    assert done.returncode == 1, (done.returncode, done.stderr)  # not 134 / -6 (abort) or -11 (segfault)
    assert f"hearth run: {SENTENCE}" in done.stderr
    assert done.stdout == ""


def test_the_api_refuses_a_hostile_library_file_and_keeps_serving(tmp_path):
    from app.core.library import import_path, open_library
    from app.core.paths import app_paths
    from app.core.settings import Settings
    from tests.cli.test_serve import _start

    home = tmp_path / "home"
    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    good = write_tiny_llama_gguf(tmp_path / "models" / "tiny.gguf", **SHAPE)
    library = open_library(paths, Settings())
    (model,) = import_path(library, good).imported
    library.close()
    # The library's import refuses such a file now, so it is swapped in after the import: a file changed on
    # disk, or one imported by an older Hearth.
    hostile = write_tiny_llama_gguf(tmp_path / "hostile.gguf", **SHAPE, metadata={"llama.block_count": 0})
    shutil.copy(hostile, model.path)
    proc, url, _ = _start(["--port", "0"], home)
    try:
        body = {"model": model.name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        refused = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
        assert 400 <= refused.status_code < 500, refused.text
        assert SENTENCE in refused.text
        assert proc.poll() is None  # still running
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
