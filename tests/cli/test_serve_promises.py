"""`hearth serve` keeps its promises against every route (issue 46), checked as an attacker with the key would
try them on a real server process: a request's context is planned like a load (refused with the planner's
reasons, a 400, when it does not fit; never past what the model was trained for), the memory `/models` reports
is what the process holds, a pinned model stays through keep_alive 0, unload and delete, and the cap on loaded
models holds when the loaded one is pinned."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve import _start

KEY = "promise-key"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _status(client: httpx.Client, name: str) -> dict:
    [row] = [m for m in client.get("/models").json()["data"] if m["id"] == name]
    return row["status"]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")
def test_requests_cannot_grow_unpin_or_outnumber_the_models(smollm2_gguf, tmp_path):
    from app.core.library import import_path, open_library
    from app.core.paths import app_paths
    from app.core.settings import Settings
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    home = tmp_path / "home"
    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    # Trained for a million tokens with a wide KV cache (32 KiB a token): a million tokens of context is 32 GiB.
    wide = write_tiny_llama_gguf(
        tmp_path / "wide.gguf", n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_layer=64, n_ctx=1 << 20
    )
    library = open_library(paths, Settings())
    smol = import_path(library, smollm2_gguf).imported[0].name
    import_path(library, wide)
    library.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, url, _ = _start(["--port", str(port), "--api-key", KEY, "--max-models", "1"], home)
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=240)
    try:
        # A JIT load starts at the model's usual context, not the largest that fits (32 GiB of KV here).
        assert client.post("/models/load", json={"model": "wide", "pin": True}).status_code == 200
        wide_status = _status(client, "wide")
        assert wide_status["pinned"] and wide_status["context_length"] == 8192
        rss = _rss_mib(proc.pid)
        # A context that cannot fit: the planner's reasons, a 400 in each dialect, and nothing let go.
        ollama = client.post(
            "/api/generate",
            json={"model": "wide", "prompt": "Hi", "stream": False, "options": {"num_predict": 3, "num_ctx": 1 << 20}},
        )
        assert ollama.status_code == 400, ollama.text
        assert "will not fit" in ollama.json()["error"] and "stays loaded as it was" not in ollama.json()["error"]
        lmstudio = client.post("/api/v1/models/load", json={"model": "wide", "context_length": 1 << 20})
        assert lmstudio.status_code == 400 and lmstudio.json()["error"]["code"] == "does_not_fit"
        assert _status(client, "wide") == wide_status | {"idle_left_s": _status(client, "wide")["idle_left_s"]}
        assert _rss_mib(proc.pid) < rss + 200
        # A pin holds against every route that would unload the model.
        kept = client.post("/api/generate", json={"model": "wide", "prompt": "", "keep_alive": 0})
        assert kept.status_code == 409 and "pinned" in kept.json()["error"]
        assert client.post("/models/unload", json={"model": "wide"}).status_code == 409
        assert client.request("DELETE", "/api/delete", json={"model": "wide"}).status_code == 409
        assert "wide" in [m["id"] for m in client.get("/v1/models").json()["data"]]
        # The cap holds: another model cannot push the pinned one out.
        chat = {"model": smol, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        capped = client.post("/v1/chat/completions", json=chat)
        assert capped.status_code == 409 and capped.json()["error"]["code"] == "model_limit", capped.text
        assert _status(client, smol) == {"value": "unloaded"} and _status(client, "wide")["value"] == "loaded"
        # A context past what the model was trained for is lowered to it, and planned: SmolLM2 holds 8,192.
        assert client.post("/models/load", json={"model": "wide", "pin": False}).status_code == 200
        reply = client.post(
            "/api/generate",
            json={"model": smol, "prompt": "Hi", "stream": False, "options": {"num_predict": 3, "num_ctx": 100_000}},
        )
        assert reply.status_code == 200, reply.text
        status = _status(client, smol)
        assert status["context_length"] == 8192 and _status(client, "wide") == {"value": "unloaded"}
        assert status["memory_bytes"] < 2 << 30
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
