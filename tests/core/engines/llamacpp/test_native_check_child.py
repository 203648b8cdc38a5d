"""The native check child runs what real use runs: a prompt of a full batch then generated tokens, or the
pooled path of an embeddings model or reranker. A crash that only a large batch triggers (the child's test
seam, as llama.cpp's AMX kernels crashed on a full batch and not on one token) fails the check where the first,
one-token check passed; the load falls back to extra buffer types off, and the real in-process decode of a long
prompt, under the same fault, survives and answers. Crash paths run in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.canary.guard import (
    CHECK_GENERATE,
    CHECK_SOURCE,
    RESULT_MARK,
    check_shape,
    subprocess_runner,
)
from app.core.engines.llamacpp.check_child import FAULT_ENV
from app.core.hardware.native_checks import Fingerprint, NativeCheckStore
from tests.helpers import require_llama_cpp

REPO = Path(__file__).resolve().parents[4]
FP = Fingerprint("0.3.36", "CPU : AVX2 = 1 | AMX_INT8 = 1 | REPACK = 1 |", "Intel Xeon [avx2 amx]")
# The injected crash: a decode of more than this many tokens while extra buffer types are on.
LIMIT = 32


def _spec_json(spec: LoadSpec) -> dict:
    return json.loads(spec.model_dump_json())


def _child(payload: dict, **env: str) -> tuple[int, dict]:
    """The real check child on `payload`: its exit status and its verdict line."""
    proc = subprocess.run(
        [sys.executable, "-m", "app.core.engines.llamacpp.check_child"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=240,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    return proc.returncode, json.loads(lines[-1][len(RESULT_MARK) :]) if lines else {}


def _check_payload(spec: LoadSpec) -> dict:
    """What the guard sends for `spec` (NativeGuard._check)."""
    n_ctx, prompt = check_shape(spec)
    checked = spec.model_copy(update={"n_ctx": n_ctx})
    return {"spec": _spec_json(checked), "prompt_tokens": prompt, "generate": 0 if spec.embedding else CHECK_GENERATE}


ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # role: (model fixture, the load the app would ask for: resolver.plan_load's for an encoder)
    "embed": ("tiny_encoder_gguf", {"n_ctx": 256, "n_batch": 256, "n_ubatch": 256, "embedding": True}),
    "rerank": (
        "tiny_reranker_gguf",
        {"n_ctx": 256, "n_batch": 256, "n_ubatch": 256, "embedding": True, "pooling": "rank"},
    ),
}
# The checks' shape at the default batch (512) on the tiny model; the survivor's on SmolLM2 at a 128-token
# batch (a quarter of the prompt reading, still four times the fault's limit).
SHAPES = {"chat": ("tiny_gguf_q8_0", {"n_ctx": 4096}), **ENCODERS}
ROLES = {"chat": ("smollm2_gguf", {"n_ctx": 1024, "n_batch": 128, "n_ubatch": 128}), **ENCODERS}


@pytest.mark.slow
@pytest.mark.parametrize("role", SHAPES)
def test_the_check_fills_the_batch_the_load_will_use(role, request):
    """Without the fault, each role's check passes having run a full batch through its own path."""
    require_llama_cpp()
    fixture, load = SHAPES[role]
    spec = LoadSpec(path=request.getfixturevalue(fixture), n_threads=1, **load)
    payload = _check_payload(spec)
    rc, result = _child(payload)
    assert rc == 0 and result["ok"], result
    batch = payload["prompt_tokens"]
    assert batch == (spec.n_ctx if spec.embedding else spec.n_batch)
    # Within a few tokens of the batch (whole words; a pair's separators), never over it
    assert batch - 12 <= result["prompt_tokens"] <= batch
    if role == "chat":
        assert 1 <= result["generated"] <= CHECK_GENERATE


@pytest.mark.slow
def test_a_one_token_check_passes_the_crash_a_full_batch_meets(tiny_gguf_q8_0, monkeypatch):
    """The seam's crash is one only a large batch meets: the first check's shape (a prompt of a couple of
    tokens, then one token at a time) passes it, the full batch dies by SIGSEGV, and with extra buffer types
    off the same full batch passes."""
    require_llama_cpp()
    spec = LoadSpec(path=tiny_gguf_q8_0, n_ctx=1024, n_threads=1)
    full = _check_payload(spec)
    fault = {FAULT_ENV: str(LIMIT)}

    rc, one_token = _child({"spec": full["spec"], "prompt_tokens": 1, "generate": 2}, **fault)
    assert rc == 0 and one_token["ok"] and one_token["prompt_tokens"] <= 2

    rc, _ = _child(full, **fault)
    assert rc == -signal.SIGSEGV

    rc, safe = _child({**full, "spec": {**full["spec"], "extra_bufts": False}}, **fault)
    assert rc == 0 and safe["ok"] and safe["prompt_tokens"] > LIMIT

    # Through the guard's runner (which passes its environment on): a crash, named
    monkeypatch.setenv(FAULT_ENV, str(LIMIT))
    outcome = subprocess_runner()(full, 120)
    assert outcome.status == "crashed" and "SIGSEGV" in outcome.reason


