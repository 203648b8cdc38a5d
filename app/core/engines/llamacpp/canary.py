"""The canary for llama.cpp: the guard that checks each configuration of this build in a child process
(check_child.py), and at start the crashes the last run left markers for, recorded against this build."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from app.core.engines.canary.guard import NativeGuard
from app.core.engines.canary.inflight import InflightMarkers, recover_crashes
from app.core.engines.llamacpp.options import supports_extra_bufts_switch
from app.core.hardware.native_checks import NativeCheckStore, default_store_path, fingerprint_of

logger = logging.getLogger(__name__)


def guard_for(lib: Any, store_path: Path | None = None) -> NativeGuard:
    """The guard for the imported llama_cpp module, with the store in Hearth's cache dir."""
    store = NativeCheckStore(store_path or default_store_path())
    return NativeGuard(store, lambda: fingerprint_of(lib), can_skip_extra_bufts=supports_extra_bufts_switch(lib))


def recover_native_crashes(markers: InflightMarkers | None = None) -> list[str]:
    """At start: what died in native code last time, recorded against this machine's llama.cpp build, as
    sentences for the user (none on a clean start, which imports nothing native)."""
    markers = markers or InflightMarkers()
    if not markers.pending():
        return []
    from app.core.native import import_native

    try:
        guard = guard_for(import_native("llama_cpp"))
    except Exception as exc:  # no engine to record against; the markers stay for a later start
        logger.warning("cannot record last run's native crash: %s", exc)
        return []
    return [crash.sentence for crash in recover_crashes(markers, guard.record_crash)]
