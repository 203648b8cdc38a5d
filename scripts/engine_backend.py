"""Pick llama.cpp's backend for this machine and the CMAKE_ARGS that build llama-cpp-python for it.

    python scripts/engine_backend.py [--backend auto|cpu|cuda|vulkan|rocm|metal] [--portable]
                                     [--print cmake-args|backend|explain|env|version|pinned-version|wheel-key]

auto picks, in order: Metal on Apple Silicon; CUDA where nvidia-smi (or NVML) sees a GPU and nvcc and cuBLAS are
installed, for that GPU's compute capability only; ROCm where hipcc is installed and an AMD GPU is seen; Vulkan
where a Vulkan GPU, glslc and the Vulkan headers are there; else the CPU. A GPU whose toolkit is missing is named
in `explain` with the package that installs it, and the CPU build is chosen meanwhile.

The CPU part of every x86 build is never -march=native: llama.cpp's AMX kernels (turned on by a native build on
a Xeon with AMX) crash on the first decode (ggml-org/llama.cpp#20824), so GGML_NATIVE is off and each instruction
set this CPU has is named (AMX off). --portable builds the x86-64-v3 baseline (AVX2, FMA, F16C, BMI2; no
AVX-512, no AMX) that a bundle can ship to other machines.

A CMAKE_ARGS already set in the environment wins: it is used as given. `--print env` prints `export` lines for
sh (CMAKE_ARGS and what the build needs besides, e.g. where a pip-installed cuBLAS is) and writes `explain`'s
text to stderr; the Makefile evaluates it before pip builds llama-cpp-python. Standard library only: it runs
before any venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import glob as _glob
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("auto", "cpu", "cuda", "vulkan", "rocm", "metal")
# llama-cpp-python 0.3.x reads LLAVA_BUILD (its CMakeLists.txt): libmtmd, which reads images for vision models.
# Named although it is the default, so a wheel built without it never passes for one with it (wheel_key).
ALWAYS = ["-DLLAVA_BUILD=ON"]
# CUDA forced where no GPU is visible (a build machine): llama.cpp's own default for CUDA 12+, Turing to Hopper
# (SASS for 86 and 89, PTX that the driver compiles for the rest and newer). CUDA_ARCHITECTURES overrides it.
DEFAULT_CUDA_ARCHS = "75-virtual;80-virtual;86-real;89-real;90-virtual"

# The x86 instruction sets llama.cpp's CPU backend has a switch for: (its option, the /proc/cpuinfo flags it
# needs). GGML_AVX512 compiles with -mavx512f/cd/vl/dq/bw, so it needs all five.
X86_FEATURES: list[tuple[str, tuple[str, ...]]] = [
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512_bf16")),
]
AMX_OFF = ["GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"]
# x86-64-v3 (Haswell, 2013; AMD Excavator/Zen): what a bundle may assume of any machine it lands on.
PORTABLE_X86 = {"GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}

# Package hints, printed when a GPU is seen but its toolkit is not.
HINT_CUDA = (
    "CUDA: install the CUDA toolkit (nvcc and cuBLAS): Debian/Ubuntu `sudo apt install nvidia-cuda-toolkit`, "
    "or NVIDIA's CUDA repository (cuda-toolkit-12-x / cuda-toolkit-13-x)"
)
HINT_CUBLAS = (
    "CUDA: nvcc is there but cuBLAS is not: Debian/Ubuntu `sudo apt install nvidia-cuda-toolkit` (or libcublas-dev "
    "from NVIDIA's repository), or `pip install nvidia-cublas` (CUDA 13; nvidia-cublas-cu12 for CUDA 12) and run "
    "this again with that Python (or CUBLAS_ROOT=<its nvidia/cu13 folder>)"
)
HINT_VULKAN = (
    "Vulkan: install the shader compiler and headers: Debian/Ubuntu `sudo apt install glslc libvulkan-dev` "
    "(glslc comes in the `shaderc` package on older releases and on Fedora/Arch), and a Vulkan driver "
    "(mesa-vulkan-drivers)"
)
HINT_ROCM = "ROCm: install hipcc from AMD's ROCm repository (rocm-hip-sdk; see rocm.docs.amd.com)"
SEARCH_CUDA_ROOTS = ("/usr/local/cuda", "/opt/cuda", "/usr")
NVIDIA_DRIVER_DIRS = ("/usr/local/nvidia/lib64", "/usr/lib/wsl/lib", "/usr/lib64/nvidia")


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _nvml_caps() -> list[str]:
    """Compute capabilities through NVML (pynvml from nvidia-ml-py, when this Python has it): where nvidia-smi is
    not on PATH but the driver is."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            caps = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
                caps.append(f"{major}{minor}")
            return caps
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device: NVML raises its own error types
        return []


