"""Make a trimmed llama-cpp-python source tarball that builds one GPU backend, small enough to travel.

    python scripts/trim_engine_sdist.py [--sdist FILE.tar.gz | --version VER] [--backend cuda] [--out build/engine-src]
    .venv/bin/python scripts/trim_engine_sdist.py --wheels build/gpu-wheels   # and the wheels gpu_check.sh needs

The sdist is over 76 MB (llama.cpp's vocab test models, docs, the web UI, a dozen backends), and a lent GPU machine
takes the repository plus at most 64 MiB. This keeps what builds libllama, the ggml CPU backend, the one GPU backend
asked for and the tools' CMake tree (llama-bench, with LLAMA_BUILD_SERVER=OFF since the web UI and server go), and
writes build/engine-src/llama_cpp_python-<version>.tar.gz (git-ignored), which pip builds like the original.

--wheels DIR downloads, for Python 3.12 on manylinux x86-64, the wheels of Hearth's run-time dependencies that the
GPU machine's image lacks or has too old (pinned to the versions this Python has installed), so that a
--system-site-packages venv there runs `hearth` with no network.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from engine_backend import engine_version  # noqa: E402

# Paths under the sdist's vendor/llama.cpp/ that no build of the library, the CPU backend or llama-bench reads
# (tests, examples and the server are switched off in the builds that use this tarball).
DROP_LLAMA = {
    "models",  # vocab GGUFs for llama.cpp's own tests: most of the size
    "docs",
    "media",
    "tests",
    "examples",
    "pocs",
    "benches",
    "gguf-py",
    "conversion",
    "scripts",
    "ci",
    "skills",
    "requirements",
    "tools/ui",  # the server's web UI (built only with LLAMA_BUILD_SERVER)
    "tools/server",
    ".git",
    ".github",
    ".devops",
}
# ggml backends kept whatever is asked for: the CPU one, and the small ones the ggml tree always configures.
KEEP_GGML = {"ggml-cpu", "ggml-blas", "ggml-rpc"}
# The folders each backend builds from (HIP compiles the CUDA sources).
BACKEND_GGML = {
    "cpu": set(),
    "cuda": {"ggml-cuda"},
    "rocm": {"ggml-hip", "ggml-cuda"},
    "vulkan": {"ggml-vulkan"},
    "metal": {"ggml-metal"},
}
# llama-cpp-python's own folders that the wheel does not need.
DROP_TOP = {".git", "docs", "tests", "examples", "docker", ".github"}  # .git: the submodule's whole history

# Hearth's run-time dependencies that the GPU machine's image (KINDS.md: a PyTorch image, Python 3.12) lacks or
# has older than pyproject.toml asks; `hearth` there runs from a --system-site-packages venv with these added.
GPU_MACHINE_WHEELS = [
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "fastapi",
    "starlette",
    "uvicorn",
    "platformdirs",
    "gguf",
    "diskcache",
    "huggingface-hub",
    "nvidia-ml-py",
    # and what those need at the versions pinned here (huggingface-hub 2 moved to httpx2; fastapi imports
    # opentelemetry), carried too so that no older copy in the image is picked up
    "httpx2",
    "httpcore2",
    "truststore",
    "opentelemetry-api",
    "click",
    "annotated-doc",
    "anyio",
    "idna",
    "h11",
]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def kept(path: str, backend: str = "cuda") -> bool:
    """Whether a member of the sdist (its path below the top folder, e.g. vendor/llama.cpp/models/x.gguf) stays."""
    parts = PurePosixPath(path).parts
    if not parts:
        return True
    if parts[0] in DROP_TOP:
        return False
    if parts[:2] != ("vendor", "llama.cpp"):
        return True
    rest = "/".join(parts[2:])
    if any(rest == d or rest.startswith(d + "/") for d in DROP_LLAMA):
        return False
    if len(parts) == 3 and parts[2].startswith("convert_") and parts[2].endswith(".py"):
        return False  # the model conversion scripts at llama.cpp's root
    if parts[2:4] == ("ggml", "src") and len(parts) > 5:  # a file inside ggml/src/<folder>/
        folder = parts[4]
        if folder.startswith("ggml-"):
            return folder in KEEP_GGML | BACKEND_GGML[backend]
    return True


def trim(sdist: Path, out_dir: Path, backend: str = "cuda") -> Path:
    """Write the trimmed tarball into out_dir (same top folder and name as the sdist); returns its path."""
    if backend not in BACKEND_GGML:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKEND_GGML)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = sdist.name.removesuffix(".tar.gz")
    out = out_dir / f"{name}.tar.gz"
    tmp = out.with_suffix(".part")
    with tarfile.open(sdist, "r:gz") as src, tarfile.open(tmp, "w:gz", compresslevel=9) as dst:
        for member in src:
            rest = member.name.partition("/")[2]
            if rest and not kept(rest, backend):
                continue
            data = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, data)
    tmp.replace(out)
    return out


def pip_download(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *args], check=True)


def download_sdist(version: str, dest: Path, pip: Callable[[list[str]], None] = pip_download) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    found = dest / f"llama_cpp_python-{version}.tar.gz"
    if not found.is_file():
        pip(["--no-binary", ":all:", "-d", str(dest), f"llama-cpp-python=={version}"])
    return found


def wheel_args(dest: Path, versions: dict[str, str]) -> list[str]:
    """pip download's arguments for the GPU machine's wheels: CPython 3.12, manylinux x86-64, binary only."""
    args = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args + [f"{name}=={versions[name]}" if name in versions else name for name in GPU_MACHINE_WHEELS]


def installed_versions() -> dict[str, str]:
    out = {}
    for name in GPU_MACHINE_WHEELS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sdist", type=Path, help="the llama-cpp-python sdist (default: pip download it)")
    ap.add_argument("--version", help="llama-cpp-python's version (default: installed, else pyproject.toml's)")
    ap.add_argument("--backend", choices=sorted(BACKEND_GGML), default="cuda")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "engine-src")
    ap.add_argument("--wheels", type=Path, metavar="DIR", help="also download the GPU machine's wheels into DIR")
    args = ap.parse_args(argv)
    sdist = args.sdist or download_sdist(args.version or engine_version(), ROOT / "build" / "engine-download")
    out = trim(sdist, args.out, args.backend)
    before, after = sdist.stat().st_size, out.stat().st_size
    print(f"{out}: {after / 2**20:.1f} MiB (from {before / 2**20:.1f} MiB)")
    if args.wheels:
        pip_download(wheel_args(args.wheels, installed_versions()))
        total = sum(p.stat().st_size for p in args.wheels.glob("*.whl"))
        print(f"{args.wheels}: {len(list(args.wheels.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
