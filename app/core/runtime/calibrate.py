"""What a finished generation teaches the speed model: its measured decode and prefill beside the
preflight's uncalibrated predictions, recorded in the calibration store. Called on the host thread."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from app.core.engines.base import Chunk, ModelInfo
from app.core.models.calibration import CalibrationStore, SpeedRun
from app.core.runtime.preflight import PreflightResult

logger = logging.getLogger(__name__)

# Tiny runs measure noise, not speed: only longer generations go to the calibration store.
MIN_CALIBRATION_TOKENS = 4
# A prompt this short (or mostly reused from the cache) measures the fixed cost of one batch, not prefill
# throughput: its prefill speed is not recorded, so it cannot drag the prefill correction down.
MIN_CALIBRATION_PROMPT_TOKENS = 64
LOAD_WINDOW_S = 60.0  # what os.getloadavg()'s first figure averages over

# (monotonic time, this process's CPU seconds) at the last look: its CPU use since then is its own load.
_last_sample = (time.monotonic(), time.process_time())
_sample_lock = threading.Lock()


def machine_load() -> tuple[float | None, float | None]:
    """(1-minute load average per logical core, this process's share of all cores over about the last
    minute); (None, None) where there is no load average (Windows).

    The share is this process's CPU time since the previous call, spread over that interval but at most
    the last minute: between generations the app is idle, so its CPU time falls in the minute the load
    average weighs most. llama.cpp's spinning threads count in both figures, so their difference is what
    other processes ran."""
    global _last_sample
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None, None
    cores = os.cpu_count() or 1
    now = (time.monotonic(), time.process_time())
    with _sample_lock:
        then, _last_sample = _last_sample, now
    window = min(max(now[0] - then[0], 1e-3), LOAD_WINDOW_S)
    share = min(1.0, max(0.0, (now[1] - then[1]) / (window * cores)))
    return load / cores, share


def record_run(store: CalibrationStore, pre: PreflightResult | None, info: ModelInfo | None, final: Chunk) -> None:
    """Record `final`'s speeds against the predictions of the load that produced it, when they measure speed."""
    stats = final.stats
    if pre is None or stats is None:
        return
    if final.finish_reason not in ("stop", "length") or stats.generated_tokens < MIN_CALIBRATION_TOKENS:
        return
    if pre.predicted_decode_tok_s <= 0 or stats.decode_tok_s <= 0:
        return
    model = Path(info.path).name if info is not None else "?"
    load, own = machine_load()
    predicted_prefill = measured_prefill = 0.0
    if stats.prompt_tokens_evaluated >= MIN_CALIBRATION_PROMPT_TOKENS and stats.prompt_tok_s > 0:
        predicted_prefill = pre.prefill_tok_s_at(stats.prompt_tokens_evaluated)
        measured_prefill = stats.prompt_tok_s if predicted_prefill > 0 else 0.0
    try:
        store.record(
            SpeedRun(
                backend=pre.backend,
                model=model,
                predicted_decode=pre.predicted_decode_tok_s,
                measured_decode=stats.decode_tok_s,
                predicted_prefill=predicted_prefill,
                measured_prefill=measured_prefill,
                model_bytes=pre.spec.bytes_per_token_read if pre.spec is not None else 0,
                load_per_core=load,
                own_share=own,
            )
        )
    except OSError as exc:  # a read-only cache dir costs calibration, not the reply
        logger.warning("could not record the speed run: %s", exc)
    logger.debug(
        "calibration: %s decode predicted %.1f tok/s, measured %.1f; prefill predicted %.1f, measured %.1f; "
        "load %s per core, own share %s",
        model,
        pre.predicted_decode_tok_s,
        stats.decode_tok_s,
        predicted_prefill,
        measured_prefill,
        "?" if load is None else f"{load:.2f}",
        "?" if own is None else f"{own:.2f}",
    )
