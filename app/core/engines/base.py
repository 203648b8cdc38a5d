"""The engine interface: load, generate → chunks, tokenize, embed, capabilities (after simonw/llm).

An Engine is owned by exactly one thread (the EngineHost's); nothing here is thread-safe on purpose.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.core.engines.errors import MAX_PROMPT_CHARS, InvalidRequest, PromptTooLong
from app.core.tools.types import ToolCall

FinishReason = Literal["stop", "length", "cancelled", "error"]


class Capabilities(BaseModel):
    """What an engine can do. The registry holds each kind's (what any model of that format can get, read by
    decisions made before a load: the chat's plan, the API's resolver, `/v1/models`); a loaded engine's says
    the same for the model it runs (a reranker does not chat, a model without a projector sees no images)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat: bool = True
    completion: bool = True
    embeddings: bool = False
    rerank: bool = False  # scores (query, document) pairs: a reranker loaded with rank pooling
    grammar: bool = False  # GBNF grammars and JSON-schema constrained output
    tools: bool = False
    logprobs: bool = False  # SamplingParams.logprobs: per-token log-probabilities on the chunks
    vision: bool = False  # ChatMessage.images: a projector is loaded beside the weights
    # How the runtime may load it; declared by the kind, the same on each loaded engine of that kind.
    planned: bool = False  # the planner sizes its loads on this machine (context, GPU layers, slots)
    batches: bool = False  # several sequences share each decode step (slots > 1)
    draft_model: bool = False  # speculative decoding with a small draft model
    draft_alone: bool = False  # it drafts only on its single-stream path: a draft model means one slot
    ngram: bool = False  # n-gram (prompt-lookup) drafting
    llama_cpp_build: bool = False  # the planner's notes on the llama.cpp build apply


# LoadSpec.drafts_at_most without a draft_max.
AUTO_DRAFT_MAX = 64
FIXED_DRAFT_MAX = 16


