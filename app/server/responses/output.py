"""What a Responses API reply is on the wire: output items made from the reply's segments (reasoning,
message, function_call / custom_tool_call), the response object around them, and the stream's events,
each with a strictly increasing `sequence_number`. The item a stream adds is the item it finishes and
the item the final response lists: same type, id and call_id."""

from __future__ import annotations

from collections.abc import Callable
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

    def __init__(
        self,
        envelope: dict[str, Any],
        tools: Tools,
        lead: list[dict[str, Any]] | None = None,
        annotate: Callable[[str], list[dict[str, Any]]] | None = None,
    ) -> None:
        """`lead`: items the server made before the reply (a file_search_call), first in the output;
        `annotate(text)`: the annotations of the reply's finished text (file citations)."""
        self.envelope = envelope  # id, created_at, model and the request's echoed settings
        self.tools = tools
        self.lead = lead or []
        self.annotate = annotate or (lambda _text: [])
        self._ids: dict[int, str] = {}
        self._seq = -1
        self.items: list[dict[str, Any]] = []

    def at(self, segment: Segment) -> int:
        """A segment's output_index: after the lead items."""
        return segment.index + len(self.lead)

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
            content = [self.text_part(segment.text, self.annotate(segment.text))] if done else []
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
    def text_part(text: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": []}

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
        self.items = [*self.lead] + [
            self.item(s, "incomplete" if status == "incomplete" and s is segments[-1] else "completed")
            for s in segments
        ]
        return self.response(status, final)

    # ---- stream events ----

    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        self._seq += 1
        return {"type": type_, "sequence_number": self._seq, **fields}

    def lead_events(self) -> list[dict[str, Any]]:
        """A stream's events for the lead items, which are done before the reply starts: a file_search_call
        is added, in progress, searching, completed and done, as OpenAI's server streams one."""
        out: list[dict[str, Any]] = []
        for index, item in enumerate(self.lead):
            out.append(self.event("response.output_item.added", output_index=index, item=_in_progress(item)))
            if item["type"] == "file_search_call":
                for phase in ("in_progress", "searching", "completed"):
                    name = f"response.file_search_call.{phase}"
                    out.append(self.event(name, output_index=index, item_id=item["id"]))
            self.items.append(item)
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        return out

    def events(self, ops: list[Op]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for op in ops:
            segment = op.segment
            at = {"output_index": self.at(segment), "item_id": self.item_id(segment)}
            custom = segment.kind == "tool" and segment.name in self.tools.custom
            if isinstance(op, Opened):
                skeleton = self.item(segment, "in_progress")
                out.append(self.event("response.output_item.added", output_index=self.at(segment), item=skeleton))
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
                    annotations = item["content"][0]["annotations"]
                    for i, annotation in enumerate(annotations):
                        added = {"content_index": 0, "annotation_index": i, "annotation": annotation}
                        out.append(self.event("response.output_text.annotation.added", **at, **added))
                    out.append(
                        self.event("response.output_text.done", **at, content_index=0, text=segment.text, logprobs=[])
                    )
                    part = item["content"][0]
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
                out.append(self.event("response.output_item.done", output_index=self.at(segment), item=item))
        return out


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    """A lead item as a stream adds it: in progress, without its results yet."""
    if item["type"] == "file_search_call":
        return {**item, "status": "in_progress", "results": None}
    return {**item, "status": "in_progress"}
