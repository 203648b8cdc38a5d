"""installers/bundle_check.py's emulated-CPU steps: the qemu command line, SIGILL read as a non-portable bundle,
and a missing qemu skipped with the package to install. (The whole check runs in `make bundle-check`.)"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.installers.helpers import load

check = load("bundle_check.py")


def test_the_bundle_runs_under_qemu_on_a_haswell_without_the_bootloaders_restart(tmp_path):
    exe = tmp_path / "hearth" / "hearth"
    cmd = check.qemu_command("/usr/bin/qemu-x86_64", exe, ["run", "m.gguf", "hi"])
    assert cmd[:3] == ["/usr/bin/qemu-x86_64", "-cpu", "Haswell"]
    assert cmd[-4:] == [str(exe), "run", "m.gguf", "hi"]
    # The guest starts as the bootloader's restarted self (an exec would leave qemu and run natively).
    guest_env = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "-E")
    assert guest_env == {
        "_PYI_ARCHIVE_FILE": str(exe),
        "_PYI_PARENT_PROCESS_LEVEL": "-1",
        "LD_LIBRARY_PATH": str(tmp_path / "hearth" / "_internal"),
    }


def fake_runner(returncode: int, stdout: str = "", stderr: str = ""):
    calls = []

    def runner(cmd, **kwargs):
        calls.append((cmd, kwargs))
        return SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)

    return runner, calls


def test_sigill_under_emulation_is_a_failure_that_names_the_cause():
    runner, calls = fake_runner(-signal.SIGILL)
    with pytest.raises(check.CheckFailed, match=r"SIGILL.*AVX-512"):
        check.run_emulated("/q", Path("/b/hearth"), ["--version"], {"A": "1"}, runner)
    cmd, kwargs = calls[0]
    assert cmd[:3] == ["/q", "-cpu", "Haswell"] and kwargs["env"] == {"A": "1"}
    assert kwargs["timeout"] >= 300  # emulation is slow


def test_a_clean_emulated_run_returns_its_output_and_other_failures_say_so():
    runner, _ = fake_runner(0, stdout="hearth 0.1.0\n")
    assert check.run_emulated("/q", Path("/b/hearth"), ["--version"], {}, runner) == "hearth 0.1.0\n"
    runner, _ = fake_runner(3, stderr="boom")
    with pytest.raises(check.CheckFailed, match="exited 3: boom"):
        check.run_emulated("/q", Path("/b/hearth"), ["--version"], {}, runner)


def test_without_qemu_every_emulated_step_is_skipped_naming_the_package():
    steps = check.qemu_steps(Path("/b/hearth"), {}, Path("/m/model.gguf"), which=lambda name: None)
    assert [name for name, _ in steps] == [
        "qemu Haswell: --version",
        "qemu Haswell: hw --json",
        "qemu Haswell: run model.gguf hi",
    ]
    for _, step in steps:
        with pytest.raises(check.Skipped, match="apt install qemu-user"):
            step()


AVX512 = r"""
#include <immintrin.h>
#include <stdio.h>
__attribute__((noinline)) void twice(float *o, float x) {
    __m512 a = _mm512_set1_ps(x);
    _mm512_storeu_ps(o, _mm512_add_ps(a, a));
}
int main(int argc, char **argv) { float o[16]; twice(o, (float)argc); printf("%g\n", o[0]); return 0; }
"""
AVX2 = AVX512.replace("__m512", "__m256").replace("_mm512_", "_mm256_").replace("o[16]", "o[8]")


@pytest.mark.skipif(not (shutil.which("qemu-x86_64") and shutil.which("gcc")), reason="needs qemu-user and gcc")
def test_a_real_avx512_instruction_is_caught_and_avx2_is_not(tmp_path):
    """The premise of the check, on real programs: the emulated Haswell runs AVX2 and traps AVX-512."""
    built = {}
    for name, source, flag in (("avx512", AVX512, "-mavx512f"), ("avx2", AVX2, "-mavx2")):
        (tmp_path / f"{name}.c").write_text(source)
        out = subprocess.run(["gcc", "-O1", flag, str(tmp_path / f"{name}.c"), "-o", str(tmp_path / name)])
        if out.returncode != 0:
            pytest.skip(f"gcc cannot build {name} here")
        built[name] = tmp_path / name
    qemu = shutil.which("qemu-x86_64")
    assert check.run_emulated(qemu, built["avx2"], [], {}).strip() == "2"
    with pytest.raises(check.CheckFailed, match="SIGILL"):
        check.run_emulated(qemu, built["avx512"], [], {})


BUNDLED_LIBS = check.ROOT / "dist" / "hearth" / "_internal" / "llama_cpp" / "lib"


@pytest.mark.skipif(not BUNDLED_LIBS.is_dir() or not shutil.which("objdump"), reason="no bundle built (make bundle)")
def test_the_bundled_llama_cpp_has_no_avx512_or_amx_instructions():
    """`make bundle` builds llama.cpp --portable: no zmm register (AVX-512) and no tile instruction (AMX) in any
    bundled library, whatever CPU built it."""
    libs = [p for p in BUNDLED_LIBS.glob("lib*.so") if not p.is_symlink()]
    assert any(p.name.startswith("libggml-cpu") for p in libs) or any(p.name == "libggml.so" for p in libs)
    for lib in libs:
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True).stdout
        assert "%zmm" not in asm, f"{lib.name} uses AVX-512"
        assert "tileloadd" not in asm and "tdpbssd" not in asm, f"{lib.name} uses AMX"
