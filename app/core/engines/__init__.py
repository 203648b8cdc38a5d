"""Engines: one interface (base.py), built-ins registered by model format like any plug-in."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterable

from app.core.engines.base import Chunk, Engine, GenerateRequest
from app.core.engines.registry import EngineRegistry

__all__ = ["collect", "default_registry", "generate_all"]


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
    from app.core.engines.llamacpp import LlamaCppEngine

    return LlamaCppEngine()


def _make_mlx():
    from app.core.engines.mlx import MlxEngine  # imported only when an MLX model is loaded

    return MlxEngine()


def default_registry() -> EngineRegistry:
    """A registry with the built-in engines: "gguf" → llama.cpp, "mlx" → mlx-lm."""
    from app.core.hardware.engines import LLAMACPP

    registry = EngineRegistry()
    registry.register("gguf", LLAMACPP, _make_llamacpp, _llama_cpp_unavailable)
    registry.register("mlx", "MLX", _make_mlx, _mlx_unavailable)
    return registry
