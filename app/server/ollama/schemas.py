"""Ollama's request bodies (its `/api/...` routes), with the bounds the OpenAI routes keep: the same text
caps, stop limits and no template from a request (T3). Unknown fields and options are ignored, as Ollama
does; a known option of the wrong type is a 400 naming it."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.core.runtime.jobs import keep_for
from app.server.request_fields import MAX_MESSAGES, MAX_STOP, MAX_STOP_CHARS, MAX_TOKENS_CAP, MAX_TTL_S, RequestBase

# Go's time.Duration strings as Ollama parses keep_alive: "5m", "1h30m", "250ms", "-1m".
_DURATION = re.compile(r"(-?)((?:\d+(?:\.\d*)?(?:ns|us|µs|ms|s|m|h))+)")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_s(value: float | str | None) -> float | None:
    """Seconds from a keep_alive (a number of seconds or a duration string); negative means for ever.
    Raises ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError("keep_alive must be a finite number of seconds or a duration such as 5m")
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"keep_alive {text[:40]!r} is not a duration such as 30s, 5m or 1h")
    seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(match.group(2)))
    return -seconds if match.group(1) else seconds


class OllamaOptions(BaseModel):
    """The `options` Hearth honours; the rest of Ollama's (num_gpu, num_thread, mirostat, …) are accepted
    and ignored, since Hearth plans those itself."""

    model_config = ConfigDict(extra="ignore")

    num_ctx: int | None = Field(default=None, ge=1, le=MAX_TOKENS_CAP)
    num_predict: int | None = Field(default=None, ge=-2, le=MAX_TOKENS_CAP)  # -1: no limit; -2: fill the context
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=100_000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, ge=0.0, le=10.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: list[str] | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _check_stop(cls, value: Any) -> Any:
        items = [value] if isinstance(value, str) else value or []
        if not isinstance(items, list):  # a number or true: the type check after this names it (a 400)
            return value
        if len(items) > MAX_STOP or any(isinstance(s, str) and len(s) > MAX_STOP_CHARS for s in items):
            raise ValueError(f"at most {MAX_STOP} stop sequences of up to {MAX_STOP_CHARS} characters")
        return items

    @field_validator("num_predict")
    @classmethod
    def _some_tokens(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("num_predict 0 asks for no tokens; give a count, or -1 for no limit")
        return value

    def max_tokens(self) -> int | None:
        return self.num_predict if self.num_predict is not None and self.num_predict >= 0 else None


class _OllamaRequest(RequestBase):
    model: str = Field(min_length=1, max_length=512)
    keep_alive: float | str | None = None
    # LM Studio's ttl is not Ollama's; keep_alive says the same here.
    ttl: None = Field(default=None, exclude=True)

    @field_validator("keep_alive")
    @classmethod
    def _check_keep_alive(cls, value: float | str | None) -> float | str | None:
        seconds = keep_alive_s(value)
        if seconds is not None and seconds > MAX_TTL_S:
            raise ValueError("keep_alive is at most a year; a negative value keeps the model loaded for ever")
        return value

    @model_validator(mode="before")
    @classmethod
    def _name_is_model(cls, data: Any) -> Any:
        # Ollama's older clients send the model as `name`.
        if isinstance(data, dict) and "model" not in data and isinstance(data.get("name"), str):
            return {**data, "model": data["name"]}
        return data

    def ttl_s(self) -> float | None:
        return keep_for(keep_alive_s(self.keep_alive))


class GenerationFields(_OllamaRequest):
    """What `/api/chat` and `/api/generate` both take."""

    stream: bool = True  # Ollama streams unless told not to
    options: OllamaOptions = Field(default_factory=OllamaOptions)
    format: Literal["", "json"] | dict[str, Any] | None = None
    think: bool | Literal["low", "medium", "high"] | None = None

    @field_validator("options", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class OllamaFunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(max_length=256)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class OllamaToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str | None = Field(default=None, max_length=256)
    function: OllamaFunctionCall


class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = Field(default=None, max_length=256)
    tool_call_id: str | None = Field(default=None, max_length=256)
    thinking: str | None = None  # echoed back by clients; not re-sent to the model


class OllamaTool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    function: dict[str, Any]


class OllamaChatRequest(GenerationFields):
    messages: list[OllamaMessage] = Field(default_factory=list, max_length=MAX_MESSAGES)
    tools: list[OllamaTool] | None = None
    # Hearth's extension, OpenAI's values ("auto", "none", "required" or one function): Ollama has no way to
    # force a call, which agents with small models need.
    tool_choice: str | dict[str, Any] | None = None


class OllamaGenerateRequest(GenerationFields):
    prompt: str = ""
    system: str | None = None
    suffix: str | None = None
    raw: bool = False
    images: list[str] | None = None
    context: list[int] | None = None  # the old conversation memory: answered with 400, it is deprecated
    template: str | None = None  # refused when set: a template is code (T3)


class OllamaEmbedRequest(_OllamaRequest):
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1, le=1 << 16)
    options: OllamaOptions | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class OllamaEmbeddingsRequest(_OllamaRequest):
    prompt: str = ""
    options: OllamaOptions | None = None


class OllamaModelName(_OllamaRequest):
    """`/api/show` and `/api/delete`: the model (or, from old clients, `name`)."""

    max_text_chars = None
    verbose: bool = False
