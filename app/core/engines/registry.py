"""Engines registered by model format; built-ins register the same way a plug-in would."""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.core.engines.base import Engine
from app.core.engines.errors import EngineError

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]


class EngineRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, tuple[str, EngineFactory, Callable[[], str | None]]] = {}

    def register(
        self, fmt: str, name: str, factory: EngineFactory, unavailable: Callable[[], str | None] = lambda: None
    ) -> None:
        """`unavailable()` returns why the engine cannot run here (e.g. a missing library), or None."""
        self._factories[fmt] = (name, factory, unavailable)

    def name(self, fmt: str) -> str:
        """The engine's name as the user reads it ("llama.cpp", "MLX"); the format itself when unknown."""
        return self._factories[fmt][0] if fmt in self._factories else fmt

    def formats(self) -> list[str]:
        return sorted(self._factories)

    def why_unavailable(self, fmt: str) -> str | None:
        if fmt not in self._factories:
            return f"no engine for {fmt} models"
        return self._factories[fmt][2]()

    def create(self, fmt: str) -> Engine:
        reason = self.why_unavailable(fmt)
        if reason:
            raise EngineError(reason)
        return self._factories[fmt][1]()
