"""What a Responses API reply is on the wire: output items made from the reply's segments (reasoning,
message, function_call / custom_tool_call), the response object around them, and the stream's events,
each with a strictly increasing `sequence_number`. The item a stream adds is the item it finishes and
the item the final response lists: same type, id and call_id."""

from __future__ import annotations

from typing import Any

from app.core.engines.base import ChatMessage, Chunk, GenerationStats
from app.core.tools import ToolCall
from app.server.replies import new_id, usage
from app.server.responses.input import Tools
from app.server.segments import Appended, Closed, Op, Opened, Segment


def response_usage(stats: GenerationStats | None) -> dict[str, Any]:
    u = usage(stats)
    return {
        "input_tokens": u["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]["cached_tokens"]},
        "output_tokens": u["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u["total_tokens"],
    }


class Output:
    """One response's items, ids and envelope; the same object answers a stream and a whole reply."""

    def __init__(self, envelope: dict[str, Any], tools: Tools) -> None:
        self.envelope = envelope  # id, created_at, model and the request's echoed settings
        self.tools = tools
        self._ids: dict[int, str] = {}
        self._seq = -1
        self.items: list[dict[str, Any]] = []

    # ---- items ----

    def item_id(self, segment: Segment) -> str:
        if segment.index not in self._ids:
            prefix = {"reasoning": "rs_", "text": "msg_"}.get(segment.kind)
            if prefix is None:
                prefix = "ctc_" if segment.name in self.tools.custom else "fc_"
            self._ids[segment.index] = new_id(prefix)
        return self._ids[segment.index]

    def item(self, segment: Segment, status: str = "completed") -> dict[str, Any]:
        """The output item for a segment; in progress, it is the skeleton a stream adds."""
        done = status != "in_progress"
        base = {"id": self.item_id(segment)}
        if segment.kind == "reasoning":
            content = [{"type": "reasoning_text", "text": segment.text}] if done else []
            return {**base, "type": "reasoning", "summary": [], "content": content, "status": status}
        if segment.kind == "text":
            content = [self.text_part(segment.text)] if done else []
            return {**base, "type": "message", "status": status, "role": "assistant", "content": content}
        name, namespace = self.tools.wire(segment.name)
        where = {"namespace": namespace} if namespace else {}
        if segment.name in self.tools.custom:
            call = ToolCall(id=segment.call_id, name=segment.name, arguments=segment.text or "{}")
            text = self.tools.custom_input(call) if done else ""
            return {
                **base,
                "type": "custom_tool_call",
                "call_id": segment.call_id,
                "name": name,
                **where,
                "input": text,
            }
        arguments = segment.text if done else ""
        return {
            **base,
            "type": "function_call",
            "call_id": segment.call_id,
            "name": name,
            **where,
            "arguments": arguments,
            "status": status,
        }

    @staticmethod
    def text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def assistant_turn(self, segments: list[Segment]) -> ChatMessage | None:
        """What this reply adds to the conversation a later `previous_response_id` continues."""
        text = "".join(s.text for s in segments if s.kind == "text")
        calls = [ToolCall(id=s.call_id, name=s.name, arguments=s.text or "{}") for s in segments if s.kind == "tool"]
        if not text and not calls:
            return None
        return ChatMessage(role="assistant", content=text, tool_calls=calls or None)

    # ---- the response ----

    def response(self, status: str, final: Chunk | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            **self.envelope,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "output": list(self.items),
            "usage": response_usage(final.stats) if final is not None else None,
        }

    def finished(self, segments: list[Segment], final: Chunk) -> dict[str, Any]:
        """The whole response, once the reply is over (stream or not)."""
        status = "incomplete" if final.finish_reason == "length" else "completed"
        self.items = [
            self.item(s, "incomplete" if status == "incomplete" and s is segments[-1] else "completed")
            for s in segments
        ]
        return self.response(status, final)

    # ---- stream events ----

    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        self._seq += 1
        return {"type": type_, "sequence_number": self._seq, **fields}

    def events(self, ops: list[Op]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for op in ops:
            segment = op.segment
            at = {"output_index": segment.index, "item_id": self.item_id(segment)}
            custom = segment.kind == "tool" and segment.name in self.tools.custom
            if isinstance(op, Opened):
                skeleton = self.item(segment, "in_progress")
                out.append(self.event("response.output_item.added", output_index=segment.index, item=skeleton))
                if segment.kind == "text":
                    out.append(
                        self.event("response.content_part.added", **at, content_index=0, part=self.text_part(""))
                    )
                elif segment.kind == "reasoning":
                    part = {"type": "reasoning_text", "text": ""}
                    out.append(self.event("response.content_part.added", **at, content_index=0, part=part))
            elif isinstance(op, Appended):
                if segment.kind == "text":
                    out.append(
                        self.event("response.output_text.delta", **at, content_index=0, delta=op.text, logprobs=[])
                    )
                elif segment.kind == "reasoning":
                    out.append(self.event("response.reasoning_text.delta", **at, content_index=0, delta=op.text))
                elif not custom:  # a custom tool's input is JSON inside until the call is whole
                    out.append(self.event("response.function_call_arguments.delta", **at, delta=op.text))
            elif isinstance(op, Closed):
                item = self.item(segment)
                if segment.kind == "text":
                    out.append(
                        self.event("response.output_text.done", **at, content_index=0, text=segment.text, logprobs=[])
                    )
                    part = self.text_part(segment.text)
                    out.append(self.event("response.content_part.done", **at, content_index=0, part=part))
                elif segment.kind == "reasoning":
                    out.append(self.event("response.reasoning_text.done", **at, content_index=0, text=segment.text))
                    part = {"type": "reasoning_text", "text": segment.text}
                    out.append(self.event("response.content_part.done", **at, content_index=0, part=part))
                elif custom:
                    if item["input"]:
                        out.append(self.event("response.custom_tool_call_input.delta", **at, delta=item["input"]))
                    out.append(self.event("response.custom_tool_call_input.done", **at, input=item["input"]))
                else:
                    done = {"arguments": segment.text, "name": item["name"]}
                    out.append(self.event("response.function_call_arguments.done", **at, **done))
                self.items.append(item)
                out.append(self.event("response.output_item.done", output_index=segment.index, item=item))
        return out
