"""The engine host: one thread owns the loaded engine; jobs in, chunks out, cancel any time."""

from app.core.runtime.host import EngineHost
from app.core.runtime.jobs import (
    ChunkEvent,
    EmbedJob,
    GenerateJob,
    GenerateResult,
    HostBusy,
    HostClosed,
    HostState,
    JobDone,
    JobFailed,
    JobHandle,
    LoadJob,
    ShutdownJob,
    UnloadJob,
)
from app.core.runtime.preflight import DefaultPreflight, LoadRefused, PreflightResult, format_for_path

__all__ = [
    "ChunkEvent", "DefaultPreflight", "EmbedJob", "EngineHost", "GenerateJob", "GenerateResult", "HostBusy",
    "HostClosed", "HostState", "JobDone", "JobFailed", "JobHandle", "LoadJob", "LoadRefused", "PreflightResult",
    "ShutdownJob", "UnloadJob", "format_for_path",
]
