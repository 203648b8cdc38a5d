"""The native-crash canary: a child that dies by a signal makes the load fall back, and the verdict is
remembered per machine fingerprint; in-flight markers turn an unforeseen crash into a recorded one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.canary.guard import (
    CHECK_GENERATE,
    CHECK_SOURCE,
    RESULT_MARK,
    CheckOutcome,
    NativeGuard,
    apply_config,
    check_shape,
    config_of,
    describe_exit,
    ladder,
    subprocess_runner,
)
from app.core.engines.canary.inflight import InflightMarkers, NativeActivity, recover_crashes
from app.core.engines.errors import EngineError
from app.core.hardware.native_checks import Fingerprint, NativeCheckStore, NativeConfig, turned_off_here

FP = Fingerprint("0.3.36", "CPU : AVX2 = 1 | AMX_INT8 = 1 | REPACK = 1 |", "Intel Xeon [avx2 amx]")

# A stand-in for the check child: it crashes (a real SIGSEGV) while any feature named in CRASH_ON is on in the
# spec it is given, passes otherwise, and appends each run's spec to a log, so tests count the children.
FAKE_CHILD = textwrap.dedent(
    f"""
    import json, os, signal, sys
    payload = json.loads(sys.stdin.read())
    spec = payload["spec"]
    with open(os.environ["FAKE_CHILD_LOG"], "a") as log:
        extra = {{"_prompt_tokens": payload.get("prompt_tokens"), "_no_bt": os.environ.get("GGML_NO_BACKTRACE")}}
        log.write(json.dumps({{**spec, **extra}}) + "\\n")
    on = {{"extra_bufts": spec["extra_bufts"], "flash_attn": spec["flash_attn"],
          "gpu_offload": spec["n_gpu_layers"] != 0}}
    crash_on = [f for f in os.environ.get("CRASH_ON", "").split(",") if f]
    mode = os.environ.get("CHILD_MODE", "")
    if mode == "error":
        print({RESULT_MARK!r} + json.dumps({{"ok": False, "error": "unknown model architecture: 'foo'"}}))
        sys.exit(1)
    if mode == "hang":
        import time
        time.sleep(60)
    if mode == "crash-all" or any(on[f] for f in crash_on):
        os.kill(os.getpid(), signal.SIGSEGV)
    print("some library chatter on stdout")
    print({RESULT_MARK!r} + json.dumps({{"ok": True}}))
    """
)


@pytest.fixture
def fake_child(tmp_path, monkeypatch):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    log = tmp_path / "children.log"
    monkeypatch.setenv("FAKE_CHILD_LOG", str(log))

    def runs() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return [sys.executable, str(script)], runs


def guard(store_path: Path, command: list[str], fp: Fingerprint = FP) -> NativeGuard:
    return NativeGuard(NativeCheckStore(store_path), lambda: fp, subprocess_runner(command))


def spec(tmp_path, **kw) -> LoadSpec:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return LoadSpec(path=model, **kw)


def test_ladder_turns_off_the_riskiest_feature_first():
    full = NativeConfig(extra_bufts=True, flash_attn=True, gpu_offload=True)
    keys = [c.key for c in ladder(full)]
    assert keys == [
        "extra_bufts=on,flash_attn=on,gpu_offload=on",
        "extra_bufts=off,flash_attn=on,gpu_offload=on",
        "extra_bufts=off,flash_attn=off,gpu_offload=on",
        "extra_bufts=off,flash_attn=off,gpu_offload=off",
    ]
    # A feature not asked for is never a step
    assert [c.key for c in ladder(NativeConfig(extra_bufts=True))] == [
        "extra_bufts=on,flash_attn=off,gpu_offload=off",
        "extra_bufts=off,flash_attn=off,gpu_offload=off",
    ]


def test_apply_config_only_turns_features_off(tmp_path):
    s = spec(tmp_path, n_gpu_layers=-1, flash_attn=True)
    safe = apply_config(s, NativeConfig(extra_bufts=False, flash_attn=True, gpu_offload=False))
    assert (safe.extra_bufts, safe.flash_attn, safe.n_gpu_layers) == (False, True, 0)
    assert config_of(s) == NativeConfig(extra_bufts=True, flash_attn=True, gpu_offload=True)
    assert apply_config(s, config_of(s)) is s


def test_the_check_reads_a_full_batch_as_the_load_will():
    """(context, prompt tokens) of the check: the load's batch whole, in a context just big enough for it and
    the generated tokens (never more than the load's own); an embeddings load's batch is its context."""
    model = Path("m.gguf")
    assert check_shape(LoadSpec(path=model)) == (512 + CHECK_GENERATE + 1, 512)
    big = LoadSpec(path=model, n_ctx=32768, n_batch=2048, n_ubatch=512)
    assert check_shape(big) == (2048 + CHECK_GENERATE + 1, 2048)
    assert check_shape(LoadSpec(path=model, n_ctx=300)) == (300, 300 - CHECK_GENERATE - 1)
    assert check_shape(LoadSpec(path=model, n_ctx=64, n_batch=16, n_ubatch=16)) == (64, 16)
    assert check_shape(LoadSpec(path=model, n_ctx=16)) == (16, 16 - CHECK_GENERATE - 1)
    embed = LoadSpec(path=model, n_ctx=8192, n_batch=8192, n_ubatch=8192, embedding=True)
    assert check_shape(embed) == (8192, 8192)


def test_describe_exit_names_signals_and_windows_crash_codes():
    assert describe_exit(-signal.SIGSEGV) == "died with SIGSEGV"
    assert describe_exit(0xC0000005) == "died with an access violation"
    assert describe_exit(-99) == "died with signal 99"
    assert describe_exit(1) is None and describe_exit(0) is None


def test_a_segfaulting_check_falls_back_and_is_remembered(tmp_path, fake_child, monkeypatch):
    command, runs = fake_child
    monkeypatch.setenv("CRASH_ON", "extra_bufts")
    store = tmp_path / "checks.json"
    result = guard(store, command).safe_spec(spec(tmp_path), ["Q4_0", "F32"])
    assert result.spec.extra_bufts is False
    assert result.turned_off == ["extra_bufts"]
    assert "SIGSEGV" in result.sentence and "extra CPU buffer types" in result.sentence
    assert [r["extra_bufts"] for r in runs()] == [True, False]
    # The child loads the model itself, small (one slot, no drafting), and reads a prompt of the full batch
    # the load will read prompts in (512), in a context that holds it and the tokens it generates
    assert all(r["slots"] == 1 and r["speculative"] == "off" for r in runs())
    assert all(r["_prompt_tokens"] == 512 == r["n_batch"] and r["n_ctx"] == 512 + CHECK_GENERATE + 1 for r in runs())
    # An abort's expected answer skips ggml's gdb backtrace (seconds each)
    assert all(r["_no_bt"] == "1" for r in runs())

    # A new process (a new guard on the same store) runs no child: the verdict is remembered
    again = guard(store, command).safe_spec(spec(tmp_path), ["F32", "Q4_0"])
    assert again.spec.extra_bufts is False and again.checks_run == 0
    assert len(runs()) == 2
    records = NativeCheckStore(store).records(FP)
    assert {(r.weights, r.passed) for r in records} == {("F32,Q4_0", False), ("F32,Q4_0", True)}
    assert turned_off_here(records) == {"extra_bufts"}
    assert oct(store.stat().st_mode & 0o777) == "0o600"


def test_another_build_or_machine_checks_again(tmp_path, fake_child, monkeypatch):
    command, runs = fake_child
    monkeypatch.setenv("CRASH_ON", "extra_bufts")
    store = tmp_path / "checks.json"
    guard(store, command).safe_spec(spec(tmp_path), ["Q8_0"])
    other = Fingerprint("0.3.37", FP.system_info, FP.cpu)
    monkeypatch.setenv("CRASH_ON", "")
    result = guard(store, command, other).safe_spec(spec(tmp_path), ["Q8_0"])
    assert result.spec.extra_bufts is True and result.checks_run == 1
    assert len(runs()) == 3


def test_flash_attention_and_offload_go_next(tmp_path, fake_child, monkeypatch):
    command, runs = fake_child
    monkeypatch.setenv("CRASH_ON", "gpu_offload")
    result = guard(tmp_path / "c.json", command).safe_spec(spec(tmp_path, n_gpu_layers=-1, flash_attn=True), ["F16"])
    assert (result.spec.extra_bufts, result.spec.flash_attn, result.spec.n_gpu_layers) == (False, False, 0)
    assert result.turned_off == ["extra_bufts", "flash_attn", "gpu_offload"]
    assert len(runs()) == 4 and len(result.reasons) == 3


def test_a_model_that_crashes_in_every_configuration_is_refused(tmp_path, fake_child, monkeypatch):
    command, _ = fake_child
    monkeypatch.setenv("CHILD_MODE", "crash-all")
    with pytest.raises(EngineError, match="every configuration"):
        guard(tmp_path / "c.json", command).safe_spec(spec(tmp_path), ["Q4_K"])


def test_an_ordinary_error_is_not_a_crash_and_is_not_remembered(tmp_path, fake_child, monkeypatch):
    command, runs = fake_child
    monkeypatch.setenv("CHILD_MODE", "error")
    store = tmp_path / "c.json"
    result = guard(store, command).safe_spec(spec(tmp_path), ["Q4_K"])
    assert result.spec.extra_bufts is True and result.turned_off == []
    assert NativeCheckStore(store).records(FP) == []  # the in-process load reports the error itself
    assert len(runs()) == 1


def test_a_hanging_check_counts_as_a_crash(tmp_path, fake_child, monkeypatch):
    command, _ = fake_child
    monkeypatch.setenv("CHILD_MODE", "hang")
    runner = subprocess_runner(command)
    outcome = runner({"spec": json.loads(spec(tmp_path).model_dump_json())}, 2.0)
    assert outcome.status == "crashed" and "did not finish within 2 s" in outcome.reason


def test_a_corrupt_store_is_ignored_and_rewritten(tmp_path, fake_child):
    command, _ = fake_child
    store = tmp_path / "c.json"
    store.write_text("{not json")
    result = guard(store, command).safe_spec(spec(tmp_path), ["F16"])
    assert result.checks_run == 1
    assert len(NativeCheckStore(store).records(FP)) == 1


def test_a_pass_of_the_one_token_check_is_checked_again_and_its_crashes_still_hold(tmp_path, fake_child, monkeypatch):
    """A store written by the first check (a one-token prompt, source "canary"): its pass proves nothing about
    a full batch, so that configuration is checked again; its crash is still a crash, checked no more."""
    from app.core.hardware.native_checks import CheckRecord

    command, runs = fake_child
    monkeypatch.setenv("CRASH_ON", "extra_bufts")
    store = tmp_path / "c.json"
    on = {"extra_bufts": True, "flash_attn": False, "gpu_offload": False}
    NativeCheckStore(store).put(FP, CheckRecord("Q4_0", on, True, "", "model.gguf", source="canary"))
    result = guard(store, command).safe_spec(spec(tmp_path), ["Q4_0"])
    assert result.spec.extra_bufts is False and result.checks_run == 2
    assert [r["extra_bufts"] for r in runs()] == [True, False]
    assert {(r.passed, r.source) for r in NativeCheckStore(store).records(FP)} == {
        (False, CHECK_SOURCE),
        (True, CHECK_SOURCE),
    }

    old_crash = tmp_path / "old.json"
    NativeCheckStore(old_crash).put(FP, CheckRecord("Q8_0", on, False, "died with SIGSEGV", source="canary"))
    again = guard(old_crash, command).safe_spec(spec(tmp_path), ["Q8_0"])
    assert again.spec.extra_bufts is False and again.checks_run == 1  # only the step below it


# -- crashes nobody foresaw: in-flight markers ----------------------------------------------------

DIES_DECODING = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from app.core.engines.canary.inflight import InflightMarkers, NativeActivity
    markers = InflightMarkers(Path(sys.argv[1]))
    activity = NativeActivity(markers, "llama-1", Path(sys.argv[2]), "F32,Q4_0",
                              {"extra_bufts": True, "flash_attn": False, "gpu_offload": False})
    activity.begin("decoding")
    os.kill(os.getpid(), signal.SIGSEGV)
    """
)


