"""How an engine says no: each failure a kind with a code the API answers with, and a message for the user."""

from __future__ import annotations

from typing import Any

from app.core.errors import HearthError


class EngineError(HearthError):
    """An engine could not load or run; the message is for the user. `code` names the kind of failure
    for the API (its error codes), `details` carries numbers a client may want."""

    code = "engine_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class ContextLengthExceeded(EngineError):
    """The prompt (plus the room asked for the reply) does not fit the loaded context."""

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, n_ctx: int, requested_tokens: int = 0) -> None:
        wanted = f" plus {requested_tokens} for the reply" if requested_tokens else ""
        super().__init__(
            f"the prompt has {prompt_tokens} tokens{wanted} but the context holds {n_ctx}; shorten it or load "
            "the model with a longer context",
            prompt_tokens=prompt_tokens,
            n_ctx=n_ctx,
            requested_tokens=requested_tokens,
        )


# The most characters of prompt text an engine renders or tokenizes (the chat template's output cap is the same
# 2 M): tokenizing that many takes about 2 s on a 2-core CPU, so a pasted 50 MB string cannot hold the engine
# thread, and it is some 500k tokens, past nearly every context anyway.
MAX_PROMPT_CHARS = 2_000_000


class PromptTooLong(EngineError):
    """The prompt's text is over MAX_PROMPT_CHARS: refused before it is rendered or tokenized."""

    code = "context_length_exceeded"

    def __init__(self, chars: int, cap: int = MAX_PROMPT_CHARS) -> None:
        super().__init__(
            f"the prompt is {chars:,} characters, over the {cap:,}-character cap on one prompt; shorten it",
            prompt_chars=chars,
            max_chars=cap,
        )


class Unsupported(EngineError):
    """The loaded engine or model cannot do what the request asks (embeddings, a grammar, ...)."""

    code = "unsupported"


class InvalidRequest(EngineError):
    """The request is wrong for the loaded model (a token id outside its vocabulary, ...); `param` names
    the request field, for the API's error."""

    code = "invalid_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, param=param)
