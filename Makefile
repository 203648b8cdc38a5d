# The two commands: `make run` and `make test`. Both set everything up from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# llama-cpp-python builds from source; skipping llava saves about a minute.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: run test install install-test lint format clean system-deps screenshots bench bundle bundle-check

run: system-deps $(VENV)/.installed
	$(PY) -m app

# The linters first: a layering, style or type error fails the build before the tests run.
test: system-deps lint
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

# Every page, light and dark, at 1280x800 and 900x600, into build/screenshots/ (headless).
screenshots: system-deps $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) scripts/screenshots.py

# Every bench in bench/ as a subprocess, then one table: each ratio beside its target, met or not. The figures
# are written to bench/out/run_all.json. `make bench QUICK=1`: fewer runs, smaller files, no 1B model (< 10 min).
bench: system-deps $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) bench/run_all.py $(if $(filter-out 0,$(QUICK)),--quick)

# A one-folder PyInstaller bundle in dist/hearth/; on Linux also its desktop entry and icons, and
# dist/hearth-<version>-linux-<arch>.tar.gz. See installers/README.md (macOS and Windows scripts too).
bundle: system-deps $(VENV)/.installed-bundle
	QT_QPA_PLATFORM=offscreen $(PY) installers/icons/render_icons.py --out build/icons
	$(PY) -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller installers/hearth.spec
	@if [ "$$(uname -s)" = Linux ]; then $(PY) installers/linux/package.py --dist dist --icons build/icons; fi

# Runs the bundled binary headless: --version, hw, fit, serve, bench, the GUI offscreen (~40 s). Not in `make test`.
bundle-check: system-deps $(VENV)/.installed-test
	$(PY) installers/bundle_check.py --bundle dist/hearth

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[test]'
	touch $(VENV)/.installed $@

$(VENV)/.installed-bundle: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[bundle]'
	touch $(VENV)/.installed $@

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