def test_a_crash_mid_decode_is_recorded_and_the_next_load_avoids_that_configuration(tmp_path, fake_child):
    folder = tmp_path / "inflight"
    model = spec(tmp_path).path
    proc = subprocess.run(
        [sys.executable, "-c", DIES_DECODING, str(folder), str(model)], cwd=Path(__file__).parents[4], check=False
    )
    assert proc.returncode == -signal.SIGSEGV
    assert len(list(folder.glob("*.json"))) == 1

    command, runs = fake_child  # a check that passes in every configuration: only the record steers
    g = guard(tmp_path / "c.json", command)
    found = recover_crashes(InflightMarkers(folder), g.record_crash)
    assert len(found) == 1 and found[0].phase == "decoding"
    assert "model.gguf was generating text" in found[0].sentence
    assert list(folder.glob("*.json")) == []  # read once

    result = g.safe_spec(spec(tmp_path), ["Q4_0", "F32"])
    assert result.spec.extra_bufts is False  # the crashed configuration is never used again here
    assert "Hearth stopped while model.gguf was generating text" in result.sentence
    assert [r["extra_bufts"] for r in runs()] == [False]  # only the untried step was checked


def test_markers_of_live_processes_and_cleared_ones_are_not_crashes(tmp_path):
    markers = InflightMarkers(tmp_path / "inflight")
    activity = NativeActivity(markers, "e", tmp_path / "m.gguf", "F16", {"extra_bufts": True})
    activity.begin("loading")
    assert markers.orphans() == []  # this process is alive: its own work, not a crash
    activity.end()
    assert list((tmp_path / "inflight").glob("*.json")) == []
    (tmp_path / "inflight" / "junk.json").write_text("not json")
    assert markers.orphans() == [] and not (tmp_path / "inflight" / "junk.json").exists()