# Loads `role`'s model through the real guard (the real check child, which honours FAULT_ENV) on a store of its
# own, then gives this process the same fault the check child has (this machine's crash, in-process: a decode
# of more than LIMIT tokens while extra buffer types are on) and runs a long input through the load's own path.
# "unchecked": no guard, extra buffer types on: the fault is real and kills this process.
SURVIVOR = textwrap.dedent(
    """
    import ctypes, json, sys, threading
    from pathlib import Path
    from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams
    from app.core.engines.llamacpp.engine import LlamaCppEngine
    from app.core.engines.canary.guard import NativeGuard
    from app.core.engines.canary.inflight import InflightMarkers
    from app.core.hardware.native_checks import Fingerprint, NativeCheckStore
    from app.core.native import import_native

    mode, role, model, store, limit = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])
    load = json.loads(sys.argv[6])
    fp = Fingerprint("0.3.36", "CPU : AVX2 = 1 | AMX_INT8 = 1 | REPACK = 1 |", "Intel Xeon [avx2 amx]")
    markers = InflightMarkers(store.parent / "inflight")
    if mode == "unchecked":
        engine = LlamaCppEngine(checked=False, markers=markers)
    else:
        engine = LlamaCppEngine(NativeGuard(NativeCheckStore(store), lambda: fp), markers=markers)
    info = engine.load(LoadSpec(path=model, n_threads=1, **load))

    def faulting(native):
        def call(ctx, batch):
            if batch.n_tokens > limit:
                ctypes.string_at(0)
            return native(ctx, batch)
        return call

    if info.extra["extra_bufts"]:
        for module in (import_native("llama_cpp"), import_native("llama_cpp.llama_cpp")):
            for name in ("llama_decode", "llama_encode"):
                setattr(module, name, faulting(getattr(module, name)))

    words = "the quick brown fox jumps over the lazy dog".split()
    text = " ".join(words[i % len(words)] for i in range(150 if role == "chat" else 40))
    out = {"turned_off": info.extra["turned_off"], "note": info.extra["native_note"]}
    if role == "chat":
        request = GenerateRequest(
            messages=[ChatMessage(role="user", content=text + ". Now say hi.")],
            sampling=SamplingParams(temperature=0.0, max_tokens=8),
        )
        chunks = list(engine.generate(request, threading.Event()))
        stats = chunks[-1].stats
        out.update(text="".join(c.text for c in chunks), finish=chunks[-1].finish_reason, tokens=stats.prompt_tokens)
    elif role == "embed":
        got = engine.embed([text])
        out.update(width=len(got.vectors[0]), tokens=got.prompt_tokens)
    else:
        got = engine.rerank("Which animal jumps?", [text])
        out.update(scores=got.scores, tokens=got.prompt_tokens)
    engine.unload()
    print("RESULT " + json.dumps(out))
    """
)


def _survivor(mode: str, role: str, model: Path, store: Path, load: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SURVIVOR, mode, role, str(model), str(store), str(LIMIT), json.dumps(load)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), FAULT_ENV: str(LIMIT)},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("role", ROLES)
def test_a_crash_only_a_large_batch_triggers_is_caught_and_the_load_survives(role, request, tmp_path):
    require_llama_cpp()
    fixture, load = ROLES[role]
    model = request.getfixturevalue(fixture)
    store = tmp_path / "checks.json"
    proc = _survivor("checked", role, model, store, load)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    out = json.loads(line[len("RESULT ") :])

    # The check failed with extra buffer types on, and the load fell back to them off
    assert out["turned_off"] == ["extra_bufts"]
    assert "SIGSEGV" in out["note"] and "extra CPU buffer types" in out["note"]
    records = NativeCheckStore(store).records(FP)
    assert {(r.config["extra_bufts"], r.passed, r.source) for r in records} == {
        (True, False, CHECK_SOURCE),
        (False, True, CHECK_SOURCE),
    }
    # The in-process decode of a long input (past the fault's limit) survived, and the survivor answers
    assert out["tokens"] > LIMIT
    if role == "chat":
        assert out["finish"] in ("stop", "length") and out["text"].strip()
    elif role == "embed":
        assert out["width"] > 0
    else:
        assert len(out["scores"]) == 1
    assert list((tmp_path / "inflight").glob("*.json")) == []  # no crash left to report


@pytest.mark.slow
def test_the_injected_fault_kills_an_unchecked_process(tmp_path, smollm2_gguf):
    """The control: the same fault in a process whose load kept extra buffer types on (no check) dies on the
    long prompt: the first run's crash that the full-batch check now prevents."""
    require_llama_cpp()
    proc = _survivor("unchecked", "chat", smollm2_gguf, tmp_path / "checks.json", ROLES["chat"][1])
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-3000:]
