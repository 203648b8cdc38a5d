"""Draft models from the library for speculative decoding: which can draft for a model, and whether the
one the user picked still can (same tokenizer, smaller, fits beside the model's plan).

Header reads are disk work: call from a background thread (or the host's). Each file's vocabulary and
spec are read once per file version.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.engines.registry import abilities
from app.core.library.store import Library, LocalModel
from app.core.models.errors import ModelFileError
from app.core.models.planner import Plan, draft_fit
from app.core.models.spec import ModelSpec
from app.core.models.vocab import Vocab, mlx_vocab, vocab_mismatch, vocab_of
from app.core.runtime.preflight import check_model
from app.core.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraftPick:
    """The draft model a load gets (`path` None: none, and `note` says why)."""

    path: Path | None
    note: str


class DraftFinder:
    """Thread-safe; one per library."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._lock = threading.Lock()
        # (what, path, size, mtime) -> the vocabulary or the spec read from that file version
        self._read: dict[tuple[str, str, int, int], Any] = {}

    def vocab(self, path: Path) -> Vocab | None:
        """The GGUF's or MLX folder's vocabulary (None: unreadable, or none in it)."""
        from app.core.models.gguf import read_gguf_header

        path = Path(path)
        return self._once("vocab", path, lambda: mlx_vocab(path) if path.is_dir() else vocab_of(read_gguf_header(path)))

    def spec(self, model: LocalModel) -> ModelSpec | None:
        """The model's spec, as the planner reads it (None: unreadable)."""
        path = Path(model.path)
        return self._once("spec", path, lambda: check_model(path, model.format))

    def _once(self, what: str, path: Path, read: Callable[[], Any]) -> Any:
        """`read()` once per version of the file (a GGUF, or an MLX folder's tokenizer.json); None if it fails."""
        try:
            st = (path / "tokenizer.json" if path.is_dir() else path).stat()
        except OSError:
            return None
        key = (what, str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._read:
                return self._read[key]
        try:
            found = read()
        except ModelFileError as exc:
            logger.debug("cannot read the %s of %s: %s", what, path, exc)
            found = None
        with self._lock:
            self._read[key] = found
        return found

    def candidates(self, model: LocalModel) -> list[LocalModel]:
        """Ready library models that could draft for `model`: of its format (GGUF or MLX), smaller, with the
        same tokenizer; smallest first (the cheaper the draft, the more it saves)."""
        if not abilities(model.format).draft_model:
            return []
        mine = self.vocab(model.path)
        if mine is None:
            return []
        found = [
            m
            for m in self.library.list(status="ready")
            if m.format == model.format and m.id != model.id and m.size < model.size
        ]
        return sorted(
            (m for m in found if vocab_mismatch(mine, self.vocab(m.path)) is None), key=lambda m: (m.size, m.name)
        )

    def fitting(self, model: LocalModel, plan: Plan) -> list[LocalModel]:
        """The candidates that fit beside `plan` (each one's memory added to the model's)."""
        return [m for m in self.candidates(model) if (spec := self.spec(m)) and draft_fit(plan, spec, m.name).fits]

    def pick(self, model: LocalModel, draft_name: str, plan: Plan | None) -> DraftPick:
        """The draft model `draft_name` (a library id or name) for `model` under `plan`, if it exists,
        shares the tokenizer, is smaller and fits beside the plan; else no draft, and why."""
        draft = self.library.find(draft_name) if draft_name.strip() else None
        if draft is None or not draft.ready:
            return DraftPick(None, f"the draft model {draft_name!r} is not in the library")
        if not abilities(model.format).draft_model or draft.format != model.format:
            return DraftPick(None, f"a draft model for a {model.format} model must be one too, not {draft.format}")
        if draft.id == model.id or draft.size >= model.size:
            return DraftPick(None, f"{draft.name} is not smaller than {model.name}: it would save nothing")
        why = vocab_mismatch(self.vocab(model.path), self.vocab(draft.path))
        if why is not None:
            return DraftPick(None, f"{draft.name} cannot draft for {model.name}: {why}")
        if plan is not None:
            spec = self.spec(draft)
            if spec is None:
                return DraftPick(None, f"{draft.name} cannot be read")
            fit = draft_fit(plan, spec, draft.name)
            if not fit.fits:
                return DraftPick(None, fit.line)
        return DraftPick(Path(draft.path), f"draft model {draft.name}")


class DraftPrefs:
    """The Speculative decoding setting and the draft model picked per model, read from and saved through
    the settings model (the chat's load options pick; the API server's loads follow)."""

    def __init__(self, finder: DraftFinder, settings: Callable[[], Settings], save: Callable[[Settings], None]) -> None:
        self.finder = finder
        self._settings = settings
        self._save = save

    def setting(self) -> str:
        return self._settings().speculative

    def deterministic(self) -> bool:
        """Settings → Same answer every time, which rules drafting out (loads decode each sequence alone)."""
        return self._settings().deterministic

    def picked(self, model_id: str) -> str | None:
        return self._settings().draft_models.get(model_id)

    def remember(self, model_id: str, draft_id: str | None) -> None:
        """Background thread (it writes the settings file): `draft_id` drafts for `model_id` from now on;
        None forgets the pick."""
        current = self._settings()
        picks = dict(current.draft_models)
        if picks.get(model_id) == draft_id:
            return
        if draft_id is None:
            picks.pop(model_id, None)
        else:
            picks[model_id] = draft_id
        self._save(current.model_copy(update={"draft_models": picks}))


def drafting_text(extra: dict) -> str:
    """How the loaded model drafts, for the status line ("" when it does not)."""
    if extra.get("draft_model"):
        return f"drafts with {extra['draft_model']}"
    return {"auto": "prompt-lookup drafts", "ngram": "prompt-lookup drafts"}.get(str(extra.get("speculative")), "")
