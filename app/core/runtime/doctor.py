"""`hearth doctor`: is the installed llama.cpp the right one for this machine? Its build (version, backend,
the CPU features compiled in), what the hardware could use instead and roughly what that would gain (from
the speed model), what the native canary turned off and why, and the exact command that fixes a mismatch.

Everything here is a pure function of a HardwareProfile, the build's own description and the canary's
records, so each verdict is tested with fakes; `diagnose_this_machine` gathers the real ones.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.core.hardware.native_checks import FEATURE_NAMES, CheckRecord, turned_off_here
from app.core.hardware.profile import EngineAvailability, HardwareProfile

logger = logging.getLogger(__name__)

# llama_print_system_info()'s CPU feature names → the names the hardware probe uses (CpuInfo.simd).
SYSTEM_INFO_FEATURES = {
    "AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "AVX512": "avx512f", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AVX_VNNI": "avx_vnni", "AMX_INT8": "amx", "NEON": "neon",
    "DOTPROD": "dotprod", "MATMUL_INT8": "i8mm", "SVE": "sve",
}  # fmt: skip
# Features whose absence from a build costs decode speed on a CPU that has them (the AVX-512 family is
# worth a rebuild; AMX is left to the canary, and a portable x86-64-v3 build lacks it on purpose).
_WORTH_A_REBUILD = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "neon", "dotprod", "i8mm")
# The reference model for "roughly what it would gain": an 8B model at Q4_K_M, what most people run first.
REFERENCE_PARAMS = 8_000_000_000
REFERENCE_QUANT = "Q4_K_M"


@dataclass
class BuildInfo:
    """What the installed llama.cpp says of itself."""

    version: str = ""
    backend: str = "CPU"  # "CPU", "CUDA", "Metal", "Vulkan", "ROCm", "SYCL"
    gpu_offload: bool = False
    cpu_features: list[str] = field(default_factory=list)  # CpuInfo.simd names compiled in
    system_info: str = ""


@dataclass
class DoctorReport:
    build: BuildInfo | None  # None: llama.cpp is not installed or failed to load
    build_error: str
    cpu: str
    cpu_features: list[str]
    gpus: list[dict[str, Any]]
    verdict: str  # one sentence, for the Hardware page and the model bar
    ok: bool  # the engine can use what the planner plans for
    fixes: list[str] = field(default_factory=list)  # exact commands
    gains: list[str] = field(default_factory=list)  # predicted speed with the fix, from the speed model
    notes: list[str] = field(default_factory=list)
    turned_off: list[str] = field(default_factory=list)  # native_checks.FEATURES the canary turned off
    checks: list[dict[str, Any]] = field(default_factory=list)  # the canary's records for this build

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_system_info(text: str) -> list[str]:
    """The CPU features a llama.cpp build was compiled with, from llama_print_system_info()."""
    found = set()
    for part in text.replace("\n", "|").split("|"):
        name, _, value = part.partition("=")
        name = name.split(":")[-1].strip().upper()
        if value.strip() == "1" and name in SYSTEM_INFO_FEATURES:
            found.add(SYSTEM_INFO_FEATURES[name])
    order = list(SYSTEM_INFO_FEATURES.values())
    return sorted(found, key=order.index)


def build_from_module(llama_cpp: Any) -> BuildInfo:
    from app.core.hardware.engines import backend_from_system_info

    raw = llama_cpp.llama_print_system_info()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    return BuildInfo(
        version=str(getattr(llama_cpp, "__version__", "") or ""),
        backend=backend_from_system_info(text, offload),
        gpu_offload=offload,
        cpu_features=parse_system_info(text),
        system_info=text.strip(),
    )


def wanted_backend(profile: HardwareProfile) -> tuple[str, str]:
    """(the `make engine BACKEND=` value this machine should run, the GPU it is for): the backend the planner
    plans for, so the doctor and the fit badges never disagree."""
    from app.core.models.devices import machine_from_profile

    machine = machine_from_profile(profile)
    if machine.backend == "cpu" or not machine.gpus:
        return "cpu", ""
    return machine.backend, machine.gpus[0].model or "this Mac's GPU"


_BACKEND_OF = {"cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan", "rocm": "ROCm", "cpu": "CPU"}


def diagnose(
    profile: HardwareProfile,
    build: BuildInfo | None,
    records: list[CheckRecord],
    *,
    build_error: str = "",
    gain: Any = None,
) -> DoctorReport:
    """The verdict for this build on this machine. `gain(backend) -> str | None` predicts the speed-up of
    the fix (the speed model; None leaves it out)."""
    gpus = [{"name": g.name, "vendor": g.vendor, "memory_total_bytes": g.memory_total_bytes} for g in profile.gpus]
    report = DoctorReport(build, build_error, profile.cpu.brand, list(profile.cpu.simd), gpus, "", True)
    if build is None:
        report.ok = False
        report.verdict = f"llama.cpp is not usable here: {build_error or 'llama-cpp-python is not installed'}."
        report.fixes.append("make install")
        return report
    # The planner picks its backend by the installed engine's: plan with this build's.
    llama = EngineAvailability("llama.cpp", True, build.version, build.backend, build.gpu_offload)
    profile = replace(profile, engines=[*(e for e in profile.engines if e.name != "llama.cpp"), llama])
    want, target = wanted_backend(profile)
    have = build.backend
    if want != "cpu" and have != _BACKEND_OF[want]:
        report.ok = False
        report.verdict = (
            f"llama.cpp is built for the {have if have != 'CPU' else 'CPU only'}, so models run at CPU speed "
            f"although {target} could take them: `make engine BACKEND={want}` rebuilds it."
        )
        report.fixes.append(f"make engine BACKEND={want}")
        if want == "vulkan" and any(g.vendor == "amd" and not g.integrated for g in profile.gpus):
            report.notes.append("an AMD GPU can also run llama.cpp through ROCm: `make engine BACKEND=rocm`")
        line = gain(want) if gain is not None else None
        if line:
            report.gains.append(line)
    elif want == "cpu" and have not in ("CPU", "Metal"):
        report.notes.append(f"this llama.cpp is built for {have} but no such GPU is visible; it runs on the CPU")
    _cpu_verdict(report, profile, build)
    report.checks = [asdict(r) for r in records]
    report.turned_off = sorted(turned_off_here(records))
    if report.turned_off:
        failed = [r for r in records if not r.passed]
        why = failed[-1].reason if failed else "it crashed"
        names = ", ".join(FEATURE_NAMES[f] for f in report.turned_off)
        report.notes.append(f"the native check turned off {names} for this build here: {why}")
    if not report.verdict:
        report.verdict = _fine_sentence(build, report)
    return report


# What a flag implies about the others: every AVX2 CPU has AVX, FMA and F16C (Haswell and Zen onwards), every
# AVX-512 one has AVX2; a profile that lists only the newest flags must not read as lacking the older ones.
_IMPLIES = {"avx2": {"avx", "fma", "f16c"}, "avx512f": {"avx2", "avx", "fma", "f16c"}, "dotprod": {"neon"}}


def _with_implied(flags: set[str]) -> set[str]:
    out = set(flags)
    for flag in flags:
        out |= _IMPLIES.get(flag, set())
    return out


def _cpu_verdict(report: DoctorReport, profile: HardwareProfile, build: BuildInfo) -> None:
    have = _with_implied(set(profile.cpu.simd))
    compiled = set(build.cpu_features)
    if not have or not compiled:
        return  # one side unknown (a build without the CPU line, a CPU probe that failed): say nothing
    beyond = sorted(compiled - have - {"amx"})
    if beyond:
        report.ok = False
        report.verdict = report.verdict or (
            f"this llama.cpp uses {', '.join(beyond)}, which this CPU lacks: it will stop with an illegal "
            "instruction; `make engine BACKEND=cpu` rebuilds it for this CPU."
        )
        report.fixes.append("make engine BACKEND=cpu")
        return
    missing = [f for f in _WORTH_A_REBUILD if f in have and f not in compiled]
    if missing:
        report.notes.append(
            f"this CPU has {', '.join(missing)}, which this llama.cpp was built without (a portable build?): "
            "`make engine BACKEND=cpu` builds one for this CPU, which decodes faster on quantized weights"
        )
        if "make engine BACKEND=cpu" not in report.fixes and report.ok:
            report.fixes.append("make engine BACKEND=cpu")


def _fine_sentence(build: BuildInfo, report: DoctorReport) -> str:
    where = build.backend if build.backend != "CPU" else "the CPU"
    if report.turned_off:
        names = ", ".join(FEATURE_NAMES[f] for f in report.turned_off)
        return f"llama.cpp {build.version} runs on {where}, without {names} (it crashed here)."
    return f"llama.cpp {build.version} runs on {where}, as this machine can."


def speed_gain(profile: HardwareProfile, backend: str) -> str | None:
    """Predicted decode of the reference model on the CPU and with `backend`, from the speed model."""
    from app.core.models.devices import machine_from_profile
    from app.core.models.hf_config import spec_from_hf_config
    from app.core.models.memory import LoadOptions
    from app.core.models.planner import plan_load
    from app.core.models.speed import predict_speed

    config = {
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
    }  # fmt: skip
    size = int(REFERENCE_PARAMS * 4.85 / 8)  # Q4_K_M's bits per weight
    try:
        spec = spec_from_hf_config(
            config, weight_bytes=size, n_params=REFERENCE_PARAMS, file_type=REFERENCE_QUANT, name="an 8B model"
        )
        opts = LoadOptions(n_ctx=8192)
        speeds = []
        for prefer_gpu in (False, True):
            machine = machine_from_profile(profile, prefer_gpu=prefer_gpu)
            plan = plan_load(spec, machine, n_ctx=8192, options=opts)
            speeds.append(predict_speed(spec, plan).decode_tok_s if plan.fits else 0.0)
    except Exception as exc:  # a gap in the speed model must not cost the diagnosis
        logger.debug("no speed estimate for the doctor: %s", exc)
        return None
    cpu, gpu = speeds
    if cpu <= 0 or gpu <= cpu:
        return None
    return (
        f"an 8B model at {REFERENCE_QUANT}: about {cpu:.0f} tok/s on the CPU, about {gpu:.0f} tok/s with "
        f"{_BACKEND_OF.get(backend, backend)} (predicted, {gpu / cpu:.0f}× faster)"
    )


def diagnose_this_machine(profile: HardwareProfile) -> DoctorReport:
    """Import llama.cpp, read the canary's store, and diagnose (a worker thread or the CLI: it imports native
    code and may take a second)."""
    from app.core.hardware.native_checks import records_here
    from app.core.native import import_native

    try:
        lib = import_native("llama_cpp")
        build = build_from_module(lib)
        records = records_here(lib)
    except Exception as exc:  # not installed, or a library that fails to load
        logger.warning("llama.cpp failed to load for the doctor: %s", exc)
        return diagnose(profile, None, [], build_error=str(exc))
    return diagnose(profile, build, records, gain=lambda backend: speed_gain(profile, backend))


def format_report(report: DoctorReport) -> str:
    """The plain-text `hearth doctor`."""
    lines = ["llama.cpp"]
    b = report.build
    if b is None:
        lines.append(f"  not usable: {report.build_error or 'not installed'}")
    else:
        lines += [
            f"  version    {b.version or '?'}",
            f"  backend    {b.backend}" + ("" if b.gpu_offload or b.backend == "CPU" else " (no GPU offload)"),
            f"  CPU build  {', '.join(b.cpu_features) or 'unknown'}",
        ]
    lines += ["This machine", f"  CPU        {report.cpu or 'unknown'} ({', '.join(report.cpu_features) or '?'})"]
    lines += [f"  GPU        {g['name']} ({g['vendor']})" for g in report.gpus] or ["  GPU        none seen"]
    lines += ["Verdict", f"  {report.verdict}"]
    lines += [f"  gain: {g}" for g in report.gains]
    lines += [f"  note: {n}" for n in report.notes]
    if report.fixes:
        lines += ["Fix"] + [f"  {cmd}" for cmd in report.fixes]
    if report.checks:
        lines.append("Native checks (this build, this machine)")
        for r in report.checks:
            on = [f for f, v in r["config"].items() if v]
            state = "passed" if r["passed"] else f"failed: {r['reason']}"
            lines.append(f"  {r['model']} [{r['weights']}] with {', '.join(on) or 'nothing risky'}: {state}")
    return "\n".join(lines)
