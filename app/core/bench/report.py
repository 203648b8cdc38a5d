"""The benchmark report: what was measured, and everything that makes the numbers meaningful (model,
weights, engine and its flags, hardware, workload, warm-up and run counts). Pydantic with extra="forbid";
its JSON schema is published at resources/schemas/bench-report.schema.json (scripts/bench_schema.py
writes it; a test checks the committed file is current)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.bench.stats import Percentiles
from app.core.bench.workload import Workload

SCHEMA_VERSION = 1
SCHEMA_ID = "https://hearth.local/schemas/bench-report.schema.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRecord(_Strict):
    name: str  # the library name, else the model's own (GGUF general.name) or file name; an endpoint's id
    architecture: str = ""  # "llama", "qwen2", ... ("" when the server does not say)
    parameters: int | None = None  # total parameters
    context_trained: int | None = None


class WeightsRecord(_Strict):
    format: str | None = None  # "gguf", "mlx"
    file_name: str | None = None  # the (first) file or the folder, without its directory
    quant_type: str | None = None  # "Q4_K_M"
    file_size: int | None = None  # bytes, all shards
    sha256: str | None = None  # of the (first) file; None when not hashed (an endpoint's model)


class EngineFlags(_Strict):
    n_ctx: int | None = None
    gpu_layers: int | None = None  # -1: all
    threads: int | None = None
    flash_attention: bool | None = None
    kv_type_k: str | None = None
    kv_type_v: str | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    slots: int | None = None  # requests the engine runs at once (Hearth's host: 1)


class EngineRecord(_Strict):
    kind: Literal["host", "endpoint"]
    name: str  # "llama.cpp", "mlx", "llama-server", "endpoint"
    version: str | None = None  # llama-cpp-python's version, a server's build
    build_info: str | None = None  # llama.cpp's system info (SIMD, backends) or a server's build string
    url: str | None = None  # the endpoint's base URL (never its key)
    flags: EngineFlags = Field(default_factory=EngineFlags)
    # How concurrent requests ran: Hearth's host runs one at a time and queues the rest.
    concurrency_mode: str = ""


class Prediction(_Strict):
    """The planner's figures for this cell (calibrated as `hearth fit` shows them)."""

    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    memory_bytes: int | None = None  # the planner's estimate of the load at the target context
    basis: str = ""


class Comparison(_Strict):
    """Measured ÷ predicted (1.0: the planner was right; < 1: slower / smaller than predicted)."""

    decode: float | None = None
    prefill: float | None = None
    memory: float | None = None


class CellResult(_Strict):
    prompt_len: int  # target prompt tokens
    concurrency: int
    requests: int  # measured requests sent
    completed: int  # of which finished without error
    errors: list[str] = Field(default_factory=list)
    prompt_tokens: float  # mean measured prompt tokens (after the chat template)
    cached_tokens: float = 0.0  # mean prompt tokens served from the engine's cache
    output_tokens: float  # mean generated tokens
    ttft_s: Percentiles | None  # time to first token, as the client saw it (queueing included)
    tpot_s: Percentiles | None  # time per output token after the first
    e2e_s: Percentiles | None  # end-to-end latency
    queue_wait_s: Percentiles | None = None  # host: client TTFT minus the engine's own TTFT
    prefill_tok_s: float | None  # median, the engine's own (or the server's timings) where reported
    decode_tok_s: float | None  # median per-request decode rate
    requests_per_s: float | None
    aggregate_tok_s: float | None  # generated tokens per second of wall time, all requests together
    peak_memory_bytes: int | None = None  # the process's peak RSS (host runs)
    wall_s: float = 0.0
    predicted: Prediction = Field(default_factory=Prediction)
    measured_vs_predicted: Comparison = Field(default_factory=Comparison)


class SharedPrefixResult(_Strict):
    """One prompt length with its first `prefix_tokens` shared: cold (nothing cached) against warm."""

    prompt_len: int
    prefix_tokens: int
    cached_tokens: float | None  # mean reported as reused on warm requests (None: the server does not say)
    ttft_cold_s: Percentiles | None
    ttft_warm_s: Percentiles | None
    speedup: float | None  # cold TTFT p50 ÷ warm TTFT p50


class MemoryResult(_Strict):
    target_ctx: int
    peak_bytes: int | None = None  # the process's peak RSS over the run (host runs)
    predicted_bytes: int | None = None  # the planner's estimate at the target context
    headroom_bytes: int | None = None  # what the planner could still use with the model loaded
    headroom_device: str | None = None  # "CPU", "CUDA0", ...


class BenchReport(_Strict):
    schema_version: Literal[1] = 1  # SCHEMA_VERSION
    id: str  # "20261201-183000-SmolLM2-135M", also the file name
    created_at: str  # ISO 8601, UTC
    hearth_version: str
    duration_s: float
    model: ModelRecord
    weights: WeightsRecord
    engine: EngineRecord
    hardware: dict[str, Any]  # the HardwareProfile, as `hearth hw --json` prints it
    workload: Workload
    warmup_requests: int
    runs: int  # measured batches per cell
    cells: list[CellResult]
    shared_prefix: list[SharedPrefixResult] = Field(default_factory=list)
    memory: MemoryResult
    notes: list[str] = Field(default_factory=list)
    # Cancelled before the end: the cells measured so far (the last one maybe with fewer runs), no more.
    partial: bool = False

    def cell(self, prompt_len: int, concurrency: int) -> CellResult | None:
        return next((c for c in self.cells if (c.prompt_len, c.concurrency) == (prompt_len, concurrency)), None)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> BenchReport:
        """Parse and validate; pydantic's ValidationError (a ValueError) when it is not a report."""
        return cls.model_validate_json(text)


def report_schema() -> dict[str, Any]:
    """The published JSON schema of a report (what resources/schemas/bench-report.schema.json holds)."""
    schema = BenchReport.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def schema_text() -> str:
    return json.dumps(report_schema(), indent=2, sort_keys=True) + "\n"
