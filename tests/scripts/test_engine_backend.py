"""scripts/engine_backend.py's decision table, on fake machines: which llama.cpp backend and which CMAKE_ARGS."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "engine_backend.py"


def load_script():
    spec = importlib.util.spec_from_file_location("engine_backend", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_backend"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


eb = load_script()

# /proc/cpuinfo flag lines: a Sapphire Rapids Xeon (AVX-512 and AMX), a Haswell, and this project's 2-core VM.
XEON_AMX = (
    "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi1 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl "
    "avx512vbmi avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8"
)
HASWELL = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi1 bmi2"


def machine(
    *,
    system="Linux",
    arch="x86_64",
    flags=HASWELL,
    tools=(),
    outputs=None,
    files=None,
    env=None,
    nvml=(),
    site=(),
):
    """A fake machine: `tools` on PATH, `outputs` what a command prints (keyed by its first two words, the
    program's base name first), `files` what exists (path -> text)."""
    files = {"/proc/cpuinfo": f"processor\t: 0\nflags\t\t: {flags}\n", **(files or {})}
    outputs = outputs or {}

    def run(cmd):
        key = " ".join([Path(cmd[0]).name, *cmd[1:2]])
        return outputs.get(key, outputs.get(Path(cmd[0]).name))

    def glob(pattern):
        import fnmatch

        return sorted(p for p in files if fnmatch.fnmatch(p, pattern))

    return eb.Machine(
        system=system,
        arch=arch,
        env=dict(env or {}),
        which=lambda name: f"/usr/bin/{name}" if name in tools else None,
        run=run,
        read=files.get,
        exists=lambda p: p in files,
        glob=glob,
        nvml=lambda: list(nvml),
        site_dirs=lambda: list(site),
    )


def arg(d, name):
    """The value of -D<name>=... in the decision's CMAKE_ARGS (None when absent)."""
    values = [a.split("=", 1)[1] for a in d.cmake_args if a.startswith(f"-D{name}=")]
    assert len(values) <= 1, f"{name} given twice: {d.cmake_args}"
    return values[0] if values else None


SMI_H100 = {"nvidia-smi --query-gpu=compute_cap": "9.0\n"}
CUBLAS_IN_TOOLKIT = {"/usr/local/cuda/include/cublas_v2.h": ""}
LIBCUDA = {"ldconfig -p": "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n"}


def test_apple_silicon_builds_metal_and_leaves_the_cpu_flags_alone():
    d = eb.decide(machine(system="Darwin", arch="arm64", flags=""))
    assert d.backend == "metal"
    assert arg(d, "GGML_METAL") == "ON" and arg(d, "GGML_NATIVE") is None and arg(d, "GGML_AMX_TILE") is None
    assert d.cmake_args[0] == "-DLLAVA_BUILD=ON"  # libmtmd: images for vision models


def test_the_wheel_key_changes_with_the_flags_and_the_version():
    cpu = eb.decide(machine(flags=XEON_AMX))
    metal = eb.decide(machine(system="Darwin", arch="arm64", flags=""))
    key = eb.wheel_key(cpu, "0.3.36")
    assert key.startswith("0.3.36-") and key == eb.wheel_key(eb.decide(machine(flags=XEON_AMX)), "0.3.36")
    assert key != eb.wheel_key(metal, "0.3.36") and key != eb.wheel_key(cpu, "0.3.37")
    no_mtmd = eb.Decision("cpu", [a.replace("LLAVA_BUILD=ON", "LLAVA_BUILD=OFF") for a in cpu.cmake_args])
    assert eb.wheel_key(no_mtmd, "0.3.36") != key  # a wheel without libmtmd never passes for one with it


def test_a_visible_nvidia_gpu_with_nvcc_builds_cuda_for_that_gpu_only():
    m = machine(tools=("nvidia-smi", "nvcc"), outputs={**SMI_H100, **LIBCUDA}, files=CUBLAS_IN_TOOLKIT)
    d = eb.decide(m)
    assert d.backend == "cuda" and not d.missing
    assert arg(d, "GGML_CUDA") == "ON" and arg(d, "CMAKE_CUDA_ARCHITECTURES") == "90"
    assert arg(d, "GGML_CUDA_NO_VMM") is None  # the driver is there: the VMM pool stays
    # The CPU part of a CUDA build is not native either (layers left on the CPU run there).
    assert arg(d, "GGML_NATIVE") == "OFF" and arg(d, "GGML_AMX_INT8") == "OFF"
    assert d.env == {} and d.links == {}


def test_two_different_gpus_give_both_architectures_in_order():
    m = machine(
        tools=("nvidia-smi", "nvcc"),
        outputs={"nvidia-smi --query-gpu=compute_cap": "8.9\n7.5\n8.9\n", **LIBCUDA},
        files=CUBLAS_IN_TOOLKIT,
    )
    assert arg(eb.decide(m), "CMAKE_CUDA_ARCHITECTURES") == "75;89"


def test_nvml_finds_the_gpu_when_nvidia_smi_is_not_on_path():
    m = machine(tools=("nvcc",), outputs=LIBCUDA, files=CUBLAS_IN_TOOLKIT, nvml=["86"])
    d = eb.decide(m)
    assert d.backend == "cuda" and arg(d, "CMAKE_CUDA_ARCHITECTURES") == "86"


def test_an_nvidia_gpu_without_nvcc_builds_for_the_cpu_and_names_the_package():
    d = eb.decide(machine(tools=("nvidia-smi",), outputs=SMI_H100))
    assert d.backend == "cpu" and arg(d, "GGML_CUDA") is None
    assert any("nvidia-cuda-toolkit" in h for h in d.hints)
    assert "nvidia-cuda-toolkit" in eb.explain(d)


def test_nvcc_without_cublas_falls_back_to_the_cpu_naming_cublas():
    d = eb.decide(machine(tools=("nvidia-smi", "nvcc"), outputs={**SMI_H100, **LIBCUDA}))
    assert d.backend == "cpu"
    assert any("cuBLAS" in h and "nvidia-cublas" in h for h in d.hints)


def test_a_pip_installed_cublas_is_put_where_the_build_finds_it(tmp_path):
    site = "/venv/lib/python3.12/site-packages"
    files = {
        f"{site}/nvidia/cu13": "",
        f"{site}/nvidia/cu13/include/cublas_v2.h": "",
        f"{site}/nvidia/cu13/lib/libcublas.so.13": "",
        f"{site}/nvidia/cu13/lib/libcublasLt.so.13": "",
        "/usr/local/nvidia/lib64/libcuda.so.1": "",  # the driver, versioned only (a container's mount)
    }
    m = machine(tools=("nvidia-smi", "nvcc"), outputs=SMI_H100, files=files, site=[site])
    d = eb.decide(m, link_dir=tmp_path / "links")
    assert d.backend == "cuda"
    assert d.env["CPATH"] == f"{site}/nvidia/cu13/include"
    assert d.env["CMAKE_LIBRARY_PATH"] == str(tmp_path / "links")
    assert d.links == {
        str(tmp_path / "links" / "libcublas.so"): f"{site}/nvidia/cu13/lib/libcublas.so.13",
        str(tmp_path / "links" / "libcublasLt.so"): f"{site}/nvidia/cu13/lib/libcublasLt.so.13",
        str(tmp_path / "links" / "libcuda.so"): "/usr/local/nvidia/lib64/libcuda.so.1",
    }
    target = tmp_path / "libcublas.so.13"
    target.write_text("x")
    eb.make_links({str(tmp_path / "links" / "libcublas.so"): str(target)})
    eb.make_links({str(tmp_path / "links" / "libcublas.so"): str(target)})  # again: already there, kept
    assert (tmp_path / "links" / "libcublas.so").resolve() == target


def test_cuda_forced_without_a_gpu_uses_the_default_list_or_the_override():
    m = machine(tools=("nvcc",), outputs=LIBCUDA, files=CUBLAS_IN_TOOLKIT)
    d = eb.decide(m, "cuda")
    assert d.backend == "cuda" and arg(d, "CMAKE_CUDA_ARCHITECTURES") == eb.DEFAULT_CUDA_ARCHS
    m = machine(tools=("nvcc",), outputs=LIBCUDA, files=CUBLAS_IN_TOOLKIT, env={"CUDA_ARCHITECTURES": "90"})
    assert arg(eb.decide(m, "cuda"), "CMAKE_CUDA_ARCHITECTURES") == "90"
    # No driver at all (a build machine): nothing provides libcuda.so, so the VMM pool is left out to link.
    d = eb.decide(machine(tools=("nvcc",), files=CUBLAS_IN_TOOLKIT), "cuda")
    assert arg(d, "GGML_CUDA_NO_VMM") == "ON"


def test_cuda_forced_without_nvcc_is_refused_with_the_package(capsys):
    m = machine(tools=("nvidia-smi",), outputs=SMI_H100)
    d = eb.decide(m, "cuda")
    assert d.missing and any("nvidia-cuda-toolkit" in h for h in d.hints)
    assert eb.main(["--backend", "cuda", "--print", "cmake-args"], machine=m) == 2
    assert "nvidia-cuda-toolkit" in capsys.readouterr().err


def test_an_amd_card_with_glslc_builds_vulkan():
    files = {"/sys/class/drm/card0/device/vendor": "0x1002\n", "/usr/include/vulkan/vulkan.h": ""}
    d = eb.decide(machine(tools=("glslc",), files=files))
    assert d.backend == "vulkan" and arg(d, "GGML_VULKAN") == "ON"
    assert arg(d, "GGML_NATIVE") == "OFF"


def test_vulkaninfo_sees_only_llvmpipe_so_the_cpu_is_built():
    summary = "deviceName = llvmpipe (LLVM 15.0.6, 256 bits)\ndeviceType = PHYSICAL_DEVICE_TYPE_CPU\n"
    m = machine(
        tools=("glslc", "vulkaninfo"),
        outputs={"vulkaninfo --summary": summary},
        files={"/usr/include/vulkan/vulkan.h": ""},
    )
    assert eb.decide(m).backend == "cpu"


def test_an_amd_card_without_glslc_builds_for_the_cpu_and_names_glslc():
    d = eb.decide(machine(files={"/sys/class/drm/card1/device/vendor": "0x1002\n"}))
    assert d.backend == "cpu"
    hints = " ".join(d.hints)
    assert "glslc" in hints and "libvulkan-dev" in hints and "hipcc" in hints


def test_hipcc_with_an_amd_gpu_builds_rocm_for_its_targets():
    m = machine(tools=("hipcc", "amdgpu-arch", "glslc"), outputs={"amdgpu-arch": "gfx1100\ngfx1100\n"})
    d = eb.decide(m)
    assert d.backend == "rocm"
    assert arg(d, "GGML_HIP") == "ON" and arg(d, "GPU_TARGETS") == "gfx1100"
    assert d.env["HIPCXX"].endswith("/llvm/bin/clang")


def test_rocminfo_names_the_targets_when_amdgpu_arch_is_missing():
    rocminfo = "Agent 1\n  Name:                    AMD EPYC\nAgent 2\n  Name:                    gfx90a\n"
    d = eb.decide(machine(tools=("hipcc", "rocminfo"), outputs={"rocminfo": rocminfo}))
    assert d.backend == "rocm" and arg(d, "GPU_TARGETS") == "gfx90a"


def test_avx512_and_amx_cpu_gets_explicit_flags_with_amx_off():
    d = eb.decide(machine(flags=XEON_AMX))
    assert d.backend == "cpu"
    assert arg(d, "GGML_NATIVE") == "OFF"
    for on in ("AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"):
        assert arg(d, f"GGML_{on}") == "ON", on
    for off in ("AMX_TILE", "AMX_INT8", "AMX_BF16"):
        assert arg(d, f"GGML_{off}") == "OFF"
    assert "20824" in eb.explain(d)  # says why AMX is off


def test_a_haswell_gets_no_avx512():
    d = eb.decide(machine(flags=HASWELL))
    assert arg(d, "GGML_AVX2") == "ON" and arg(d, "GGML_AVX512") == "OFF" and arg(d, "GGML_AVX_VNNI") == "OFF"


def test_avx512_extensions_are_off_without_the_whole_avx512_base():
    # avx512f and vnni but no avx512bw (Knights Landing-like): GGML_AVX512 needs all five, so VNNI cannot build.
    d = eb.decide(machine(flags="avx avx2 fma f16c bmi2 avx512f avx512cd avx512_vnni"))
    assert arg(d, "GGML_AVX512") == "OFF" and arg(d, "GGML_AVX512_VNNI") == "OFF"


def test_portable_is_the_x86_64_v3_baseline_without_avx512_even_on_a_xeon():
    gpu = machine(
        flags=XEON_AMX, tools=("nvidia-smi", "nvcc"), outputs={**SMI_H100, **LIBCUDA}, files=CUBLAS_IN_TOOLKIT
    )
    d = eb.decide(gpu, portable=True)
    assert d.backend == "cpu"  # a bundle ships no GPU toolkit's build
    on = {a.split("=")[0][2:] for a in d.cmake_args if a.endswith("=ON") and a.startswith("-DGGML_")}
    assert on == {"GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}
    assert arg(d, "GGML_NATIVE") == "OFF" and arg(d, "GGML_AVX512") == "OFF" and arg(d, "GGML_AMX_TILE") == "OFF"


def test_unreadable_cpu_flags_fall_back_to_the_baseline():
    m = machine()
    m.read = lambda path: None
    assert arg(eb.decide(m), "GGML_AVX512") == "OFF" and arg(eb.decide(m), "GGML_AVX2") == "ON"


def test_arm_linux_keeps_the_native_build_unless_portable():
    m = machine(arch="aarch64", flags="fp asimd")
    assert arg(eb.decide(m), "GGML_NATIVE") is None
    assert arg(eb.decide(m, portable=True), "GGML_NATIVE") == "OFF"


def test_the_users_cmake_args_win():
    m = machine(
        flags=XEON_AMX,
        tools=("nvidia-smi", "nvcc"),
        outputs=SMI_H100,
        files=CUBLAS_IN_TOOLKIT,
        env={"CMAKE_ARGS": "-DGGML_CUDA=on -DGGML_NATIVE=ON"},
    )
    d = eb.decide(m)
    assert d.backend == "user" and d.cmake_args == ["-DGGML_CUDA=on", "-DGGML_NATIVE=ON"]
    assert "export CMAKE_ARGS='-DGGML_CUDA=on -DGGML_NATIVE=ON'" in eb.env_lines(d)


def test_env_lines_evaluate_in_sh_to_the_decision():
    d = eb.decide(machine(flags=XEON_AMX))
    out = subprocess.run(
        ["sh", "-c", eb.env_lines(d) + 'printf "%s\\n%s" "$HEARTH_ENGINE_BACKEND" "$CMAKE_ARGS"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "cpu" and shlex.split(out[1]) == d.cmake_args


def test_the_option_names_are_what_the_vendored_llama_cpp_reads():
    """LLAVA_BUILD is llama-cpp-python's option and the GGML_* ones llama.cpp's; a rename upstream would make
    CMake ignore them silently. Checked against the installed version's build files where the sdist is at hand
    (bench/build_peers.sh's cache), else against the names this script was written for."""
    names = {a.split("=")[0][2:] for a in eb.decide(machine(flags=XEON_AMX)).cmake_args}
    assert {"LLAVA_BUILD", "GGML_NATIVE", "GGML_AVX512", "GGML_AMX_TILE"} <= names
    text = _vendored_cmake_text()
    if text is None:
        pytest.skip("no llama-cpp-python source at hand (bench/build_peers.sh's cache or trim_engine_sdist.py's)")
    for name in names | {"GGML_CUDA", "GGML_CUDA_NO_VMM", "GGML_HIP", "GGML_VULKAN", "GGML_METAL"}:
        assert f"option({name} " in text, name


def _vendored_cmake_text() -> str | None:
    """llama-cpp-python's and ggml's CMakeLists.txt, from an unpacked sdist or the trimmed tarball."""
    import tarfile

    files = ("CMakeLists.txt", "vendor/llama.cpp/ggml/CMakeLists.txt")
    for tree in sorted((Path.home() / ".cache" / "hearth-bench").glob("llama-cpp-python-*")):
        if all((tree / f).is_file() for f in files):
            return "".join((tree / f).read_text() for f in files)
    for tarball in sorted((ROOT / "build" / "engine-src").glob("llama_cpp_python-*.tar.gz")):
        with tarfile.open(tarball) as tar:
            top = tarball.name.removesuffix(".tar.gz")
            return "".join(tar.extractfile(f"{top}/{f}").read().decode() for f in files)
    return None


def test_the_script_runs_as_a_program():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "cpu", "--print", "backend"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "cpu"
    version = subprocess.run([sys.executable, str(SCRIPT), "--print", "version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip()[0].isdigit()


def test_the_pinned_version_is_pyprojects_floor(tmp_path):
    (tmp_path / "pyproject.toml").write_text('dependencies = [\n    "numpy>=1",\n    "llama-cpp-python>=0.3.36",\n]\n')
    assert eb.engine_version(tmp_path, installed_first=False) == "0.3.36"
    (tmp_path / "pyproject.toml").write_text('dependencies = ["numpy>=1"]\n')
    with pytest.raises(ValueError):
        eb.engine_version(tmp_path, installed_first=False)
