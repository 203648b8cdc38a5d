"""Import native libraries one at a time: loading llama.cpp, numpy/OpenBLAS, NVML or MLX from two
threads at once crashed the process here (segfault inside `import llama_cpp`)."""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_LOCK = threading.RLock()


def import_native(name: str) -> ModuleType:
    """`importlib.import_module(name)`, serialised with every other native import."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    with _LOCK:
        return importlib.import_module(name)
