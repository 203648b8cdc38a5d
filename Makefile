# The two commands: `make run` and `make test`. Both set everything up from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
export PIP_DISABLE_PIP_VERSION_CHECK = 1
# llama-cpp-python builds from source with what scripts/engine_backend.py picks for this machine (Metal, CUDA for
# this GPU's architecture, ROCm, Vulkan, else the CPU without -march=native and without AMX); a CMAKE_ARGS set by
# the user is used as given. It prints its choice and why, and `export` lines that the recipe evaluates.
ENGINE_ENV = engine_env="$$($(1) scripts/engine_backend.py --print env $(2))" && eval "$$engine_env"
# `make engine BACKEND=cuda`: rebuild the engine on demand (auto: what this machine has).
BACKEND ?= auto
# `make engine ENGINE_WHEEL_DIR=build/engine-wheels`: only build the wheel there (the venv is left alone).
ENGINE_WHEEL_DIR ?=
# `make bundle` ships a llama.cpp built for any x86-64-v3 CPU, in a venv of its own, never the native .venv one.
BUNDLE_VENV := build/bundle-venv
BUNDLE_PY   := $(BUNDLE_VENV)/bin/python

.PHONY: run test install install-test lint format clean system-deps screenshots bench bundle bundle-check engine

run: system-deps $(VENV)/.installed
	$(PY) -m app

# The linters first: a layering, style or type error fails the build before the tests run. Three workers, each
# given a test file at a time (its module's real models load once): on two cores one worker's Qt and server tests
# run while another's engine waits or decodes (measured on 2 cores: 1950 s in one process, 798 s on two workers,
# 714-733 s on three). Bytecode is written even where the environment says not to: rewriting and compiling the
# test modules afresh in every worker and CLI subprocess took minutes (docs/development.md). A worker that dies (a
# native crash) fails its test and is not replaced: a replaced one was seen to leave the run waiting forever.
TEST_WORKERS ?= 3
test: system-deps lint
	PYTHONDONTWRITEBYTECODE= QT_QPA_PLATFORM=offscreen $(PY) -m pytest \
	  $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0) $(PYTEST_ARGS)

# Every page, light and dark, at 1280x800 and 900x600, into build/screenshots/ (headless).
screenshots: system-deps $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) scripts/screenshots.py

# Every bench in bench/ as a subprocess, then one table: each ratio beside its target, met or not. The figures
# are written to bench/out/run_all.json. `make bench QUICK=1`: fewer runs, smaller files, no 1B model (< 10 min).
bench: system-deps $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) bench/run_all.py $(if $(filter-out 0,$(QUICK)),--quick)

# A one-folder PyInstaller bundle in dist/hearth/; on Linux also its desktop entry and icons, and
# dist/hearth-<version>-linux-<arch>.tar.gz. See installers/README.md (macOS and Windows scripts too).
# Built from build/bundle-venv, whose llama.cpp is the portable one (engine_backend.py --portable: x86-64-v3,
# no AVX-512, no AMX), so the bundle runs on CPUs older than the build machine's.
bundle: system-deps $(BUNDLE_VENV)/.installed
	QT_QPA_PLATFORM=offscreen $(BUNDLE_PY) installers/icons/render_icons.py --out build/icons
	$(BUNDLE_PY) -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller installers/hearth.spec
	@if [ "$$(uname -s)" = Linux ]; then $(BUNDLE_PY) installers/linux/package.py --dist dist --icons build/icons; fi

# Runs the bundled binary headless: --version, hw, fit, serve, bench, the GUI offscreen (~40 s), then --version,
# hw and a short run under `qemu-x86_64 -cpu Haswell` (no AVX-512) where qemu-user is installed. Not in `make test`.
bundle-check: system-deps $(VENV)/.installed-test
	$(PY) installers/bundle_check.py --bundle dist/hearth

# Rebuilds llama-cpp-python (the installed version, else pyproject's) for BACKEND, past pip's cached wheel.
engine: $(VENV)/bin/python
	@$(call ENGINE_ENV,$(PY),--backend $(BACKEND)) && ver=$$($(PY) scripts/engine_backend.py --print version) && \
	if [ -n "$(ENGINE_WHEEL_DIR)" ]; then \
	  set -x; $(PIP) wheel --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$(ENGINE_WHEEL_DIR)" "llama-cpp-python==$$ver"; \
	else \
	  set -x; $(PIP) install --no-cache-dir --no-binary llama-cpp-python --force-reinstall --no-deps "llama-cpp-python==$$ver"; \
	fi

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# pip keys its wheel cache by version, not by CMAKE_ARGS, so a wheel built with other flags (another GPU, no
# libmtmd) would be taken for this machine's. The engine wheel is kept in a folder of our own named by version and
# flags (engine_backend.py wheel_key): built once per set of flags, past pip's cache, then installed from there
# into a venv that has no engine yet. An existing engine is kept (`make engine` rebuilds it).
ENGINE_WHEELS ?= $(HOME)/.cache/hearth/engine-wheels
INSTALL_ENGINE = $(call ENGINE_ENV,$(PY),) && \
	if ! $(PY) -c "import llama_cpp" 2>/dev/null; then \
	  dir="$(ENGINE_WHEELS)/$$($(PY) scripts/engine_backend.py --print wheel-key)" && \
	  if ! ls "$$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then \
	    $(PIP) wheel --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$$dir.part" \
	      "llama-cpp-python==$$($(PY) scripts/engine_backend.py --print pinned-version)" && \
	    rm -rf "$$dir" && mv "$$dir.part" "$$dir"; fi && \
	  $(PIP) install --no-deps "$$dir"/llama_cpp_python-*.whl; fi

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(INSTALL_ENGINE) && $(PIP) install -e .
	touch $@

# mlx-vlm (images on MLX models) without its own dependencies: what Hearth uses of it needs only mlx, mlx-lm,
# transformers and Pillow, already here; the rest (opencv, datasets, mlx-audio: ~250 MB) serve its CLI,
# training and audio. Where it cannot be installed, the MLX image tests skip and say so.
MLX_VLM ?= mlx-vlm==0.7.10

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(INSTALL_ENGINE) && $(PIP) install -e '.[test]'
	$(PIP) install --no-deps '$(MLX_VLM)' || echo "mlx-vlm was not installed: images on MLX models go untested"
	touch $(VENV)/.installed $@

# The bundle's venv: the portable engine built past pip's cache (which holds the native one) at the version
# pyproject.toml pins, so the next step finds it satisfied and takes nothing from the cache; then the rest.
$(BUNDLE_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BUNDLE_VENV)
	$(call ENGINE_ENV,$(BUNDLE_PY),--backend cpu --portable) && $(BUNDLE_PY) -m pip install --no-cache-dir \
	  --force-reinstall --no-deps --no-binary llama-cpp-python \
	  "llama-cpp-python==$$($(BUNDLE_PY) scripts/engine_backend.py --print pinned-version)"
	$(BUNDLE_PY) -m pip install -e '.[bundle]'
	touch $@

# Qt's offscreen platform needs a few shared libraries; installs them only when missing and root.
system-deps:
	@bash scripts/system-deps.sh

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

LINTED := app tests bench scripts installers

lint: $(VENV)/.installed-test
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