# -- the real engine ------------------------------------------------------------------------------


def _llama_cpp():
    try:
        from app.core.native import import_native

        return import_native("llama_cpp")
    except Exception as exc:
        from tests.helpers import native_missing

        native_missing(exc)


def test_model_params_switch_reaches_llama_cpp():
    lib = _llama_cpp()
    from app.core.engines.llamacpp.options import model_params_for, supports_extra_bufts_switch

    assert supports_extra_bufts_switch(lib)
    assert lib.llama_cpp.llama_model_default_params().use_extra_bufts is True
    with model_params_for(lib, LoadSpec(path=Path("x.gguf"), extra_bufts=False)):
        assert lib.llama_cpp.llama_model_default_params().use_extra_bufts is False
    assert lib.llama_cpp.llama_model_default_params().use_extra_bufts is True


@pytest.mark.slow
def test_the_real_check_child_passes_a_real_model(tmp_path, tiny_gguf_q8_0):
    _llama_cpp()
    lib_guard = NativeGuard(NativeCheckStore(tmp_path / "c.json"), lambda: FP)
    result = lib_guard.safe_spec(LoadSpec(path=tiny_gguf_q8_0, n_ctx=512), ["Q8_0", "F32"])
    assert result.checks_run == 1 and result.turned_off == []
    [record] = lib_guard.store.records(FP)
    assert record.passed and record.model == tiny_gguf_q8_0.name


