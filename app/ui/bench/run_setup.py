"""What the Benchmark page runs, apart from how it shows it: a workload in words, the driver for the chosen
source (a library model on the model pool, or an OpenAI-compatible server), and a time left in words."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from app.core.bench.driver import Driver, Progress
from app.core.bench.workload import Workload
from app.core.formats import GGUF
from app.core.hardware.profile import HardwareProfile
from app.core.library import LocalModel
from app.core.models.calibration import CalibrationStore
from app.core.runtime.job_host import JobHost

ENDPOINT = "endpoint"  # the source combo's data for "an OpenAI-compatible server"


def describe_workload(w: Workload) -> str:
    parts = [
        f"prompts of {', '.join(f'{n:,}' for n in w.prompt_lens)} tokens",
        f"{w.gen_len} generated",
        f"{' and '.join(map(str, w.concurrency))} user{'s' if max(w.concurrency) > 1 else ''} at once",
        f"{w.runs} runs",
    ]
    if w.shared_prefix:
        parts.append(f"a {w.shared_prefix:,}-token shared system prompt, cold and cached")
    return " · ".join(parts) + f" · needs {w.needed_ctx:,} context"


def duration_text(seconds: float) -> str:
    """A time left, as rounded as an estimate deserves: "15 s", "4 min", "1.5 h"."""
    if seconds < 90:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):.0f} min"
    return f"{seconds / 3600:.1f} h"


def bench_runner(
    host: JobHost,
    source: LocalModel | str,
    endpoint: tuple[str, str | None, str | None],
    workload: Workload,
    calibration: CalibrationStore | None,
    hardware: HardwareProfile | None,
    progress: Callable[[Progress], None],
    cancel: threading.Event,
) -> Driver:
    """Pool thread: the driver for this source (building it may read the model's header)."""
    if source == ENDPOINT:
        from app.core.bench.endpoint import EndpointRunner

        url, key, model = endpoint
        return EndpointRunner(
            url, workload, api_key=key, model=model, hardware=hardware, progress=progress, cancel=cancel
        )
    from app.core.bench.describe import planned_load
    from app.core.bench.runner import HostRunner

    assert isinstance(source, LocalModel)
    threads = None
    if source.format == GGUF:
        from app.core.engines.llamacpp.options import default_threads

        threads = default_threads()
    load = planned_load(Path(source.path), source.format, workload.target_ctx, n_threads=threads)
    sha = next((f.sha256 for f in source.files if Path(f.path) == Path(source.path) and f.sha256), None)
    return HostRunner(
        host,
        load,
        source.format,
        workload,
        calibration=calibration,
        hardware=hardware,
        sha256=sha,
        model_name=source.name,  # the library's name, not the one inside the file
        model_ref=source.id,  # so the pool runs its jobs on it, whichever model the chat has in focus
        progress=progress,
        cancel=cancel,
    )
