"""scripts/trim_engine_sdist.py on a small fake sdist: what the CUDA build needs stays, the bulk goes."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("trim_engine_sdist", ROOT / "scripts" / "trim_engine_sdist.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["trim_engine_sdist"] = module
    spec.loader.exec_module(module)
    return module


trim = load_script()

TOP = "llama_cpp_python-9.9.9"
KEPT = [
    "pyproject.toml",
    "CMakeLists.txt",
    "PKG-INFO",
    "llama_cpp/__init__.py",
    "llama_cpp/llama_cpp.py",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/include/llama.h",
    "vendor/llama.cpp/src/llama.cpp",
    "vendor/llama.cpp/common/common.cpp",
    "vendor/llama.cpp/cmake/build-info.cmake",
    "vendor/llama.cpp/ggml/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml.c",
    "vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c",
    "vendor/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/template-instances/fattn-vec-f16.cu",
    "vendor/llama.cpp/ggml/src/ggml-blas/CMakeLists.txt",
    "vendor/llama.cpp/tools/CMakeLists.txt",
    "vendor/llama.cpp/tools/llama-bench/llama-bench.cpp",
    "vendor/llama.cpp/tools/mtmd/CMakeLists.txt",
    "vendor/llama.cpp/vendor/nlohmann/json.hpp",
]
DROPPED = [
    ".git/modules/vendor/llama.cpp/objects/pack/pack-1.pack",
    "docs/index.md",
    "tests/test_llama.py",
    "examples/high_level_api/x.py",
    "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf",
    "vendor/llama.cpp/docs/build.md",
    "vendor/llama.cpp/media/llama.png",
    "vendor/llama.cpp/tests/test-backend-ops.cpp",
    "vendor/llama.cpp/examples/simple/simple.cpp",
    "vendor/llama.cpp/tools/ui/index.html",
    "vendor/llama.cpp/tools/server/server.cpp",
    "vendor/llama.cpp/convert_hf_to_gguf.py",
    "vendor/llama.cpp/gguf-py/gguf/gguf.py",
    "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
    "vendor/llama.cpp/ggml/src/ggml-sycl/ggml-sycl.cpp",
    "vendor/llama.cpp/ggml/src/ggml-metal/ggml-metal.m",
    "vendor/llama.cpp/ggml/src/ggml-opencl/kernels/a.cl",
]


def fake_sdist(tmp_path: Path) -> Path:
    path = tmp_path / f"{TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in KEPT + DROPPED:
            data = f"contents of {name}\n".encode() * (1000 if name in DROPPED else 1)
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_the_cuda_tarball_keeps_what_builds_and_drops_the_bulk(tmp_path):
    sdist = fake_sdist(tmp_path)
    out = trim.trim(sdist, tmp_path / "out", "cuda")
    assert out == tmp_path / "out" / f"{TOP}.tar.gz"
    got = members(out)
    assert set(got) == {f"{TOP}/{name}" for name in KEPT}
    assert got[f"{TOP}/llama_cpp/llama_cpp.py"] == b"contents of llama_cpp/llama_cpp.py\n"  # bytes unchanged
    assert out.stat().st_size < sdist.stat().st_size / 2


def test_each_backend_keeps_its_own_ggml_folder():
    cuda_file = "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu"
    vulkan_file = "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
    assert trim.kept(cuda_file, "cuda") and not trim.kept(vulkan_file, "cuda")
    assert trim.kept(vulkan_file, "vulkan") and not trim.kept(cuda_file, "vulkan")
    assert trim.kept(cuda_file, "rocm") and trim.kept("vendor/llama.cpp/ggml/src/ggml-hip/CMakeLists.txt", "rocm")
    # Files directly in ggml/src (not a backend folder) always stay.
    assert trim.kept("vendor/llama.cpp/ggml/src/ggml-backend.cpp", "cpu")


def test_the_trimmed_tarball_is_what_pip_would_build(tmp_path):
    """Same top folder, pyproject and CMake entry points: pip builds it like the sdist it came from."""
    out = trim.trim(fake_sdist(tmp_path), tmp_path / "out")
    with tarfile.open(out) as tar:
        tops = {m.name.split("/")[0] for m in tar}
    assert tops == {TOP}


def test_the_sdist_is_downloaded_once(tmp_path):
    calls = []

    def pip(args):
        calls.append(args)
        (tmp_path / "llama_cpp_python-1.2.3.tar.gz").write_bytes(b"x")

    assert trim.download_sdist("1.2.3", tmp_path, pip) == tmp_path / "llama_cpp_python-1.2.3.tar.gz"
    trim.download_sdist("1.2.3", tmp_path, pip)
    assert calls == [["--no-binary", ":all:", "-d", str(tmp_path), "llama-cpp-python==1.2.3"]]


def test_the_gpu_machines_wheels_are_pinned_cp312_manylinux(tmp_path):
    args = trim.wheel_args(tmp_path, {"pydantic": "2.11.0", "fastapi": "0.120.0"})
    assert args[args.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in args
    assert "pydantic==2.11.0" in args and "fastapi==0.120.0" in args and "gguf" in args
    assert "manylinux_2_17_x86_64" in args