def _site_dirs() -> list[str]:
    """This Python's site-packages (a pip-installed cuBLAS lives there as nvidia/cu13 or nvidia/cublas)."""
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    dirs.update(p for p in sys.path if p.endswith("site-packages"))
    return sorted(dirs)


@dataclass
class Machine:
    """Everything the decision reads about the machine, each part replaceable so tests run it on fakes."""

    system: str = field(default_factory=platform.system)
    arch: str = field(default_factory=platform.machine)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], str | None] = _run
    read: Callable[[str], str | None] = _read
    exists: Callable[[str], bool] = os.path.exists
    glob: Callable[[str], list[str]] = _glob.glob
    nvml: Callable[[], list[str]] = _nvml_caps
    site_dirs: Callable[[], list[str]] = _site_dirs


@dataclass
class Decision:
    backend: str
    cmake_args: list[str]
    why: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # what the build needs besides CMAKE_ARGS
    links: dict[str, str] = field(default_factory=dict)  # symlinks to make first: path -> target
    missing: bool = False  # a forced backend whose toolkit is not installed: its build would fail


# -- CPU ------------------------------------------------------------------------------------------------------


def is_x86(m: Machine) -> bool:
    return m.arch.lower() in ("x86_64", "amd64", "i386", "i686")


def cpu_flags(m: Machine) -> set[str]:
    """The CPU's instruction-set flags in /proc/cpuinfo's spelling (macOS: from sysctl, renamed to match)."""
    text = m.read("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    if m.system == "Darwin":  # Intel Macs: sysctl spells them AVX2, AVX512F, AVX512VNNI ...
        out = m.run(["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"]) or ""
        names = {w.lower() for w in out.split()}
        renamed = {"sse4.2": "sse4_2", "avx1.0": "avx", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16"}
        return {renamed.get(n, n) for n in names}
    return set()


def cpu_args(m: Machine, portable: bool) -> tuple[list[str], list[str]]:
    """The CPU backend's CMake switches and why. x86: GGML_NATIVE off, every instruction set named (on or off)
    and AMX off; elsewhere -march=native is safe, so only --portable turns it off."""
    if not is_x86(m):
        if portable:
            return ["-DGGML_NATIVE=OFF"], [f"{m.arch}: portable build, GGML_NATIVE off (the architecture's baseline)"]
        return [], [f"{m.arch}: llama.cpp's native CPU build (no AMX outside x86)"]
    flags = cpu_flags(m)
    if portable:
        on = set(PORTABLE_X86)
        why = "portable x86-64-v3 baseline (AVX2, FMA, F16C, BMI2; no AVX-512, no AMX) for a bundle"
    elif not flags:
        on = set(PORTABLE_X86)
        why = "could not read this CPU's flags: the x86-64-v3 baseline (AVX2, FMA, F16C, BMI2)"
    else:
        on = {opt for opt, needs in X86_FEATURES if all(f in flags for f in needs)}
        if "GGML_AVX512" not in on:  # the AVX-512 extensions compile only with AVX512F's whole set
            on -= {"GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"}
        named = ", ".join(opt.removeprefix("GGML_") for opt, _ in X86_FEATURES if opt in on) or "none"
        why = f"this CPU's instruction sets, named one by one: {named}"
        if any(f.startswith("amx") for f in flags):
            why += "; the CPU has AMX, left off (llama.cpp's AMX kernels crash: ggml-org/llama.cpp#20824)"
        else:
            why += "; AMX off"
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{opt}={'ON' if opt in on else 'OFF'}" for opt, _ in X86_FEATURES]
    args += [f"-D{opt}=OFF" for opt in AMX_OFF]
    return args, [f"CPU: GGML_NATIVE off, {why}"]


# -- CUDA -----------------------------------------------------------------------------------------------------


def nvidia_compute_caps(m: Machine) -> list[str]:
    """The visible NVIDIA GPUs' compute capabilities as CMake spells them ('89'), from nvidia-smi, else NVML."""
    smi = m.which("nvidia-smi") or next(
        (p for p in ("/usr/lib/wsl/lib/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi") if m.exists(p)), None
    )
    caps: list[str] = []
    if smi:
        out = m.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"]) or ""
        caps = [line.strip().replace(".", "") for line in out.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())]
    if not caps:
        caps = m.nvml()
    return sorted(set(caps), key=lambda c: int(re.sub(r"\D", "", c) or 0))


def find_nvcc(m: Machine) -> str | None:
    if m.env.get("CUDACXX") and m.exists(m.env["CUDACXX"]):
        return m.env["CUDACXX"]
    found = m.which("nvcc")
    if found:
        return found
    roots = [m.env.get("CUDA_HOME", ""), m.env.get("CUDA_PATH", ""), *SEARCH_CUDA_ROOTS]
    return next((f"{r}/bin/nvcc" for r in roots if r and m.exists(f"{r}/bin/nvcc")), None)


def cuda_roots(m: Machine, nvcc: str) -> list[str]:
    """Where the toolkit may be: beside nvcc (through its symlinks), CUDA_HOME/CUDA_PATH, the usual places."""
    here = str(Path(os.path.realpath(nvcc)).parent.parent) if m.exists(nvcc) else str(Path(nvcc).parent.parent)
    roots = [here, m.env.get("CUDA_HOME", ""), m.env.get("CUDA_PATH", ""), *SEARCH_CUDA_ROOTS]
    return list(dict.fromkeys(r for r in roots if r))


def find_cublas(m: Machine, nvcc: str) -> tuple[str, str] | None:
    """cuBLAS for the build: ('', '') where the toolkit has it (CMake finds it there), (include dir, lib dir)
    for a pip-installed one (nvidia-cublas: nvidia/cu13/, nvidia-cublas-cu12: nvidia/cublas/), else None."""
    for root in cuda_roots(m, nvcc):
        if m.glob(f"{root}/include/cublas_v2.h") or m.glob(f"{root}/targets/*/include/cublas_v2.h"):
            return "", ""
    candidates = [m.env["CUBLAS_ROOT"]] if m.env.get("CUBLAS_ROOT") else []
    for site in m.site_dirs():
        candidates += sorted(m.glob(f"{site}/nvidia/cu[0-9]*"), reverse=True) + [f"{site}/nvidia/cublas"]
    for base in candidates:
        if m.exists(f"{base}/include/cublas_v2.h") and m.glob(f"{base}/lib/libcublas.so*"):
            return f"{base}/include", f"{base}/lib"
    return None


def find_libcuda(m: Machine, nvcc: str) -> tuple[str, bool] | None:
    """The driver library to link (ggml's CUDA VMM pool calls the driver API): (path, whether CMake finds it by
    itself), or None where no driver or stub is installed (a build machine without a GPU)."""
    for root in cuda_roots(m, nvcc):
        for stub in m.glob(f"{root}/lib64/stubs/libcuda.so") + m.glob(f"{root}/targets/*/lib/stubs/libcuda.so"):
            return stub, True
    cache = [line.split("=>") for line in (m.run(["ldconfig", "-p"]) or "").splitlines() if "=>" in line]
    known = {name.split()[0]: path.strip() for name, path in cache if name.strip()}
    if "libcuda.so" in known:
        return known["libcuda.so"], True
    versioned = [path for name, path in known.items() if name.startswith("libcuda.so.")]
    for d in NVIDIA_DRIVER_DIRS:
        versioned += sorted(m.glob(f"{d}/libcuda.so*"))
    return (versioned[0], False) if versioned else None


def cuda_decision(m: Machine, caps: list[str], nvcc: str, link_dir: Path) -> Decision:
    if m.env.get("CUDA_ARCHITECTURES"):
        archs, why = m.env["CUDA_ARCHITECTURES"], "from CUDA_ARCHITECTURES"
    elif caps:
        archs, why = ";".join(caps), "the visible GPU's compute capability only (a shorter build, a smaller library)"
    else:
        archs, why = DEFAULT_CUDA_ARCHS, "no GPU visible: llama.cpp's default list (CUDA_ARCHITECTURES overrides it)"
    d = Decision("cuda", ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"], [f"CUDA: nvcc at {nvcc}"])
    d.why.append(f"CUDA architectures {archs}: {why}")
    if not m.which("nvcc"):
        d.env["CUDACXX"] = nvcc  # CMake looks for nvcc on PATH only
    cublas = find_cublas(m, nvcc)
    if cublas is None:
        d.missing = True
        d.hints.append(HINT_CUBLAS)
    elif cublas[0]:
        include, lib = cublas
        d.env["CPATH"] = ":".join(p for p in (include, m.env.get("CPATH", "")) if p)
        for name in ("libcublas", "libcublasLt"):
            target = next(iter(sorted(m.glob(f"{lib}/{name}.so*"))), None)
            if target:
                d.links[str(link_dir / f"{name}.so")] = target
        d.why.append(f"cuBLAS from pip at {Path(include).parent} (headers on CPATH, libraries linked in {link_dir})")
    libcuda = find_libcuda(m, nvcc)
    if libcuda is None:
        # Without libcuda.so nothing can link the driver API: build without the VMM pool (a machine with no driver
        # runs no CUDA anyway, so this only matters for a wheel built here to check that it compiles).
        d.cmake_args.append("-DGGML_CUDA_NO_VMM=ON")
        d.why.append("no libcuda.so (no NVIDIA driver here): GGML_CUDA_NO_VMM=ON so the build links")
    elif not libcuda[1]:
        d.links[str(link_dir / "libcuda.so")] = libcuda[0]
    if any(str(link_dir) in p for p in d.links):
        d.env["CMAKE_LIBRARY_PATH"] = ":".join(p for p in (str(link_dir), m.env.get("CMAKE_LIBRARY_PATH", "")) if p)
    return d


# -- ROCm, Vulkan ---------------------------------------------------------------------------------------------


def drm_vendors(m: Machine) -> set[str]:
    """PCI vendor ids of the display devices under /sys/class/drm (0x1002 AMD, 0x8086 Intel, 0x10de NVIDIA)."""
    vendors = set()
    for path in m.glob("/sys/class/drm/card*/device/vendor"):
        text = (m.read(path) or "").strip().lower()
        if text:
            vendors.add(text)
    return vendors


def find_hipcc(m: Machine) -> str | None:
    rocm = m.env.get("ROCM_PATH") or "/opt/rocm"
    return m.which("hipcc") or (f"{rocm}/bin/hipcc" if m.exists(f"{rocm}/bin/hipcc") else None)


def rocm_targets(m: Machine, rocm: str) -> list[str]:
    """The AMD GPUs' gfx targets: amdgpu-arch prints one a line; rocminfo lists them among its agents."""
    tool = m.which("amdgpu-arch") or f"{rocm}/llvm/bin/amdgpu-arch"
    out = m.run([tool]) or ""
    targets = re.findall(r"^(gfx[0-9a-f]+)\s*$", out, re.M)
    if not targets:
        out = m.run([m.which("rocminfo") or f"{rocm}/bin/rocminfo"]) or ""
        targets = re.findall(r"Name:\s+(gfx[0-9a-f]+)\b", out)
    return sorted(set(targets))


def rocm_decision(m: Machine, hipcc: str, targets: list[str]) -> Decision:
    rocm = str(Path(os.path.realpath(hipcc)).parent.parent) if m.exists(hipcc) else str(Path(hipcc).parent.parent)
    d = Decision("rocm", ["-DGGML_HIP=ON"], [f"ROCm: hipcc at {hipcc}"])
    wanted = m.env.get("ROCM_TARGETS") or ";".join(targets)
    if wanted:
        d.cmake_args.append(f"-DGPU_TARGETS={wanted}")  # llama.cpp forwards GPU_TARGETS to CMAKE_HIP_ARCHITECTURES
        d.why.append(f"GPU targets {wanted}")
    else:
        d.why.append("no AMD GPU seen: hipcc builds its default targets (ROCM_TARGETS=gfx1100 picks one)")
    # llama.cpp's HIP build compiles with ROCm's clang; hipconfig knows where it is (distribution packages move it).
    hipconfig = m.which("hipconfig") or f"{rocm}/bin/hipconfig"
    clang_dir = (m.run([hipconfig, "-l"]) or "").strip() or f"{rocm}/llvm/bin"
    d.env["HIPCXX"] = f"{clang_dir}/clang"
    d.env["HIP_PATH"] = (m.run([hipconfig, "-R"]) or "").strip() or rocm
    return d


def vulkan_gpus(m: Machine) -> list[str]:
    """Vulkan devices that are GPUs (not llvmpipe): vulkaninfo --summary, else an AMD or Intel card in /sys."""
    out = m.run([m.which("vulkaninfo") or "vulkaninfo", "--summary"]) if m.which("vulkaninfo") else None
    if out:
        names = re.findall(r"deviceName\s*=\s*(.+)", out)
        types = re.findall(r"deviceType\s*=\s*(\S+)", out)
        return [n.strip() for n, t in zip(names, types) if "GPU" in t and "CPU" not in t]
    names = {"0x1002": "AMD GPU", "0x8086": "Intel GPU"}
    return [names[v] for v in sorted(drm_vendors(m)) if v in names]


def vulkan_headers(m: Machine) -> bool:
    sdk = m.env.get("VULKAN_SDK")
    return m.exists("/usr/include/vulkan/vulkan.h") or bool(sdk and m.exists(f"{sdk}/include/vulkan/vulkan.h"))


# -- the decision ---------------------------------------------------------------------------------------------


def decide(m: Machine, backend: str = "auto", portable: bool = False, link_dir: Path | None = None) -> Decision:
    """The backend and CMAKE_ARGS for llama-cpp-python on machine `m` (see the module's docstring)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")
    user = m.env.get("CMAKE_ARGS", "").strip()
    if user:
        return Decision("user", shlex.split(user), ["CMAKE_ARGS is set in the environment: used as given"])
    link_dir = link_dir or ROOT / "build" / "engine-links"
    d = _gpu_decision(m, backend, link_dir) if backend != "cpu" and not portable else None
    if d is None:
        d = Decision("cpu", [])
        if backend == "cpu":
            d.why.append("CPU: asked for (BACKEND=cpu)")
        elif portable:
            d.why.append("CPU: a portable build (--portable) uses no GPU toolkit")
        else:
            d.hints += _gpu_hints(m)
            d.why.append("CPU: no GPU with its toolkit installed" + (" (see below)" if d.hints else ""))
    if d.backend != "metal":
        args, why = cpu_args(m, portable)
        d.cmake_args += args
        d.why += why
    d.cmake_args = ALWAYS + d.cmake_args
    return d


def _gpu_decision(m: Machine, backend: str, link_dir: Path) -> Decision | None:
    """The GPU backend wanted (forced) or found (auto), or None for the CPU."""
    auto = backend == "auto"
    if backend in ("auto", "metal"):
        if m.system == "Darwin" and m.arch == "arm64":
            return Decision("metal", ["-DGGML_METAL=ON"], ["Metal: Apple Silicon"])
        if not auto:
            return Decision(
                "metal", ["-DGGML_METAL=ON"], ["Metal asked for, but this is not an Apple Silicon Mac"], missing=True
            )
    if backend in ("auto", "cuda"):
        caps = nvidia_compute_caps(m)
        nvcc = find_nvcc(m)
        if nvcc and (caps or not auto):
            d = cuda_decision(m, caps, nvcc, link_dir)
            if not (auto and d.missing):
                return d
        elif not auto:
            return Decision(
                "cuda", ["-DGGML_CUDA=ON"], ["CUDA asked for, but nvcc is not installed"], [HINT_CUDA], missing=True
            )
    if backend in ("auto", "rocm"):
        hipcc = find_hipcc(m)
        if hipcc:
            rocm = str(Path(hipcc).parent.parent)
            targets = rocm_targets(m, rocm)
            if targets or not auto:
                return rocm_decision(m, hipcc, targets)
        elif not auto:
            return Decision(
                "rocm", ["-DGGML_HIP=ON"], ["ROCm asked for, but hipcc is not installed"], [HINT_ROCM], missing=True
            )
    if backend in ("auto", "vulkan"):
        gpus = vulkan_gpus(m)
        ready = bool(m.which("glslc")) and vulkan_headers(m)
        if ready and (gpus or not auto):
            seen = ", ".join(gpus) or "none seen"
            return Decision("vulkan", ["-DGGML_VULKAN=ON"], [f"Vulkan: glslc and headers installed; GPUs: {seen}"])
        if not auto:
            return Decision(
                "vulkan",
                ["-DGGML_VULKAN=ON"],
                ["Vulkan asked for, but glslc or its headers are missing"],
                [HINT_VULKAN],
                missing=True,
            )
    return None


def _gpu_hints(m: Machine) -> list[str]:
    """What to install for the GPUs this machine has (auto fell back to the CPU)."""
    hints = []
    if nvidia_compute_caps(m):
        nvcc = find_nvcc(m)
        hints.append(HINT_CUBLAS if nvcc else HINT_CUDA)
    vendors = drm_vendors(m)
    if "0x1002" in vendors and not find_hipcc(m):
        hints.append(HINT_ROCM)
    if (vendors & {"0x1002", "0x8086"} or (m.which("vulkaninfo") and vulkan_gpus(m))) and not (
        m.which("glslc") and vulkan_headers(m)
    ):
        hints.append(HINT_VULKAN)
    return hints


# -- output ---------------------------------------------------------------------------------------------------


def explain(d: Decision) -> str:
    lines = [f"llama.cpp backend: {d.backend}"]
    lines += [f"  - {w}" for w in d.why]
    if d.missing:
        lines.append("  ! its toolkit is missing: the build would fail")
    lines += [f"  install: {h}" for h in d.hints]
    lines.append(f"  CMAKE_ARGS={shlex.join(d.cmake_args)}")
    lines += [f"  {k}={v}" for k, v in d.env.items()]
    return "\n".join(lines)


def env_lines(d: Decision) -> str:
    """`export` lines for sh: the build's CMAKE_ARGS, the backend's name, and what else it needs."""
    values = {"CMAKE_ARGS": shlex.join(d.cmake_args), "HEARTH_ENGINE_BACKEND": d.backend, **d.env}
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items())


def make_links(links: Mapping[str, str]) -> None:
    """Unversioned names (libcublas.so -> libcublas.so.13) where CMake's find_library looks, pointing at the
    versioned libraries pip and driver installs ship alone."""
    for link, target in links.items():
        path = Path(link)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            if os.path.realpath(path) == os.path.realpath(target):
                continue
            path.unlink()
        path.symlink_to(target)


def engine_version(root: Path = ROOT, installed_first: bool = True) -> str:
    """llama-cpp-python's version: the one this Python has installed (unless installed_first is False), else the
    floor pyproject.toml pins."""
    if installed_first:
        with contextlib.suppress(Exception):
            import importlib.metadata

            return importlib.metadata.version("llama-cpp-python")
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python\s*(?:>=|==|~=)\s*([0-9][^",;\s]*)', text)
    if not match:
        raise ValueError("pyproject.toml names no llama-cpp-python version")
    return match.group(1)


def wheel_key(d: Decision, version: str) -> str:
    """The name of the folder a wheel built with `d`'s flags is kept in: pip's own cache keys a built wheel by
    version alone, so a wheel made with other flags (no libmtmd, another GPU) would be taken for this one."""
    flags = hashlib.sha256(shlex.join(d.cmake_args).encode()).hexdigest()[:12]
    return f"{version}-{flags}"


def main(argv: list[str] | None = None, machine: Machine | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=BACKENDS, default="auto")
    ap.add_argument("--portable", action="store_true", help="x86-64-v3 baseline CPU build, no GPU (for bundles)")
    ap.add_argument(
        "--print",
        dest="what",
        default="explain",
        choices=("cmake-args", "backend", "explain", "env", "version", "pinned-version", "wheel-key"),
    )
    ap.add_argument("--link-dir", type=Path, default=ROOT / "build" / "engine-links")
    args = ap.parse_args(argv)
    if args.what in ("version", "pinned-version"):
        print(engine_version(installed_first=args.what == "version"))
        return 0
    d = decide(machine or Machine(), args.backend, args.portable, args.link_dir)
    if args.what == "explain":
        print(explain(d))
        return 0
    if d.missing:
        sys.stderr.write(explain(d) + "\n")
        return 2
    if args.what in ("env", "cmake-args"):
        make_links(d.links)
    if args.what == "env":
        sys.stderr.write(explain(d) + "\n")
        sys.stdout.write(env_lines(d))
    elif args.what == "cmake-args":
        print(shlex.join(d.cmake_args))
    elif args.what == "wheel-key":
        print(wheel_key(d, engine_version(installed_first=False)))
    else:
        print(d.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
