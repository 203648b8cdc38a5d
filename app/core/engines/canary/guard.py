"""The native-crash canary: before this llama.cpp build first loads a weight-type set with a given set of
risky features on this machine, a child process loads the model and runs what real use will run: a prompt
of one full batch (the batch the load will decode prompts in, so the batched matrix kernels run), then a few
generated tokens; or, for a model loaded for embeddings or ranking, one input that fills its batch through
that pooled path. A child that dies by a signal (or hangs) costs only itself: the load is retried with the
riskiest feature off (extra CPU buffer types — the AMX and repack kernels —, then flash attention, then GPU
offload) until one passes, and every result is remembered (app.core.hardware.native_checks), so a warm start
runs nothing.

Found first on Intel Xeons with AMX, where llama.cpp's AMX buffer type crashes in its batched kernels
(ggml-org/llama.cpp#20824): a one-token decode takes the single-row path and passed, and the real prompt then
crashed the process. Nothing here is specific to it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.engines.base import LoadSpec
from app.core.engines.errors import EngineError
from app.core.hardware.native_checks import (
    FEATURE_NAMES,
    FEATURES,
    CheckRecord,
    Fingerprint,
    NativeCheckStore,
    NativeConfig,
)

logger = logging.getLogger(__name__)

# The check's own context at least (a chat's is what a full batch and the generated tokens need, at most the
# load's own): small, since the KV cache's size changes no kernel.
CHECK_CTX = 256
# Tokens the check generates after its prompt: single-token decodes, the other kernels a chat runs.
CHECK_GENERATE = 4
# Who made a record: passes of the first check (source "canary", a one-token prompt that never reached the
# batched kernels) prove nothing about a full batch, so they are checked again; its failures still hold.
CHECK_SOURCE = "canary-full-batch"
# A load reads the weights once; give it a generous floor plus time for the bytes (a slow disk, a big GPU
# upload) and for the prompt (weight bytes × tokens a slow CPU reads per second: a 4 GB model's 512-token
# batch in about a minute), and never more than CHECK_TIMEOUT_MAX_S: past that a hang is a hang.
CHECK_TIMEOUT_MIN_S = 90.0
CHECK_BYTES_PER_S = 150e6
CHECK_PROMPT_BYTE_TOKENS_PER_S = 40e9
CHECK_TIMEOUT_MAX_S = 600.0
# Windows reports a crash as an NTSTATUS exit code instead of a signal.
_WINDOWS_CRASHES = {
    0xC0000005: "an access violation",
    0xC000001D: "an illegal instruction",
    0xC0000409: "a stack buffer overrun",
    0xC00000FD: "a stack overflow",
}
# Printed by the child before its JSON line, so stray library output on stdout cannot be mistaken for it.
RESULT_MARK = "HEARTH-NATIVE-CHECK "


@dataclass(frozen=True)
class CheckOutcome:
    """What one child run said: passed, crashed (a signal, a hang), or failed in an ordinary way (an
    error llama.cpp reported; loading in-process gives the same error, so it is not a crash)."""

    status: str  # "passed", "crashed", "error"
    reason: str = ""
    seconds: float = 0.0


# Runs one check: (the child's payload, a timeout) → its outcome. Tests pass a fake child command.
CheckRunner = Callable[[dict[str, Any], float], CheckOutcome]


def config_of(spec: LoadSpec) -> NativeConfig:
    return NativeConfig(extra_bufts=spec.extra_bufts, flash_attn=spec.flash_attn, gpu_offload=spec.n_gpu_layers != 0)


def apply_config(spec: LoadSpec, config: NativeConfig) -> LoadSpec:
    """`spec` with the features `config` turns off turned off (never one turned on)."""
    update: dict[str, Any] = {}
    if spec.extra_bufts and not config.extra_bufts:
        update["extra_bufts"] = False
    if spec.flash_attn and not config.flash_attn:
        update["flash_attn"] = False
    if spec.n_gpu_layers != 0 and not config.gpu_offload:
        update["n_gpu_layers"] = 0
    return spec.model_copy(update=update) if update else spec


def ladder(requested: NativeConfig) -> list[NativeConfig]:
    """The configurations to try, in order: as asked, then one more feature off each step."""
    steps = [requested]
    for feature in FEATURES:
        if getattr(steps[-1], feature):
            steps.append(steps[-1].without(feature))
    return steps


def check_shape(spec: LoadSpec) -> tuple[int, int]:
    """The check's context and the tokens of its prompt for a load of `spec`: a prompt of one full batch as
    the load will decode it, within a context that holds it and the generated tokens (never more than the
    load's own). A load for embeddings decodes each input whole, its batch its context: the check fills it."""
    if spec.embedding:
        return spec.n_ctx, spec.n_ctx
    batch = min(spec.n_batch, spec.n_ctx)  # the runner's batch (llamacpp.slots.open_slots)
    n_ctx = min(spec.n_ctx, max(CHECK_CTX, batch + CHECK_GENERATE + 1))
    return n_ctx, max(1, min(batch, n_ctx - CHECK_GENERATE - 1))


def weights_of(tensor_types: list[str]) -> str:
    return ",".join(sorted({t.upper() for t in tensor_types}))


def describe_exit(returncode: int) -> str | None:
    """Why a child died, when it crashed (a signal, or a Windows crash code); None for an ordinary exit."""
    if returncode < 0:
        try:
            return f"died with {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died with signal {-returncode}"
    crash = _WINDOWS_CRASHES.get(returncode & 0xFFFFFFFF)
    return f"died with {crash}" if crash else None


def child_command() -> list[str]:
    """The command that runs the check child: this interpreter with the child module, or, in a frozen
    bundle (no `-m`), the bundled program itself, which hands the flag to the child's main."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--hearth-native-check"]
    return [sys.executable, "-m", "app.core.engines.llamacpp.check_child"]


def subprocess_runner(command: list[str] | None = None) -> CheckRunner:
    """A CheckRunner that runs `command` (default: the real child) with the payload on stdin."""

    def run(payload: dict[str, Any], timeout: float) -> CheckOutcome:
        argv = list(command or child_command())
        began = time.monotonic()
        # A crash leaves its Python stack in the log; ggml's own backtrace on an abort forks gdb to attach,
        # which costs the expected answer seconds (2 s against 5.5 s here, when ptrace is allowed at all).
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", "GGML_NO_BACKTRACE": "1"}
        try:
            proc = subprocess.run(
                argv,
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            return CheckOutcome("crashed", f"did not finish within {timeout:.0f} s", time.monotonic() - began)
        except OSError as exc:  # the interpreter itself could not start: no verdict on llama.cpp
            return CheckOutcome("error", f"the check could not start: {exc}", time.monotonic() - began)
        seconds = time.monotonic() - began
        crash = describe_exit(proc.returncode)
        if crash is not None:
            tail = proc.stderr.strip().splitlines()[-3:]
            logger.warning("native check crashed (%s); its last lines: %s", crash, " | ".join(tail))
            return CheckOutcome("crashed", f"the check process {crash}", seconds)
        result = _result_line(proc.stdout)
        if proc.returncode == 0 and result.get("ok"):
            return CheckOutcome("passed", "", seconds)
        message = result.get("error") or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckOutcome("error", str(message)[:500], seconds)

    return run


def _result_line(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                value = json.loads(line[len(RESULT_MARK) :])
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


@dataclass
class GuardResult:
    spec: LoadSpec  # what to load in-process
    turned_off: list[str] = field(default_factory=list)  # FEATURES the safe configuration does without
    reasons: list[str] = field(default_factory=list)  # one line per configuration that failed
    checks_run: int = 0  # child processes started for this load (0 on a warm start)

    @property
    def sentence(self) -> str:
        """What was turned off and why, in one sentence (empty when nothing was)."""
        if not self.turned_off:
            return ""
        names = ", ".join(FEATURE_NAMES[f] for f in self.turned_off)
        why = self.reasons[0] if self.reasons else "it crashed llama.cpp"
        return f"Loaded without {names}: with it, {why}."


class NativeGuard:
    """Finds, and remembers, a configuration this llama.cpp build survives on this machine."""

    def __init__(
        self,
        store: NativeCheckStore,
        fingerprint: Callable[[], Fingerprint],
        runner: CheckRunner | None = None,
        *,
        can_skip_extra_bufts: bool = True,
    ) -> None:
        self.store = store
        self._fingerprint = fingerprint
        self._runner = runner or subprocess_runner()
        # An older llama-cpp-python without llama_model_params.use_extra_bufts cannot turn them off.
        self._can_skip_extra_bufts = can_skip_extra_bufts

    @property
    def fingerprint(self) -> Fingerprint:
        return self._fingerprint()

    def safe_spec(self, spec: LoadSpec, tensor_types: list[str]) -> GuardResult:
        """The first configuration on the ladder that passed (checking those never checked), as a LoadSpec.
        Raises EngineError when every configuration crashed."""
        fp = self._fingerprint()
        weights = weights_of(tensor_types)
        requested = config_of(spec)
        result = GuardResult(spec)
        for config in self._steps(requested):
            record = self.store.find(fp, weights, config)
            if record is None or (record.passed and record.source != CHECK_SOURCE):
                record = self._check(fp, weights, spec, config)
                result.checks_run += 1
                if record is None:  # an ordinary error: the in-process load reports it
                    return result
            if record.passed:
                result.spec = apply_config(spec, config)
                result.turned_off = config.turned_off(requested)
                if result.turned_off:
                    logger.warning("%s: %s", Path(spec.path).name, result.sentence)
                return result
            result.reasons.append(f"{_features_text(config)}: {record.reason}")
        raise EngineError(
            f"llama.cpp crashed on {Path(spec.path).name} in every configuration tried ("
            + "; ".join(result.reasons)
            + "); the file or this llama.cpp build is broken for it",
            reasons=result.reasons,
        )

    def _steps(self, requested: NativeConfig) -> list[NativeConfig]:
        steps = ladder(requested)
        if not self._can_skip_extra_bufts:
            steps = [s for s in steps if s.extra_bufts == requested.extra_bufts]
        return steps

    def _check(self, fp: Fingerprint, weights: str, spec: LoadSpec, config: NativeConfig) -> CheckRecord | None:
        n_ctx, prompt_tokens = check_shape(spec)
        checked = apply_config(spec, config).model_copy(
            update={"n_ctx": n_ctx, "slots": 1, "speculative": "off", "draft_model": None}
        )
        payload = {
            "spec": json.loads(checked.model_dump_json()),
            "prompt_tokens": prompt_tokens,
            "generate": 0 if spec.embedding else CHECK_GENERATE,
        }
        timeout = _timeout_for(Path(spec.path), prompt_tokens)
        logger.info("checking %s with %s in a child process", Path(spec.path).name, config.key)
        outcome = self._runner(payload, timeout)
        logger.info("native check of %s (%s): %s %s", Path(spec.path).name, config.key, outcome.status, outcome.reason)
        if outcome.status == "error":
            return None
        record = CheckRecord(
            weights=weights,
            config={f: getattr(config, f) for f in FEATURES},
            passed=outcome.status == "passed",
            reason=outcome.reason,
            model=Path(spec.path).name,
            source=CHECK_SOURCE,
        )
        try:
            self.store.put(fp, record)
        except OSError as exc:  # a read-only cache costs a repeated check next time, not this load
            logger.warning("could not remember the native check: %s", exc)
        return record

    def record_crash(self, spec_config: dict[str, bool], weights: str, model: str, phase: str) -> None:
        """A previous run died in native code with this configuration: never use it again here."""
        fp = self._fingerprint()
        record = CheckRecord(
            weights=weights,
            config={f: bool(spec_config.get(f, False)) for f in FEATURES},
            passed=False,
            reason=f"Hearth stopped while {model} was {phase}",
            model=model,
            source="crash",
        )
        self.store.put(fp, record)


def _features_text(config: NativeConfig) -> str:
    on = [FEATURE_NAMES[f] for f in FEATURES if getattr(config, f)]
    return "with " + ", ".join(on) if on else "with every risky feature off"


def _timeout_for(path: Path, prompt_tokens: int = 1) -> float:
    try:
        size = sum(p.stat().st_size for p in _shards(path))
    except OSError:
        size = 0
    prompt_s = size * prompt_tokens / CHECK_PROMPT_BYTE_TOKENS_PER_S
    return min(CHECK_TIMEOUT_MAX_S, CHECK_TIMEOUT_MIN_S + size / CHECK_BYTES_PER_S + prompt_s)


def _shards(path: Path) -> list[Path]:
    from app.core.models.gguf_split import split_shard_names

    names = split_shard_names(path.name) if path.name else []
    return [path.with_name(n) for n in names] or [path]
