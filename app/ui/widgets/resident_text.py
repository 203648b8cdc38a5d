"""What a loaded model's row says (the Loaded models strip), in words; Qt-free."""

from __future__ import annotations

import math

from app.core.runtime.job_host import Resident
from app.core.units import GiB, fmt_bytes


def memory_text(n: int) -> str:
    return "—" if n <= 0 else fmt_bytes(n, 1 if n >= GiB else 0)


def status_text(r: Resident) -> str:
    s = r.state
    if s.status == "generating":
        return f"Generating {s.slots_busy} of {s.slots_total}" if s.slots_total > 1 else "Generating"
    if s.status == "error" and s.model is None:
        return "Failed to load"
    # "idle" without a model: a host made for a job that has not started its load yet.
    return "Loading…" if s.status == "loading" or s.model is None else "Ready"


def duration_text(seconds: float) -> str:
    if seconds < 60:
        return f"{math.ceil(seconds)} s"
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h".replace(".0 h", " h")


def leaves_text(r: Resident) -> str:
    """When the model goes: pinned, never for being idle, in so long, or so long after it is idle again."""
    if r.pinned:
        return "pinned"
    if r.ttl_s is None:
        return "kept while there's room"
    if r.idle_left_s is None:  # busy: the countdown starts when it is idle
        return f"unloads {duration_text(r.ttl_s)} after use"
    return f"unloads in {duration_text(r.idle_left_s)}"


def leaves_tooltip(r: Resident) -> str:
    """What `leaves_text` means, in a sentence."""
    if r.pinned:
        return "Pinned: it stays loaded until you unpin or unload it"
    if r.ttl_s is None:
        return (
            "No idle time limit: it is unloaded only when another model needs its memory (or the model count"
            " is reached), least recently used first. Pin it to keep it loaded."
        )
    return f"Unloaded once it has been idle for {duration_text(r.ttl_s)}; pin it to keep it loaded"
