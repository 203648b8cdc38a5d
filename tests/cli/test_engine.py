"""`hearth run` / `hearth chat` as subprocesses on the real SmolLM2 GGUF (run via `python -m app.cli`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import require_llama_cpp

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "You are a helpful assistant who answers in English."
STATS = re.compile(r"\[(\d+) prompt tokens \((\d+) evaluated\).* (\d+) tokens at [\d.]+ tok/s · (\w+)\]")


def hearth(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


class Reader:
    """Collects a pipe's bytes on a thread so the test can wait for text to appear."""

    def __init__(self, pipe) -> None:
        self.data = b""
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        while chunk := os.read(pipe.fileno(), 4096):
            with self.lock:
                self.data += chunk

    @property
    def text(self) -> str:
        with self.lock:
            return self.data.decode("utf-8", "replace")

    def wait_for(self, predicate, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate(self.text):
                return True
            time.sleep(0.05)
        return predicate(self.text)


@pytest.fixture
def smollm2_path(smollm2_gguf) -> str:
    require_llama_cpp()
    return str(smollm2_gguf)


def test_run_streams_the_answer_and_prints_stats(smollm2_path):
    proc = subprocess.run(
        hearth("run", smollm2_path, "What is the capital of France?", "--system", SYSTEM, "--temp", "0"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
    m = STATS.search(proc.stderr)
    assert m, proc.stderr
    assert int(m.group(1)) > 10 and int(m.group(3)) >= 4 and m.group(4) == "stop"
    assert "prompt tokens" not in proc.stdout  # stats stay off stdout


def test_run_with_a_json_schema_bomb_fails_clearly_and_a_fair_schema_constrains_the_answer(smollm2_path, tmp_path):
    bomb = tmp_path / "bomb.json"
    bomb.write_text('{"type": "string", "maxLength": 20000}')  # crashed the process with a segfault (T38)
    proc = subprocess.run(
        hearth("run", smollm2_path, "hi", "--json-schema", str(bomb)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--json-schema.maxLength" in proc.stderr and "over the 10,000 allowed" in proc.stderr
    fair = tmp_path / "fair.json"
    fair.write_text(
        '{"type": "object", "properties": {"city": {"type": "string", "maxLength": 5000}}, "required": ["city"]}'
    )
    proc = subprocess.run(
        hearth("run", smollm2_path, "Name a city.", "--json-schema", str(fair), "--temp", "0", "--system", SYSTEM),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout)["city"], str)


def test_run_with_an_unknown_model_name_fails_clearly(tmp_path):
    proc = subprocess.run(hearth("run", "no-such-model", "hi"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "neither a file nor a model in your library" in proc.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"garbage" * 10)
    proc = subprocess.run(hearth("run", str(bad), "hi"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "hearth run:" in proc.stderr


def test_chat_two_turns_keep_history_then_eof_exits(smollm2_path):
    proc = subprocess.run(
        hearth("chat", smollm2_path, "--system", SYSTEM, "--temp", "0", "--max-tokens", "48"),
        cwd=ROOT,
        input="What is the capital of France?\nAnd what is the capital of Germany?\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout and "Berlin" in proc.stdout
    stats = STATS.findall(proc.stderr)
    assert len(stats) == 2, proc.stderr
    (p1, _e1, _, _), (p2, e2, _, _) = stats
    assert int(p2) > int(p1)  # turn 2 carries the history
    assert int(e2) < int(p2)  # and reuses its prefix


def test_sigint_cancels_the_generation_not_the_repl(smollm2_path):
    proc = subprocess.Popen(
        hearth("chat", smollm2_path, "--system", SYSTEM, "--temp", "0", "--max-tokens", "2000"),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = Reader(proc.stdout), Reader(proc.stderr)
    try:
        proc.stdin.write(b"Write a very long story about a dragon who lives in a castle.\n")
        proc.stdin.flush()
        # Wait for a few words of the reply after the first prompt.
        assert out.wait_for(lambda t: len(t.split(">>> ", 1)[-1].split()) >= 3, 240), (out.text, err.text)
        proc.send_signal(signal.SIGINT)
        assert err.wait_for(lambda t: "[stopped]" in t and "cancelled" in t, 30), err.text
        assert out.wait_for(lambda t: t.count(">>> ") >= 2, 30), out.text  # the REPL asks again
        assert proc.poll() is None
        proc.stdin.write(b"What is the capital of France?\n")
        proc.stdin.flush()
        assert err.wait_for(lambda t: len(STATS.findall(t)) >= 2, 240), err.text
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Paris" in out.text.split(">>> ")[2]


def test_run_by_library_name(smollm2_path):
    from app.core.library import import_path, open_library

    library = open_library()
    try:
        model = import_path(library, smollm2_path).imported[0]
    finally:
        library.close()
    proc = subprocess.run(
        hearth(
            "run",
            model.name,
            "What is the capital of France?",
            "--system",
            "You are a helpful assistant who answers in English.",
            "--temp",
            "0",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
    library = open_library()
    try:
        assert library.get(model.id).last_used_at is not None
    finally:
        library.close()


def test_run_with_parallel_slots_answers_as_the_single_stream_path(smollm2_path):
    outs = []
    for n in ("1", "2"):
        args = ("run", smollm2_path, "Name three colours.", "--system", SYSTEM, "--temp", "0", "--max-tokens", "24")
        proc = subprocess.run(hearth(*args, "--parallel", n), cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and outs[0].strip()  # each slot has its own cells: the same tokens


@pytest.mark.parametrize("command", [("run", "model", "hi"), ("chat", "model"), ("serve",)])
@pytest.mark.parametrize("value", ["0", "17", "four"])
def test_parallel_out_of_range_is_a_usage_error(command, value):
    proc = subprocess.run(hearth(*command, "--parallel", value), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "argument --parallel" in proc.stderr
    want = (
        "is not a whole number or auto"
        if value == "four"
        else f"{value} is out of range: give 1 (one request at a time) to 16 parallel requests, or auto"
    )
    assert want in proc.stderr


def test_auto_parallel_is_for_serve_alone():
    from app.cli.context import parallel_count, slot_count
    from app.core.settings import AUTO_PARALLEL

    assert parallel_count("auto") == parallel_count(" AUTO ") == AUTO_PARALLEL and parallel_count("3") == 3
    proc = subprocess.run(
        hearth("run", "model", "hi", "--parallel", "auto"), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "auto is for `hearth serve`" in proc.stderr
    assert slot_count("2") == 2


def test_run_with_a_draft_model(tmp_path):
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    big = write_tiny_llama_gguf(tmp_path / "big.gguf", n_layer=6, n_ctx=1024)
    small = write_tiny_llama_gguf(tmp_path / "small.gguf", n_layer=1, n_embd=128, n_ff=256, n_ctx=1024)
    other = write_tiny_llama_gguf(tmp_path / "other.gguf", n_layer=1, n_embd=128, n_ff=256, vocab_size=330)
    args = ["abc abc abc", "--temp", "0", "--max-tokens", "16", "--ctx", "512"]
    done = subprocess.run(
        hearth("run", str(big), *args, "--draft-model", str(small)), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert STATS.search(done.stderr) and re.search(r"drafts \d+ % of \d+ accepted", done.stderr)
    wrong = subprocess.run(
        hearth("run", str(big), *args, "--draft-model", str(other)), cwd=ROOT, capture_output=True, text=True
    )
    assert wrong.returncode != 0 and "vocabulary of 330 tokens" in wrong.stderr  # a clear error, no reply
    missing = subprocess.run(
        hearth("run", str(big), *args, "--draft-model", "nope"), cwd=ROOT, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "'nope' is neither a file nor a model in your library" in missing.stderr
