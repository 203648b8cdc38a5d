"""What a benchmark runs: prompt lengths × concurrency levels, runs per cell, warm-up, context, a shared
prefix and the sampling; and the named presets the Benchmark page lists."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_PROMPT_LEN = 1_048_576
MAX_CONCURRENCY = 256


class BenchSampling(BaseModel):
    """Greedy by default: the same tokens every run, so runs differ only in timing."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(1, ge=0)
    seed: int = 0


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_lens: list[int] = Field(default_factory=lambda: [128, 512, 2048])  # prompt tokens per cell
    gen_len: int = Field(128, ge=1, le=65536)  # max_tokens of every request
    concurrency: list[int] = Field(default_factory=lambda: [1])  # requests in flight at once
    runs: int = Field(3, ge=1, le=1000)  # measured batches per cell (a batch is `concurrency` requests)
    warmup: int = Field(1, ge=0, le=100)  # unmeasured requests before each prompt length's cells
    ctx: int | None = Field(None, ge=16)  # the context to load with; None: enough for the longest cell
    shared_prefix: int = Field(0, ge=0)  # tokens of a system prompt every request of a cell shares
    sampling: BenchSampling = Field(default_factory=BenchSampling)
    streaming: bool = True  # endpoints: stream (TTFT is measured only then); the host always streams
    preset: str | None = None  # the preset this came from, for the report's reader

    @field_validator("prompt_lens")
    @classmethod
    def _lens(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("give at least one prompt length")
        if any(n < 1 or n > MAX_PROMPT_LEN for n in v):
            raise ValueError(f"prompt lengths must be between 1 and {MAX_PROMPT_LEN} tokens")
        return sorted(set(v))

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("give at least one concurrency level")
        if any(n < 1 or n > MAX_CONCURRENCY for n in v):
            raise ValueError(f"concurrency levels must be between 1 and {MAX_CONCURRENCY}")
        return sorted(set(v))

    @model_validator(mode="after")
    def _fits(self) -> Self:
        if self.ctx is not None and self.ctx < self.needed_ctx:
            raise ValueError(
                f"a context of {self.ctx} cannot hold the longest prompt ({max(self.prompt_lens)}) plus "
                f"{self.gen_len} generated tokens; use --ctx {self.needed_ctx} or more"
            )
        return self

    @property
    def needed_ctx(self) -> int:
        """The smallest context every cell fits in (prompt + generation + a little template slack)."""
        return max(self.prompt_lens) + self.gen_len + 16

    @property
    def target_ctx(self) -> int:
        return self.ctx or _round_up(self.needed_ctx)

    @property
    def cells(self) -> list[tuple[int, int]]:
        """(prompt_len, concurrency) in the order they run: short prompts first, then more users."""
        return [(p, c) for p in self.prompt_lens for c in self.concurrency]

    @property
    def prefix_lens(self) -> list[int]:
        """Prompt lengths with room for a shared prefix and something after it."""
        return [p for p in self.prompt_lens if 0 < self.shared_prefix < p] if self.shared_prefix else []

    def total_requests(self) -> int:
        measured = sum(c * self.runs for _, c in self.cells)
        return self.warmup * len(self.prompt_lens) + measured + 2 * self.runs * len(self.prefix_lens)


def _round_up(n: int, step: int = 256) -> int:
    return -(-n // step) * step


PRESETS: dict[str, Workload] = {
    # A question and a reply: short prompts, one user.
    "chat": Workload(prompt_lens=[128, 512], gen_len=128, concurrency=[1], runs=3, warmup=1, preset="chat"),
    # Summarising a long text: prefill dominates.
    "long document": Workload(
        prompt_lens=[2048, 8192], gen_len=256, concurrency=[1], runs=2, warmup=1, ctx=8192 + 512, preset="long document"
    ),
    # Coding agents send the same big system prompt every turn: what a cached prefix saves.
    "agent with a big system prompt": Workload(
        prompt_lens=[8192],
        gen_len=128,
        concurrency=[1],
        runs=3,
        warmup=1,
        shared_prefix=6144,
        ctx=8192 + 256,
        preset="agent with a big system prompt",
    ),
    # Four people (or tools) at once on one model: what queueing costs each of them.
    "4 users": Workload(prompt_lens=[512], gen_len=128, concurrency=[1, 4], runs=2, warmup=1, preset="4 users"),
}


def preset(name: str) -> Workload:
    """The preset called `name` ("long document", "long-document" and "Long_Document" alike); else KeyError
    naming the presets."""
    key = " ".join(name.replace("-", " ").replace("_", " ").lower().split())
    if key not in PRESETS:
        raise KeyError(f"no preset {name!r}; the presets are: {', '.join(PRESETS)}")
    return PRESETS[key].model_copy(deep=True)


def parse_int_list(text: str, what: str = "value") -> list[int]:
    """`"128,512, 2048"` → [128, 512, 2048]; a clear ValueError for anything else."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ValueError(f"{what}: expected comma-separated whole numbers like 128,512, got {text!r}")
    out = []
    for p in parts:
        try:
            n = int(p)
        except ValueError:
            raise ValueError(f"{what}: {p!r} is not a whole number (expected e.g. 128,512)") from None
        if n < 1:
            raise ValueError(f"{what}: {n} must be at least 1")
        out.append(n)
    return out