@pytest.mark.slow
def test_the_real_check_child_embeds_with_an_embedding_model_and_catches_its_abort(tmp_path, tiny_encoder_gguf):
    """An encoder whose token types are F16 loads, then aborts llama.cpp on its first decode: the check child
    runs the embedding it will serve (a chat generation would be refused before any decode and pass it)."""
    _llama_cpp()
    from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf

    lib_guard = NativeGuard(NativeCheckStore(tmp_path / "c.json"), lambda: FP)
    good = lib_guard.safe_spec(LoadSpec(path=tiny_encoder_gguf, n_ctx=256, embedding=True), ["F16", "F32"])
    assert good.turned_off == []
    bad = write_tiny_bert_gguf(tmp_path / "half-token-types.gguf", half_token_types=True)
    with pytest.raises(EngineError, match="crashed"):
        lib_guard.safe_spec(LoadSpec(path=bad, n_ctx=256, embedding=True), ["F16"])


@pytest.mark.slow
def test_the_engine_loads_and_answers_in_the_safe_configuration(tmp_path, tiny_gguf_q8_0, fake_child, monkeypatch):
    """The injected crash (a SIGSEGV child while extra buffer types are on) makes the real engine load without
    them, and it still answers; the load's info says what was turned off."""
    _llama_cpp()
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    command, _ = fake_child
    monkeypatch.setenv("CRASH_ON", "extra_bufts")
    markers = InflightMarkers(tmp_path / "inflight")
    engine = LlamaCppEngine(guard(tmp_path / "c.json", command), markers=markers)
    info = engine.load(LoadSpec(path=tiny_gguf_q8_0, n_ctx=256, n_threads=1))
    try:
        assert info.extra["turned_off"] == ["extra_bufts"] and info.extra["extra_bufts"] is False
        assert "SIGSEGV" in info.extra["native_note"]
        request = GenerateRequest(prompt="Hi", sampling=SamplingParams(temperature=0.0, max_tokens=3))
        chunks = list(engine.generate(request, threading.Event()))
        assert chunks[-1].finish_reason in ("stop", "length")
        assert list(markers.folder.glob("*.json")) == []  # the load's marker was cleared
    finally:
        engine.unload()


