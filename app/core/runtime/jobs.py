"""Jobs the EngineHost runs, the events it sends to a job's sink, and the handle a caller keeps."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.core.engines.base import Capabilities, Chunk, GenerateRequest, LoadSpec, ModelInfo
from app.core.errors import HearthError

HostStatus = Literal["idle", "loading", "ready", "generating", "error"]
# What kind of failure ended a job, for callers that answer machines (the API's error codes). An error
# class says its kind with a `code` attribute; anything else is an engine error.
FailureCode = Literal[
    "context_length_exceeded",
    "model_not_found",
    "invalid_request",
    "schema_too_complex",
    "request_too_large",
    "busy",
    "unsupported",
    "engine_error",
    "cancelled",
    "unavailable",
]


class HostBusy(HearthError):
    """The job queue is full; `retry_after` is how many seconds a slot is likely to take to free up
    (the API answers 503 with Retry-After)."""

    code = "busy"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class HostClosed(HearthError):
    """The host has shut down and takes no more jobs."""

    code = "unavailable"


class ModelNotFound(HearthError):
    """A job names a model the library does not have, or one that is not loaded while JIT loading is off."""

    code = "model_not_found"


def failure_code(exc: BaseException) -> str:
    return getattr(exc, "code", None) or "engine_error"


def same_path(a: Path | str, b: Path | str) -> bool:
    """Whether two model paths name the same file (a job's model against the loaded one)."""
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return Path(a) == Path(b)


# How long a model stays loaded without a job, as a job asks (Ollama's keep_alive, LM Studio's ttl):
# None: as it was (the Settings default for a new model); 0: unloaded when the job ends; KEEP_FOREVER: never.
KEEP_FOREVER = float("inf")


def keep_for(ttl: float | None) -> float | None:
    """A time-to-live as clients give it (seconds; negative: for ever, LM Studio's -1 and Ollama's) as a
    job's `ttl_s`."""
    return None if ttl is None else KEEP_FOREVER if ttl < 0 else float(ttl)


@dataclass
class LoadJob:
    spec: LoadSpec
    format: str
    plan_check: bool = True  # refuse a load the planner says will not fit
    ttl_s: float | None = None  # see KEEP_FOREVER
    pin: bool | None = None  # keep loaded: never unloaded to make room nor when idle (None: as it was)
    focus: bool = True  # becomes what jobs that name no model run on (the chat's model); an API load does not
    # The most context a request may grow this load to (reloaded, planned like any load, when a prompt and the
    # room for its reply do not fit what is loaded); 0: it never grows (a load the person chose in the chat).
    grow_to: int = 0


@dataclass
class UnloadJob:
    model: str | None = None  # None: the model in focus (the last one loaded)
    every: bool = False  # every loaded model
    # A pinned model is unloaded only when the person asks in the app (Eject, Unload); a request over the API
    # that would unload one (an unload route, keep_alive 0, a delete) fails with ModelPinned instead.
    even_pinned: bool = False


class ModelPinned(HearthError):
    """An unload a pinned model refuses: it stays until it is unpinned (or ejected in the app)."""

    code = "model_pinned"


@dataclass
class GenerateJob:
    request: GenerateRequest
    source: str = "app"  # who asked: "chat", "api", "cli"; shown in the host state
    # The model the job is for (a library name or id): loaded first when another is (JIT), checked
    # when the job starts, so it never runs on a model swapped in meanwhile. None: whatever is loaded.
    model: str | None = None
    # Called on the host thread once the model is known, before generating: what depends on the model
    # that runs it (its chat template's tool format, whether it takes grammars) is decided here.
    prepare: Callable[[ModelInfo, Capabilities], GenerateRequest] | None = None
    ttl_s: float | None = None  # as LoadJob's: how long its model stays loaded after it


@dataclass
class CountJob:
    """How many prompt tokens `request` takes after the chat template, and the context it must fit."""

    request: GenerateRequest
    model: str | None = None
    # As a GenerateJob's: the request as the model that counts it renders it (its tools in its template).
    prepare: Callable[[ModelInfo, Capabilities], GenerateRequest] | None = None


@dataclass
class EmbedJob:
    texts: list[str]
    model: str | None = None
    ttl_s: float | None = None


@dataclass
class RerankJob:
    """Scores each document for its relevance to `query` (a reranker model); the result is engines.Rankings."""

    query: str
    documents: list[str]
    model: str | None = None


@dataclass
class ShutdownJob:
    pass


Job = LoadJob | UnloadJob | GenerateJob | CountJob | EmbedJob | RerankJob | ShutdownJob


@dataclass
class GenerateResult:
    text: str
    final: Chunk  # the last chunk: finish_reason and stats

    @property
    def finish_reason(self) -> str | None:
        return self.final.finish_reason


@dataclass
class TokenCount:
    """A CountJob's result: the prompt's tokens and the loaded context length."""

    prompt_tokens: int
    n_ctx: int


@dataclass
class Started:
    """A generation's prompt was accepted (the model is the right one, the prompt fits): what follows
    is its chunks. Sent before any chunk, so a caller can still answer an error before that."""

    model: ModelInfo


@dataclass
class ChunkEvent:
    chunk: Chunk


@dataclass
class JobDone:
    result: Any  # ModelInfo (load), GenerateResult (generate), Embeddings (embed), None


@dataclass
class JobFailed:
    error_message: str
    code: str = "engine_error"  # a FailureCode
    details: dict[str, Any] = field(default_factory=dict)  # e.g. prompt_tokens and n_ctx on an overflow
    after_output: bool = False  # chunks with text were sent before it failed


HostEvent = Started | ChunkEvent | JobDone | JobFailed
# Called on the host thread: keep it quick and re-post to your own thread (Qt: a queued signal).
Sink = Callable[[HostEvent], None]

_ids = itertools.count(1)
# Waits are sliced so Ctrl-C reaches a waiting main thread promptly on every platform (a long lock wait
# is not interruptible on Windows).
WAIT_SLICE_S = 0.1


@dataclass(eq=False)
class JobHandle:
    """What `EngineHost.submit` returns. `done` is set after the sink got JobDone or JobFailed."""

    job: Job
    sink: Sink | None = None
    id: int = field(default_factory=lambda: next(_ids))
    cancel_event: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    started: bool = False
    output_started: bool = False  # a chunk with text went to the sink
    context_needed: int | None = None  # a generation's prompt + reply room, once the host counted it (engine_host.py)
    prompt_tokens: int | None = None  # ... and its prompt alone

    def cancel(self) -> None:
        """Stop the job: skipped if still queued (its queue slot is free at once), stopped within one
        token / prompt batch / embeddings input if running."""
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def wait_or_cancel(self, timeout: float | None = None, *, grace: float | None = 30.0) -> bool:
        """Wait for the job from the caller's (main) thread; True if it ended within `timeout`.

        Ctrl-C (KeyboardInterrupt) while waiting cancels the job, waits for the host to finish it and
        re-raises, so `result` then holds what was done (a stopped reply's text). That wait lasts at most
        `grace` seconds, where another Ctrl-C gets out at once; with `grace=None` it lasts until the job
        ends and another Ctrl-C only repeats the cancel.
        """
        try:
            return self._wait_sliced(timeout)
        except KeyboardInterrupt:
            self.cancel()
            while True:
                try:
                    self._wait_sliced(grace)
                    break
                except KeyboardInterrupt:
                    if grace is not None:
                        raise
                    self.cancel()
            raise

    def _wait_sliced(self, timeout: float | None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE_S if end is None else min(WAIT_SLICE_S, end - time.monotonic())
            if left <= 0:
                return self.done.is_set()
            if self.wait(left):
                return True


@dataclass(frozen=True)
class HostState:
    status: HostStatus = "idle"
    model: ModelInfo | None = None
    source: str | None = None  # who is generating, while status is "generating"
    error: str | None = None
    queue_depth: int = 0
    # Generations the loaded model can run at once (0: none loaded), and how many run now.
    slots_total: int = 0
    slots_busy: int = 0
    # How the loaded model was loaded (None: none is): what a caller that swaps it (a benchmark) restores.
    load: LoadSpec | None = None
    grow_to: int = 0  # the most context a request may grow the loaded model to (LoadJob.grow_to; 0: it does not)

    @property
    def context_limit(self) -> int:
        """The context a request to the loaded model can use: what it runs with, or what it grows to."""
        return max(self.model.n_ctx if self.model is not None else 0, self.grow_to)