class LoadSpec(BaseModel):
    """What to load and how. Engine-specific knobs live in `options` (validated by the engine)."""

    model_config = ConfigDict(extra="forbid")

    path: Path  # a GGUF file (first shard) or an MLX folder
    n_ctx: int = Field(4096, ge=16)
    n_gpu_layers: int = 0  # -1: all
    n_threads: int | None = None  # None: physical cores (never llama-cpp-python's cores // 2)
    n_batch: int = Field(512, ge=1)
    n_ubatch: int = Field(512, ge=1)
    flash_attn: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    use_mmap: bool = True
    use_mlock: bool = False
    # llama.cpp's extra CPU buffer types (weights repacked for the AMX or AVX2/NEON kernels). The native
    # canary turns them off where they crash (AMX on some Xeons); the planner then counts no repack copy.
    extra_bufts: bool = True
    embedding: bool = False
    # With embedding: how a sequence's hidden states become its one output. None: what the model declares
    # (else mean); "rank": a reranker's classification head scores the sequence (needs one in the file).
    pooling: Literal["mean", "cls", "last", "rank"] | None = None
    seed: int | None = None
    # The user's pick for this model (Settings.chat_templates, never a request's): a built-in format's name
    # (chat_formats.FORMATS, e.g. "gemma") or a template; None: the file's own, else its family's format.
    chat_template: str | None = None
    # Sequences decoded together in one context (continuous batching; engines that cannot batch run one).
    # 1 is the single-stream path; the planner (preflight.plan_model with max_slots) says how many fit.
    slots: int = Field(1, ge=1, le=64)
    # With slots: False gives each slot its own n_ctx cells (KV memory × slots; no other sequence's cells
    # among a sequence's own); True shares n_ctx cells among them (one slot's memory, llama-server's
    # default). Either way the rows decoded beside a sequence change its logits' last bits (llama.cpp's
    # kernels are not batch-invariant), so a near-tie can flip at temperature 0: see `deterministic`.
    kv_unified: bool = False
    # With slots: RAM for the states of conversations evicted from a slot, restored when they come back.
    prompt_cache_mib: int = Field(1024, ge=0)
    # With slots: speculative decoding (lossless: the output is what plain decoding gives). "ngram" drafts
    # from earlier occurrences of the last few tokens (the prompt and the reply); "draft" from a small model
    # with the same vocabulary; "auto" (or the draft model when one is set) cuts each n-gram draft to the
    # length expected to earn most, from the measured cost of a step by its tokens and the kept share of
    # earlier drafts by match length, and drafts nothing where nothing pays (draft_cost.py); "off" decodes
    # one token per step. Off unless asked: the planner asks for "auto" (preflight.PLANNED_SPECULATION).
    speculative: Literal["auto", "off", "ngram", "draft"] = "off"
    draft_model: Path | None = None  # a GGUF file
    # A vision projector (an mmproj GGUF) for the model's images; None: text only.
    projector: Path | None = None
    # Tokens drafted per sequence and step, at most; None: the mode's own (drafts_at_most).
    draft_max: int | None = Field(None, ge=1, le=64)
    # Replies that do not depend on what runs beside them: at temperature 0 (or with a seed) a prompt gets the
    # same tokens alone or among other requests, cached or not. llama.cpp's kernels give a token other last
    # bits in a batch of other rows, so each sequence is decoded on its own, prompts in whole aligned chunks,
    # with no drafts (speculative is then off) and no prompt cache but a slot's own (llamacpp.exact). Costs
    # the speed batching and drafting earn; needs kv_unified off.
    deterministic: bool = False

    @model_validator(mode="after")
    def _draft_needs_a_model(self) -> LoadSpec:
        if self.speculative == "draft" and self.draft_model is None:
            raise ValueError('speculative="draft" needs a draft_model')
        if self.pooling is not None and not self.embedding:
            raise ValueError("pooling applies to a load for embeddings (embedding=True)")
        if self.deterministic and self.kv_unified and self.slots > 1:
            raise ValueError("deterministic replies need each slot's own KV cells (kv_unified=False)")
        return self

    def drafts_at_most(self) -> int:
        """`draft_max`, or the mode's own: "auto" by prompt lookup cuts each draft to what it is expected to
        earn, so it may look as far as llama-server's ngram-mod drafts (64: a file handed back with one
        change decoded 1.93x plain against 1.67x at 16, SmolLM2 on a 2-core CPU); a fixed n-gram or a
        draft model drafts that many every step, so 16."""
        if self.draft_max is not None:
            return self.draft_max
        return AUTO_DRAFT_MAX if self.speculative == "auto" and self.draft_model is None else FIXED_DRAFT_MAX


class ImageInput(BaseModel):
    """An image in a message: its file's bytes (PNG, JPEG, WebP, GIF, BMP; decoded and bounded by the engine,
    images.py) and where it sits in the message's text, as a character offset."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64")

    data: bytes = Field(repr=False)
    offset: int = Field(0, ge=0)
    # An image a request named by http(s) URL, `data` empty: the API server fetches it (when its settings
    # allow) before the job is queued; an engine never sees one, and would refuse it as empty.
    url: str | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _from_base64(cls, value: Any) -> Any:
        """A stored conversation (model_dump(mode="json")) keeps the bytes as base64 text."""
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""  # may be empty for an assistant turn that only calls tools
    # Images in this turn, in order of their offsets into `content` (engines without vision refuse them).
    images: list[ImageInput] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # assistant turns: the calls it made
    tool_call_id: str | None = None  # tool turns: the call this result answers


MAX_LOGPROBS = 20  # top alternatives per token, OpenAI's bound
LOGIT_BIAS_LIMIT = 100.0


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.7, ge=0.0, le=5.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    top_k: int = Field(40, ge=0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    repeat_penalty: float = Field(1.0, ge=0.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)  # None: until the context is full
    stop: list[str] = Field(default_factory=list)
    # Added to the model's logits before any sampler (-100 bans a token in practice, +100 forces it).
    logit_bias: dict[int, Annotated[float, Field(ge=-LOGIT_BIAS_LIMIT, le=LOGIT_BIAS_LIMIT)]] = Field(
        default_factory=dict
    )
    # None: off. n: each token chunk carries the sampled token's logprob and the n most likely alternatives.
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


def check_logit_bias(bias: dict[int, float], n_vocab: int) -> None:
    """Engines call this before generating: a bias on a token the model does not have is the caller's error."""
    bad = sorted(t for t in bias if not 0 <= t < n_vocab)
    if bad:
        raise InvalidRequest(
            f"logit_bias names token {bad[0]}, outside this model's vocabulary (0..{n_vocab - 1})", "logit_bias"
        )


