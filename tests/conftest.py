"""Shared test setup: every test gets its own HEARTH_HOME; nothing reaches the internet."""

from __future__ import annotations

import os

import pytest

# Set before anything imports huggingface_hub, which reads these at import time.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Under pytest-xdist (`make test` runs three workers) each worker's engines get their share of the cores: two
# llama.cpp engines each spinning on every core wait on each other's barriers (a 5 s test took 120 s). Set
# before any native library is imported (options imports none); the CLI tests pass it on to their subprocesses.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1:
    from app.core.engines.llamacpp.options import THREADS_ENV, physical_cores

    if THREADS_ENV not in os.environ:
        _share = str(max(1, physical_cores() // _WORKERS))
        os.environ[THREADS_ENV] = _share
        for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(_pool, _share)
# One native-check store for the whole run and its subprocesses, as a user's processes share the cache dir:
# the canary checks each weight type and configuration once per session, not once per test.
if "HEARTH_NATIVE_CHECKS" not in os.environ:
    import tempfile

    os.environ["HEARTH_NATIVE_CHECKS"] = os.path.join(
        tempfile.mkdtemp(prefix="hearth-native-checks-"), "native-checks.json"
    )

pytest_plugins = [
    "tests.fixtures.models",
    "tests.fakehub.fixtures",
    "tests.core.engines.fixtures",
    "tests.ui.chat_harness",
    "tests.core.chat.doc_fixtures",  # `documents` and `notes`: the chat's documents, in core and in the window
    "tests.fixtures.qt_leftovers",
]


@pytest.fixture(autouse=True)
def hearth_home(tmp_path, monkeypatch):
    """An isolated HEARTH_HOME per test: config, data, models, logs and cache all land here."""
    home = tmp_path / "hearth-home"
    monkeypatch.setenv("HEARTH_HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return home


# The run's result, kept for pytest_unconfigure below.
_SESSION_EXIT: dict[str, int] = {}


def pytest_sessionfinish(session, exitstatus):
    _SESSION_EXIT["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """After every result is reported, leave without the interpreter's teardown. The suite loads
    llama.cpp, MLX and Qt in one process, and their C++ static destructors then run in an order Python
    does not control: a crash there (seen once after 1960 passing tests, past faulthandler's reach) says
    nothing about Hearth, whose own exit unloads the engine first. HEARTH_TEST_FULL_EXIT=1 keeps it."""
    status = _SESSION_EXIT.get("status")
    if status is None or os.environ.get("HEARTH_TEST_FULL_EXIT") == "1":
        return
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
