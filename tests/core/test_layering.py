"""The layering rule, enforced: core is Qt-free and web-free; server never imports Qt."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert exe, "import-linter is part of the test extra"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" not in proc.stdout.lower().replace("0 broken", "")


def test_every_core_module_imports_with_qt_and_web_stack_unavailable():
    code = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        for name in ("PySide6", "fastapi", "uvicorn", "starlette"):
            sys.modules[name] = None  # any import of these now raises ImportError
        import app.core
        for mod in pkgutil.walk_packages(app.core.__path__, "app.core."):
            importlib.import_module(mod.name)
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
