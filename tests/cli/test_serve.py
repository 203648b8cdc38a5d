"""`hearth serve` as a user runs it: no window, a model file loaded first, the API on loopback, a chat
answered by the openai client, SIGTERM stops it and frees the port; LAN mode makes up a key."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start(args: list[str], home: Path) -> tuple[subprocess.Popen, str, str]:
    """Run `hearth serve ARGS`; returns the process, its base URL and what it printed up to announcing it."""
    env = dict(os.environ, HEARTH_HOME=str(home), NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if m := re.search(r"Hearth API on (http://\S+)/v1", line):
            return proc, m.group(1), "".join(lines)
    proc.kill()
    raise AssertionError("hearth serve did not start:\n" + "".join(lines))


@pytest.mark.slow
def test_serve_a_model_file_answer_with_openai_stop_on_sigterm(smollm2_gguf, tmp_path):
    with socket.socket() as s:  # a free port to ask for
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--model", str(smollm2_gguf), "--port", str(port), "--parallel", "2", "--speculative", "ngram"]
    proc, url, printed = _start(args, tmp_path / "home")
    try:
        assert url == f"http://127.0.0.1:{port}"
        assert "8,192-token context, 2 parallel slots," in printed  # --parallel over the setting (auto)
        assert "speculative decoding: ngram" in printed  # asked for, though this CPU would plan it off
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        (model,) = client.models.list().data
        reply = client.chat.completions.create(
            model=model.id,
            temperature=0,
            max_tokens=12,
            messages=[
                {"role": "system", "content": "You are a helpful assistant who answers in English."},
                {"role": "user", "content": "What is the capital of France?"},
            ],
        )
        assert "Paris" in reply.choices[0].message.content
        details = reply.usage.completion_tokens_details  # the drafts, as OpenAI's predicted-token fields
        assert details.accepted_prediction_tokens + details.rejected_prediction_tokens >= 0
        assert httpx.get(url + "/health", headers={"Host": "evil.example"}).status_code == 403
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))  # freed


def test_lan_mode_requires_a_key_and_prints_the_one_it_made(tmp_path):
    proc, url, line = _start(["--host", "0.0.0.0", "--port", "0"], tmp_path / "home")
    try:
        key = re.search(r"API key: (\S+)\)", line)
        assert key is not None, line
        local = url.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(local + "/v1/models").status_code == 401
        ok = httpx.get(local + "/v1/models", headers={"Authorization": f"Bearer {key.group(1)}"})
        assert ok.status_code == 200 and ok.json()["data"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def test_ollama_port_in_use_is_a_note_and_the_main_port_still_serves(tmp_path):
    from app.core.settings import OLLAMA_PORT

    with socket.socket() as held:  # taken by this test, or already by Ollama itself: either way in use
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("127.0.0.1", OLLAMA_PORT))
            held.listen()
        except OSError:
            pass
        with socket.socket() as s:  # a free port to ask for (0 would be the setting's)
            s.bind(("127.0.0.1", 0))
            main = s.getsockname()[1]
        proc, url, _ = _start(["--port", str(main), "--ollama-port"], tmp_path / "home")
        try:
            assert proc.stderr is not None
            port = url.rsplit(":", 1)[1]
            note = proc.stderr.readline().strip()
            assert (
                note
                == f"note: Port {OLLAMA_PORT} is in use (is Ollama running?); Ollama's routes are still on port {port}"
            )
            assert httpx.get(url + "/api/tags").status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0


@pytest.mark.slow
def test_serve_with_a_draft_model_from_the_library(tmp_path):
    from app.core.library import import_path, open_library
    from app.core.paths import app_paths
    from app.core.settings import Settings
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    home = tmp_path / "home"
    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    big = write_tiny_llama_gguf(tmp_path / "big.gguf", n_layer=6, n_ctx=2048)
    small = write_tiny_llama_gguf(tmp_path / "small.gguf", n_layer=1, n_embd=128, n_ff=256, n_ctx=2048)
    library = open_library(paths, Settings())
    for path in (big, small):
        import_path(library, path)
    library.close()
    env = dict(os.environ, HEARTH_HOME=str(home))
    missing = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--draft-model", "nope"], cwd=ROOT, env=env, capture_output=True
    )
    assert missing.returncode == 2 and b"no model 'nope' in the library to draft with" in missing.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, url, printed = _start(["--model", "big", "--draft-model", "small", "--port", str(port)], home)
    try:
        assert "speculative decoding: draft (small.gguf)" in printed
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        reply = client.completions.create(model="big", prompt="abc abc abc", max_tokens=16, temperature=0)
        details = reply.usage.completion_tokens_details
        assert details is not None and details.accepted_prediction_tokens + details.rejected_prediction_tokens > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def test_the_slot_line_says_when_memory_chose_the_slots():
    from app.cli.serve import _slots_text
    from app.core.settings import AUTO_PARALLEL

    assert _slots_text(8, AUTO_PARALLEL) == "8 parallel slots (auto: as many as memory allows)"
    assert (
        _slots_text(2, 4) == "2 parallel slots (4 asked; fewer fit in memory)"
        and _slots_text(1, 1) == "1 parallel slot"
    )
