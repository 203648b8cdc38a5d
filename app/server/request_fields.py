"""What every dialect's request body shares: its base (`RequestBase`), the bounds on messages, stop
sequences, tokens and ttl, and the JSON-schema output format both of OpenAI's APIs take. A dialect's own
fields are in its package's schemas.py."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core.runtime.jobs import keep_for
from app.server.request_text import MAX_PROMPT_CHARS, check_text

MAX_TOKENS_CAP = 1 << 20  # no context is longer; 10^9 is a mistake, not a request
MAX_MESSAGES = 10_000
MAX_STOP = 16
MAX_STOP_CHARS = 1024
FORBIDDEN = ("chat_template", "chat_template_kwargs")  # a template is code: only the model file's runs
MAX_TTL_S = 365 * 24 * 3600


class RequestBase(BaseModel):
    """The base of every request body: unknown fields dropped, as OpenAI-compatible servers do; no chat
    template taken from a request (T3); the whole body's text checked and capped; LM Studio's `ttl`."""

    model_config = ConfigDict(extra="ignore")
    # The most characters of text the body may hold: it all goes into one prompt (None: not one prompt).
    max_text_chars: ClassVar[int | None] = MAX_PROMPT_CHARS
    # LM Studio's: how many idle seconds the model stays loaded after this request (-1: for ever).
    ttl: int | None = Field(default=None, ge=-1, le=MAX_TTL_S)

    def ttl_s(self) -> float | None:
        return keep_for(self.ttl)

    @model_validator(mode="before")
    @classmethod
    def _no_template(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in FORBIDDEN:
                if name in data:
                    raise ValueError(f"{name} is not accepted: Hearth renders only the model's own chat template")
        return data

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        check_text(data, cls.max_text_chars)  # the whole body, fields the models ignore included
        return data


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(default="response", max_length=256)
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None