def test_the_bundle_runs_the_child_through_its_own_program(monkeypatch):
    from app.core.engines.canary import guard as native_guard

    assert native_guard.child_command()[1:] == ["-m", "app.core.engines.llamacpp.check_child"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert native_guard.child_command() == [sys.executable, "--hearth-native-check"]


def test_the_check_child_reports_a_bad_request_without_crashing(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "app.core.engines.llamacpp.check_child"],
        input=json.dumps({"spec": {"path": str(tmp_path / "x.gguf"), "bogus": 1}}),
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[4],
        env={**os.environ},
        check=False,
    )
    assert proc.returncode == 1
    assert RESULT_MARK in proc.stdout and "bad check request" in proc.stdout


def test_the_check_child_leaves_no_marker_to_report_as_a_crash(tmp_path, monkeypatch, tiny_gguf_q8_0):
    """A check child that dies is the expected answer: its load must not read as last run's crash."""
    _llama_cpp()
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    seen = []
    monkeypatch.setattr(InflightMarkers, "mark", lambda self, *a: seen.append(a))
    unchecked = LlamaCppEngine(checked=False, markers=InflightMarkers(tmp_path / "inflight"))
    unchecked.load(LoadSpec(path=tiny_gguf_q8_0, n_ctx=256, n_threads=1))
    unchecked.unload()
    assert seen == []
    # The app's engine marks the same load (here with a guard whose check always passes).
    checked = LlamaCppEngine(
        NativeGuard(NativeCheckStore(tmp_path / "c.json"), lambda: FP, lambda payload, timeout: CheckOutcome("passed")),
        markers=InflightMarkers(tmp_path / "inflight"),
    )
    checked.load(LoadSpec(path=tiny_gguf_q8_0, n_ctx=256, n_threads=1))
    checked.unload()
    assert [a[1] for a in seen] == ["loading"]  # (owner, phase, …)
