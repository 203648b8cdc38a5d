"""A benchmark leaves the loaded models as it found them: the chat's model keeps its context and slots.

Before a run, `LoadsBefore.look` notes the model in focus (the chat's) and the benchmarked model if it is
loaded. A benchmarked model already loaded with enough context is measured as it is, with no load; else
the benchmark loads its own (not taking the focus), and afterwards `restore` unloads what it loaded and
loads the chat's model again, as it was, if the run swapped or displaced it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.runtime.job_host import JobHost, Resident
from app.core.runtime.jobs import LoadJob, UnloadJob

logger = logging.getLogger(__name__)

RESTORE_TIMEOUT_S = 1800.0


def _same(a: Path | str, b: Path | str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except OSError:
        return str(a) == str(b)


def describe_load(n_ctx: int, slots: int) -> str:
    return f"{n_ctx:,} context, {slots} slot{'s' if slots != 1 else ''}"


@dataclass(frozen=True)
class LoadsBefore:
    chat: Resident | None  # the model in focus before the run, loaded (the chat's)
    mine: Resident | None  # the benchmarked model, if it was loaded

    @classmethod
    def look(cls, host: JobHost, path: Path) -> LoadsBefore:
        loaded = [r for r in host.residents() if r.state.model is not None]
        chat = next((r for r in loaded if r.focus), None)
        mine = next((r for r in loaded if _same(r.state.model.path, path)), None)  # type: ignore[union-attr]
        return cls(chat, mine)

    def reusable(self, needed_ctx: int) -> LoadSpec | None:
        """How the benchmarked model is loaded, when that serves the workload as it is (no load needed)."""
        mine = self.mine
        if mine is None or mine.state.load is None or mine.state.model is None:
            return None
        if mine.state.status not in ("ready", "generating") or mine.state.model.n_ctx < needed_ctx:
            return None
        return mine.state.load


def _unchanged(before: Resident, host: JobHost) -> bool:
    assert before.state.model is not None
    for r in host.residents():
        if r.state.model is not None and _same(r.state.model.path, before.state.model.path):
            same_load = before.state.load is None or r.state.load == before.state.load
            return (
                same_load
                and r.state.model.n_ctx == before.state.model.n_ctx
                and r.state.slots_total == before.state.slots_total
            )
    return False


def restore(host: JobHost, before: LoadsBefore, path: Path) -> list[str]:
    """After a run that loaded `path`: unload it if it was not loaded before, and load the chat's model again
    as it was if it is no longer so. Sentences saying what was restored (or could not be). Blocks."""
    notes: list[str] = []
    mine = next((r for r in host.residents() if r.state.model is not None and _same(r.state.model.path, path)), None)
    if before.mine is None and mine is not None:
        try:  # by its key: a pool unloads that model, a single host the one it has
            host.wait_for(host.submit(UnloadJob(model=mine.key)), RESTORE_TIMEOUT_S)
        except Exception as exc:  # the report matters more than tidying up
            logger.info("could not unload the benchmarked model: %s", exc)
    chat = before.chat
    if chat is None or chat.state.model is None or _unchanged(chat, host):
        return notes
    words = describe_load(chat.state.model.n_ctx, chat.state.slots_total)
    if chat.state.load is None:
        return [f"The chat's model was unloaded for the benchmark ({words}); load it again in Chat."]
    job = LoadJob(spec=chat.state.load, format=chat.state.model.format, pin=chat.pinned, focus=True)
    try:
        host.wait_for(host.submit(job), RESTORE_TIMEOUT_S)
    except Exception as exc:
        logger.warning("could not restore the chat's model: %s", exc)
        return [f"Could not load the chat's model again ({words}): {exc}"]
    return [f"Restored the chat's model: {words}."]