class GenerateRequest(BaseModel):
    """Either `messages` (rendered with the model's template) or a raw `prompt`."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] | None = None
    prompt: str | None = None
    # Fill in the middle: with a raw `prompt` (the text before), the text after; the engine wraps both in the
    # model's FIM tokens (fill_in_middle) or refuses when it has none.
    suffix: str | None = None
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    json_schema: dict[str, Any] | None = None
    schema_field: str = "json_schema"  # where the schema sits in the caller's request: errors name it
    grammar: str | None = None  # GBNF
    # OpenAI function tools ({"type": "function", "function": {"name", "description", "parameters"}}),
    # rendered into the chat template (app.core.tools.plan_tools checks them and builds the grammar).
    tools: list[dict[str, Any]] | None = None
    conversation_id: str | None = None  # a hint for prefix reuse across turns
    # Control tokens whose text the output keeps (others render as nothing): the markers a tool-call or
    # reasoning parser reads, like "[TOOL_CALLS]" or "<|python_tag|>".
    visible_tokens: list[str] | None = None


def prompt_chars(request: GenerateRequest) -> int:
    """The characters of text `request` puts into its prompt: what its render and tokenizer will read."""
    if request.prompt is not None:
        return len(request.prompt) + len(request.suffix or "")
    n = sum(len(json.dumps(tool)) for tool in request.tools or ())
    for m in request.messages or ():
        n += len(m.content) + len(m.name or "")
        n += sum(len(c.name) + len(c.arguments) for c in m.tool_calls or ())
    return n


def check_prompt_size(request: GenerateRequest) -> None:
    """Engines call this before rendering or tokenizing: a prompt over MAX_PROMPT_CHARS is the caller's error."""
    chars = prompt_chars(request)
    if chars > MAX_PROMPT_CHARS:
        raise PromptTooLong(chars)


