"""OpenAI request bodies, as strict as the API is about types and bounds, as lenient as it is about
fields it does not know (clients send vendor extras; they are ignored, never an error). A chat template
is never taken from a request (T3)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from app.core.engines.base import SamplingParams
from app.core.engines.inputs.embed_limits import MAX_EMBED_INPUTS, MAX_EMBED_TOKENS
from app.server.replies import UINT32, route_sampling
from app.server.request_fields import (
    MAX_MESSAGES,
    MAX_STOP,
    MAX_STOP_CHARS,
    MAX_TOKENS_CAP,
    JsonSchemaFormat,
    RequestBase,
)

BIAS_LIMIT = 100
TOKEN_ID = re.compile(r"[0-9]{1,10}")
# Checked by a validator below, so every mistake in it is one 400 with param "logit_bias" (key errors
# would otherwise name the key); the schema still says what it takes.
LogitBias = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "token id (a decimal string) → a bias added to its logit, -100..100",
            "propertyNames": {"pattern": "^[0-9]{1,10}$"},
            "additionalProperties": {"type": "number", "minimum": -BIAS_LIMIT, "maximum": BIAS_LIMIT},
        }
    ),
]

TokenId = Annotated[int, Field(ge=0, lt=1 << 31)]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "input_text", "output_text"]
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str
    detail: Literal["auto", "low", "high"] | None = None  # the projector reads its own fixed size


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["image_url"]
    image_url: ImageURL | str  # some clients send the URL as a bare string

    def url(self) -> str:
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


class OtherPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=256)
    arguments: str = ""


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(default="", max_length=256)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | ImagePart | OtherPart] | None = None
    name: str | None = Field(default=None, max_length=256)
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)
    reasoning_content: str | None = None  # accepted from clients that echo it back; not re-sent to the model
    reasoning: str | None = None

    def text(self) -> str:
        """The message's text; parts other than text are refused by the route before this."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    def other_parts(self) -> list[str]:
        if isinstance(self.content, list):
            return [p.type for p in self.content if not isinstance(p, (TextPart, ImagePart))]
        return []


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    function: FunctionTool


class SamplingFields(RequestBase):
    """The sampling fields Chat Completions and Completions share (the Responses, Messages and Ollama bodies
    name theirs differently, with their own bounds)."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: LogitBias | None = None
    n: int | None = Field(default=None, ge=1, le=1, description="one choice per request")
    user: str | None = Field(default=None, max_length=256)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # llama.cpp's extras that clients of local servers send; honoured, not required.
    top_k: int | None = Field(default=None, ge=0, le=100_000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, ge=0.0, le=10.0)

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        items = [value] if isinstance(value, str) else value or []
        if len(items) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in items):
            raise ValueError(f"at most {MAX_STOP} stop sequences of up to {MAX_STOP_CHARS} characters")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _check_logit_bias(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        for key, bias in (value or {}).items():
            if not TOKEN_ID.fullmatch(key):
                raise ValueError(f"keys are token ids (decimal strings); {key[:40]!r} is not one")
            number = isinstance(bias, (int, float)) and not isinstance(bias, bool)
            if not number or abs(bias) > BIAS_LIMIT or not math.isfinite(bias):  # a huge int stops at abs
                raise ValueError(f"the bias for token {key} must be a number from -100 to 100")
        return value

    def stops(self) -> list[str]:
        items = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in items if s]

    def token_bias(self) -> dict[int, float]:
        """logit_bias with its keys as token ids (whether the model has them is the engine's check)."""
        return {int(key): float(bias) for key, bias in (self.logit_bias or {}).items()}

    def engine_sampling(self, max_tokens: int | None, logprobs: int | None = None) -> SamplingParams:
        """The engine's sampling for this body (what it cannot honour, like n > 1, the schema refuses).
        `logprobs`: the alternatives per token the reply shows (None: no logprobs)."""
        return route_sampling(
            self.temperature,
            self.top_p,
            max_tokens,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=None if self.seed is None else self.seed & UINT32,
            stop=self.stops(),
            logit_bias=self.token_bias(),
            logprobs=logprobs,
            top_k=self.top_k,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
        )


class ChatCompletionRequest(SamplingFields):
    model: str | None = Field(default=None, max_length=512)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_CAP)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_CAP)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20, description="needs logprobs: true")
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(default=None, max_length=512)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    reasoning_format: Literal["separate", "inline"] | None = None  # inline: <think> stays in content


class CompletionRequest(SamplingFields):
    model: str | None = Field(default=None, max_length=512)
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)]
    max_tokens: int | None = Field(default=16, ge=1, le=MAX_TOKENS_CAP)
    echo: Literal[False] = False
    logprobs: int | None = Field(default=None, ge=0, le=5, description="the top alternatives per token")
    # Fill in the middle: the text after the insertion point (the prompt is the text before); a model without
    # FIM tokens answers 400 unsupported.
    suffix: str | None = Field(default=None, description="the text after the completion (fill in the middle)")


class EmbeddingRequest(RequestBase):
    max_text_chars: ClassVar[int | None] = None  # many inputs, each its own prompt (the engine caps each)

    model: str | None = Field(default=None, max_length=512)
    # Text, or OpenAI token ids (one array, or one per input) that token_ids.py reads back into text.
    input: (
        str
        | Annotated[list[str], Field(min_length=1, max_length=MAX_EMBED_INPUTS)]
        | Annotated[list[TokenId], Field(min_length=1, max_length=MAX_EMBED_TOKENS)]
        | Annotated[
            list[Annotated[list[TokenId], Field(min_length=1, max_length=MAX_EMBED_TOKENS)]],
            Field(min_length=1, max_length=MAX_EMBED_INPUTS),
        ]
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    def texts(self) -> list[str] | None:
        """The inputs when they are text (None: they are token ids, see token_ids)."""
        if isinstance(self.input, str):
            return [self.input]
        return [t for t in self.input if isinstance(t, str)] if isinstance(self.input[0], str) else None

    def token_ids(self) -> list[list[int]]:
        """The inputs when they are token ids, one array an input."""
        if isinstance(self.input, str) or isinstance(self.input[0], str):
            return []
        if isinstance(self.input[0], int):
            return [[t for t in self.input if isinstance(t, int)]]
        return [t for t in self.input if isinstance(t, list)]
