"""Load the scripts under installers/ (not a package: PyInstaller and make run them by path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
INSTALLERS = ROOT / "installers"


def load(relative: str) -> ModuleType:
    """installers/<relative> as a module; installers/ goes on sys.path first, as the scripts expect."""
    if str(INSTALLERS) not in sys.path:
        sys.path.insert(0, str(INSTALLERS))
    path = INSTALLERS / relative
    name = "hearth_installers_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
