"""The engine registry: which engine runs a model of each format (and role), and what each kind can do.

A kind is registered once, with its abilities (Capabilities); the built-ins register the same way a plug-in
does (engines/__init__.py). Decisions made before a load read a format's abilities here (`abilities`), so a
new engine is one package and one registration, not edits to the planner, the resolver and the UI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import Capabilities, Engine
from app.core.engines.errors import EngineError
from app.core.formats import ModelFormat

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]
ALL_ROLES = frozenset({"chat", "embedding", "rerank"})
NOTHING = Capabilities(chat=False, completion=False)  # a format no engine here runs

# The built-in kinds' abilities, known before any registry is made (the chat's plan reads them at start).
_ABILITIES: dict[str, Capabilities] = {
    ModelFormat.GGUF: Capabilities(
        embeddings=True,
        rerank=True,
        grammar=True,
        tools=True,
        logprobs=True,
        vision=True,
        planned=True,
        batches=True,
        draft_model=True,
        ngram=True,
        llama_cpp_build=True,
    ),
    ModelFormat.MLX: Capabilities(
        tools=True, logprobs=True, vision=True, planned=True, batches=True, draft_model=True, draft_alone=True
    ),
    ModelFormat.REMOTE: Capabilities(tools=True),
}


# Plug-in formats' recognizers: a model file or folder a kind says is its own (the built-ins are found by
# runtime.preflight.format_for_path: a .gguf file, an MLX folder).
_CLAIMS: dict[str, Callable[[Path], bool]] = {}


def abilities(fmt: str) -> Capabilities:
    """What a model of format `fmt` can get from its engine; NOTHING for a format no engine is registered for."""
    return _ABILITIES.get(fmt, NOTHING)


def format_claiming(path: Path) -> str | None:
    """The plug-in format whose kind claims `path` as one of its models, else None."""
    for fmt, claims in _CLAIMS.items():
        try:
            if claims(path):
                return fmt
        except OSError:  # a recognizer that cannot read the path does not claim it
            continue
    return None


@dataclass(frozen=True)
class EngineKind:
    format: str
    name: str  # as the user reads it: "llama.cpp", "MLX"
    factory: EngineFactory
    unavailable: Callable[[], str | None]  # why it cannot run here (a missing library), or None
    roles: frozenset[str] = ALL_ROLES  # what its models may be for (models.roles): chat, embedding, rerank


class EngineRegistry:
    """The kinds one host may create. Built and read on the thread that composes the app; `create` is called
    on an engine host's own thread."""

    def __init__(self) -> None:
        self._kinds: dict[str, EngineKind] = {}

    def register(
        self,
        fmt: str,
        name: str,
        factory: EngineFactory,
        unavailable: Callable[[], str | None] = lambda: None,
        *,
        abilities: Capabilities | None = None,
        roles: frozenset[str] = ALL_ROLES,
        claims: Callable[[Path], bool] | None = None,
    ) -> None:
        """Add a kind. `abilities` declares what its models can do for every decision made before a load
        (a plug-in's; the built-ins' are above); None keeps what is declared for the format. `claims` says
        whether a path is a model of this format (a plug-in's; `hearth run FILE` and loads by path read it)."""
        self._kinds[fmt] = EngineKind(fmt, name, factory, unavailable, roles)
        if abilities is not None:
            _ABILITIES[fmt] = abilities
        if claims is not None:
            _CLAIMS[fmt] = claims

    def kind(self, fmt: str, role: str = "chat") -> EngineKind:
        """The kind that runs a model of format `fmt` for `role`; EngineError when none does."""
        found = self._kinds.get(fmt)
        if found is None:
            raise EngineError(f"no engine for {fmt} models")
        if role not in found.roles:
            raise EngineError(f"{found.name} does not run {role} models")
        return found

    def name(self, fmt: str) -> str:
        """The engine's name as the user reads it ("llama.cpp", "MLX"); the format itself when unknown."""
        return self._kinds[fmt].name if fmt in self._kinds else fmt

    def formats(self) -> list[str]:
        return sorted(self._kinds)

    def why_unavailable(self, fmt: str) -> str | None:
        if fmt not in self._kinds:
            return f"no engine for {fmt} models"
        return self._kinds[fmt].unavailable()

    def create(self, fmt: str) -> Engine:
        reason = self.why_unavailable(fmt)
        if reason:
            raise EngineError(reason)
        return self._kinds[fmt].factory()
