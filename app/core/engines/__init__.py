"""Engines: one interface (base.py), built-ins registered by model format like any plug-in.

A plug-in is a module with `register(registry: EngineRegistry) -> None`, named by an entry point in the
"hearth.engines" group of an installed package, or in HEARTH_ENGINE_PLUGINS (module names, comma-separated;
for development and the tests). It is code the user installed or named: it runs in-process, like Hearth.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import threading
from collections.abc import Iterable

from app.core.engines.base import Chunk, Engine, GenerateRequest
from app.core.engines.registry import EngineRegistry
from app.core.formats import GGUF, MLX

__all__ = ["collect", "default_registry", "generate_all"]

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "hearth.engines"
PLUGINS_ENV = "HEARTH_ENGINE_PLUGINS"


def collect(chunks: Iterable[Chunk]) -> tuple[str, Chunk]:
    """Drain a generation: (all text, the final chunk with finish_reason and stats)."""
    parts: list[str] = []
    last = Chunk()
    for chunk in chunks:
        parts.append(chunk.text)
        last = chunk
    return "".join(parts), last


def generate_all(engine: Engine, request: GenerateRequest, cancel: threading.Event | None = None) -> tuple[str, Chunk]:
    """Non-streamed generation on the calling thread (tests, the CLI, the bench)."""
    return collect(engine.generate(request, cancel or threading.Event()))


def _llama_cpp_unavailable() -> str | None:
    return None if importlib.util.find_spec("llama_cpp") else "llama-cpp-python is not installed"


def _mlx_unavailable() -> str | None:
    return None if importlib.util.find_spec("mlx") else "mlx is not installed"


def _make_llamacpp():
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    return LlamaCppEngine()


def _make_mlx():
    from app.core.engines.mlx.engine import MlxEngine  # imported only when an MLX model is loaded

    return MlxEngine()


def default_registry() -> EngineRegistry:
    """A registry with the built-in engines: "gguf" → llama.cpp, "mlx" → mlx-lm."""
    from app.core.hardware.engines import LLAMACPP

    registry = EngineRegistry()
    registry.register(GGUF, LLAMACPP, _make_llamacpp, _llama_cpp_unavailable)
    registry.register(MLX, "MLX", _make_mlx, _mlx_unavailable)
    add_plugins(registry)
    return registry


def add_plugins(registry: EngineRegistry) -> list[str]:
    """Register every plug-in engine kind found (entry points, then HEARTH_ENGINE_PLUGINS); returns their
    module names. One that fails to import or register is logged and skipped: the built-ins still run."""
    named = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    found: list[tuple[str, object]] = []
    for point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        found.append((point.value, point.load))
    found += [(name, lambda name=name: importlib.import_module(name)) for name in named]
    added = []
    for name, load in found:
        try:
            module = load()  # type: ignore[operator]
            module.register(registry)
        except Exception:  # a plug-in's bug is not Hearth's crash
            logger.exception("engine plug-in %s failed to register; skipped", name)
            continue
        added.append(name)
    return added
