#!/usr/bin/env bash
# Build llama-server, llama-bench and llama-mtmd-cli (bench/vision.py's peer) from the llama.cpp sources vendored in the llama-cpp-python sdist
# of the installed version (CPU, Release), cached outside the repo. Prints the bin folder.
#   bash bench/build_peers.sh [PYTHON]
set -euo pipefail
PY=${1:-.venv/bin/python}
VER=$($PY -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
CACHE=${HEARTH_BENCH_CACHE:-$HOME/.cache/hearth-bench}
SRC=$CACHE/llama-cpp-python-$VER
BUILD=$SRC/build-peers
if [ -x "$BUILD/bin/llama-server" ] && [ -x "$BUILD/bin/llama-bench" ] && [ -x "$BUILD/bin/llama-mtmd-cli" ]; then
  echo "$BUILD/bin"; exit 0
fi
mkdir -p "$CACHE"
if [ ! -d "$SRC/vendor/llama.cpp" ]; then
  tmp=$(mktemp -d)
  $PY -m pip download --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VER" >&2
  tar -xzf "$tmp"/llama_cpp_python-"$VER".tar.gz -C "$CACHE"
  mv "$CACHE/llama_cpp_python-$VER" "$SRC" 2>/dev/null || true
  rm -rf "$tmp"
fi
# The peers get the CPU flags Hearth's own engine is built with (engine_backend.py: this CPU's instruction sets,
# AMX off, since llama.cpp's AMX kernels crash on some Xeons), so a ratio compares engines, not builds.
# shellcheck disable=SC2046
cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  $($PY "$(dirname "$0")/../scripts/engine_backend.py" --backend cpu --print cmake-args) \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_CURL=OFF >&2
cmake --build "$BUILD" -j"$(nproc)" --target llama-server llama-bench llama-mtmd-cli >&2
echo "$BUILD/bin"
