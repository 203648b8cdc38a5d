"""Hearth's requests as OpenAI Chat Completions bodies, and a remote's SSE stream back as Hearth's chunk
text. Chunks carry text only, and Hearth's own output parser splits reasoning and tool calls out of that
text for every surface (chat, the APIs); so what the remote already split comes back in the markup that
parser reads by default: reasoning inside <think>…</think>, each call as a Hermes <tool_call> block."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.core.engines.base import ChatMessage, FinishReason, GenerateRequest, GenerationStats
from app.core.engines.errors import Unsupported
from app.core.engines.remote.errors import RemoteError, RemoteRefused

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
# Servers known to take llama.cpp's extra samplers (others may refuse unknown fields).
EXTRA_SAMPLERS = ("hearth", "vllm", "sglang", "llama-server")


def message_json(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
        out["content"] = m.content or None
    if m.role == "tool" and m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def request_body(request: GenerateRequest, model: str, kind: str) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of the streamed request for `request`; Unsupported for what a remote cannot take."""
    if request.grammar is not None:
        raise Unsupported("a remote server takes no GBNF grammar (a JSON schema works)")
    sp = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": sp.temperature,
        "top_p": sp.top_p,
    }
    if sp.max_tokens is not None:
        body["max_tokens"] = sp.max_tokens
    if sp.stop:
        body["stop"] = sp.stop
    if sp.seed is not None:
        body["seed"] = sp.seed
    if sp.presence_penalty:
        body["presence_penalty"] = sp.presence_penalty
    if sp.frequency_penalty:
        body["frequency_penalty"] = sp.frequency_penalty
    if sp.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in sp.logit_bias.items()}
    if kind in EXTRA_SAMPLERS:
        body.update(top_k=sp.top_k, min_p=sp.min_p)
    if request.messages is None:
        body["prompt"] = request.prompt or ""
        return "/v1/completions", body
    body["messages"] = [message_json(m) for m in request.messages]
    if request.tools:
        body["tools"] = request.tools
    if request.json_schema is not None:
        if request.json_schema == {"type": "object"}:
            body["response_format"] = {"type": "json_object"}
        else:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": request.json_schema},
            }
    return "/v1/chat/completions", body


def http_error(remote: str, response: httpx.Response) -> RemoteError:
    """The remote's refusal, with its own message and, where it maps, the API's failure kind."""
    message = ""
    code = None
    try:
        body = response.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message") or "")
            code = err.get("code") if isinstance(err.get("code"), str) else None
        elif isinstance(err, str):
            message = err
        elif isinstance(body, dict) and isinstance(body.get("detail"), str):
            message = body["detail"]
    except ValueError:
        message = response.text[:300]
    status = response.status_code
    text = f"the remote {remote} answered {status}" + (f": {message}" if message else "")
    if status in (401, 403):
        return RemoteRefused(f"the remote {remote} refused the API key ({status}); check the key for this remote")
    if code == "context_length_exceeded":
        return RemoteError(text, "context_length_exceeded")
    if status == 404:
        return RemoteError(text, "model_not_found")
    if status in (429, 503):
        return RemoteError(text, "busy")
    if 400 <= status < 500:
        return RemoteError(text, "invalid_request")
    return RemoteError(text)


def sse_data(line: str) -> str | None:
    """The data of one SSE line; None for comments (pings), blank lines and other fields."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class ReplyDecoder:
    """Folds a remote's stream chunks into Hearth chunk text, and keeps its finish reason and usage."""

    remote: str
    chat: bool = True
    finish: FinishReason | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    pieces: int = 0  # deltas with text: the generated tokens when the server sends no usage
    _in_reasoning: bool = False
    _calls: dict[int, _Call] = field(default_factory=dict)

    def feed(self, obj: Any) -> str:
        """The text one stream chunk adds; raises RemoteError for an error event."""
        if not isinstance(obj, dict):
            return ""
        if "error" in obj:
            err = obj["error"]
            message = err.get("message") if isinstance(err, dict) else err
            code = err.get("code") if isinstance(err, dict) and isinstance(err.get("code"), str) else None
            raise RemoteError(f"the remote {self.remote} failed mid-reply: {message}", code)
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        if isinstance(obj.get("timings"), dict):
            self.timings = obj["timings"]
        out: list[str] = []
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if self.chat:
                self._delta(choice.get("delta") or {}, out)
            elif choice.get("text"):
                out.append(str(choice["text"]))
            reason = choice.get("finish_reason")
            if reason:
                self.finish = "length" if reason == "length" else "stop"
        if out:
            self.pieces += 1
        return "".join(out)

    def _delta(self, delta: dict[str, Any], out: list[str]) -> None:
        # vLLM and SGLang name it reasoning_content (newer vLLM: reasoning); llama-server and Hearth too.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if not self._in_reasoning:
                out.append(THINK_OPEN)
                self._in_reasoning = True
            out.append(reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(self._end_reasoning())
            out.append(content)
        for part in delta.get("tool_calls") or []:
            if not isinstance(part, dict):
                continue
            call = self._calls.setdefault(int(part.get("index") or 0), _Call())
            call.id = call.id or str(part.get("id") or "")
            fn = part.get("function") or {}
            call.name += str(fn.get("name") or "")
            call.arguments += str(fn.get("arguments") or "")

    def _end_reasoning(self) -> str:
        if self._in_reasoning:
            self._in_reasoning = False
            return THINK_CLOSE
        return ""

    def close(self) -> str:
        """The text that ends the reply: a reasoning block left open, then the calls as whole blocks."""
        out = [self._end_reasoning()]
        for index in sorted(self._calls):
            call = self._calls.pop(index)
            try:
                arguments: Any = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = call.arguments  # as the server sent it; the parser reports it unparsable
            out.append(f"{CALL_OPEN}\n{json.dumps({'name': call.name, 'arguments': arguments})}\n{CALL_CLOSE}")
        return "".join(out)

    def stats(self, t0: float, t_first: float | None, t_end: float) -> GenerationStats:
        """The server's usage (and llama-server/Hearth timings), else what was measured here."""
        usage, tim = self.usage or {}, self.timings or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        generated = int(usage.get("completion_tokens") or self.pieces)
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        ttft = (t_first - t0) if t_first is not None else 0.0
        span = t_end - t_first if t_first is not None else 0.0
        decode = float(tim.get("predicted_per_second") or 0.0)
        if decode <= 0 and generated > 1 and span > 0:
            decode = (generated - 1) / span
        prefill = float(tim.get("prompt_per_second") or 0.0)
        if prefill <= 0 and ttft > 0:
            prefill = max(prompt - cached, 0) / ttft
        return GenerationStats(
            prompt_tokens=prompt,
            prompt_tokens_evaluated=max(prompt - cached, 0),
            time_to_first_token_s=ttft,
            prompt_tok_s=prefill,
            generated_tokens=generated,
            decode_tok_s=decode,
        )