def utf8(text: str) -> bytes:
    """`text` as a native tokenizer takes it. A lone UTF-16 surrogate (JSON's "\\ud800") is a str to Python
    but has no UTF-8 form: the caller's error, not the engine's."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(text[exc.start])
        raise InvalidRequest(
            f"the prompt holds a lone UTF-16 surrogate (U+{bad:04X}) at character {exc.start}, which is not text"
        ) from None


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prompt_tokens_evaluated: int = 0  # after prefix reuse
    time_to_first_token_s: float = 0.0
    prompt_tok_s: float = 0.0
    generated_tokens: int = 0
    decode_tok_s: float = 0.0
    peak_memory_bytes: int = 0
    # Speculative decoding: tokens proposed by a draft (n-gram lookup or a draft model), and how many of
    # them the model's own sampling kept.
    draft_tokens: int = 0
    draft_accepted: int = 0
    # Vision: images encoded for this request (a cached one is not), the seconds that took in all, and of
    # those the image encoder's (the rest is the model reading the image's embeddings).
    images_encoded: int = 0
    image_s: float = 0.0
    image_encode_s: float = 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Share of drafted tokens kept; None when nothing was drafted."""
        return self.draft_accepted / self.draft_tokens if self.draft_tokens else None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token and its log-probability. `token` is bytes: a token may end inside a UTF-8 character."""

    id: int
    token: bytes
    logprob: float

    @property
    def text(self) -> str:
        return self.token.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Logprobs:
    """A generated token's logprob under the model's own distribution at that position (its raw logits,
    before logit_bias, penalties and samplers: what OpenAI and llama-server report), and the `top`
    most likely tokens there, most likely first."""

    sampled: TokenLogprob
    top: tuple[TokenLogprob, ...] = ()


@dataclass
class Chunk:
    """One step of a generation; the last chunk has `finish_reason` and `stats`. A token's chunk carries
    `logprobs` when the request asked for them; its `text` may lag (held back while it could start a stop
    string or ends mid-character)."""

    text: str = ""
    token: int | None = None
    finish_reason: FinishReason | None = None
    stats: GenerationStats | None = None
    error: str | None = None
    error_code: str | None = None  # with `error`: the failure's kind for the API (a job failure code)
    logprobs: Logprobs | None = None
    stop_sequence: str | None = None  # on the last chunk: the stop string that ended the reply, if one did


@dataclass
class ModelInfo:
    path: Path
    format: str  # "gguf", "mlx"
    n_ctx: int
    n_vocab: int = 0
    chat_template: str | None = None
    template_notice: str | None = None  # e.g. "no chat template in the model; using ChatML"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Embeddings:
    vectors: list[list[float]]  # one unit-length vector per input, in order
    prompt_tokens: int = 0  # tokens embedded, for usage


@dataclass
class Rankings:
    scores: list[float]  # one relevance score per document, in the documents' order (higher: more relevant)
    prompt_tokens: int = 0  # tokens of every (query, document) pair scored, for usage


class SequenceRunner(Protocol):
    """What a batched engine gives the host: sequences admitted into free slots, all advanced together.

    Owned by the host thread like the engine. `admit` raises EngineError for a bad request before
    anything runs; `step` decodes one batch and returns the chunks it produced, keyed by the value
    `admit` returned; a key's last chunk has `finish_reason`, after which its slot is free.
    """

    def free_slots(self) -> int: ...

    def active(self) -> int: ...

    def can_admit(self, request: GenerateRequest) -> bool:
        """Whether the request can start now. False keeps it at the head of the queue until running ones
        end: no slot is free, or it must run alone (a feature the engine cannot batch) and others run."""
        ...

    def admit(self, request: GenerateRequest, cancel: Any) -> object: ...

    def step(self) -> list[tuple[object, Chunk]]: ...

    def shared(self, key: object) -> bool:
        """Whether the sequence ran beside others at any step (its speed is not a single stream's)."""
        ...


class NativeMarks(Protocol):
    """Where an engine that runs native code marks a run in flight, so a crash during it is attributed to
    the configuration that ran (canary/inflight.NativeActivity). Called on the engine's owner thread."""

    def begin(self, phase: str) -> None: ...

    def end(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    name: str  # "llama.cpp", "mlx"
    format: str  # the model format it loads: "gguf", "mlx"
    capabilities: Capabilities
    info: ModelInfo | None

    # Optional abilities: every engine declares them, None where it has none; nothing probes for them.
    @property
    def sequences(self) -> SequenceRunner | None:
        """The batched path (several sequences advanced by one decode step), else None: the host then runs
        `generate` one request at a time."""
        ...

    @property
    def native_activity(self) -> NativeMarks | None:
        """Marks for the crash canary while native code runs, else None (no native code, or not loaded)."""
        ...

    def load(self, spec: LoadSpec) -> ModelInfo: ...

    def unload(self) -> None: ...

    def generate(self, request: GenerateRequest, cancel: threading.Event) -> Iterator[Chunk]:
        """Yield chunks; check `cancel` between tokens and between prompt batches."""
        ...

    def tokenize(self, text: str, *, special: bool = False) -> list[int]: ...

    def count_tokens(self, request: GenerateRequest) -> int:
        """Prompt tokens the request would use (after the chat template)."""
        ...

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        """One vector per input; check the bounds in embed_limits before tokenizing, and `cancel` between inputs."""
        ...

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        """One score per document for its relevance to `query`; engines or models that cannot rank raise
        Unsupported. Check the bounds in rerank_limits before tokenizing, and `cancel` between documents."""
        ...
