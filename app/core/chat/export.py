"""Export a conversation to Markdown (for reading) or JSON (for re-import); import JSON safely.

Import validates everything (strict schema, size caps, a well-formed message tree) before it
writes anything, then inserts the conversation in one transaction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import math
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.chat.grounding import Source, cited
from app.core.chat.models import ROLES, STATUSES, ChatImportError, Conversation, Message
from app.core.chat.store import ChatStore
from app.core.engines.base import ImageInput, SamplingParams
from app.core.engines.inputs.images import MAX_IMAGE_BYTES, MAX_IMAGES

logger = logging.getLogger(__name__)

FORMAT = "hearth-chat"
VERSION = 4
MAX_IMPORT_BYTES = 64 * 1024 * 1024
MAX_MESSAGES = 100_000
MAX_MESSAGE_CHARS = 4 * 1024 * 1024
MAX_TEXT = 1024 * 1024

# What a file name may not hold on Windows, macOS or Linux, and the most characters kept of a title.
_UNSAFE_IN_NAME = re.compile(r'[<>:"/\\|?*\x00-\x1f]+')
MAX_NAME_CHARS = 80


def export_file_name(title: str, ext: str) -> str:
    """A chat's title as the file name its export is offered under ("Reverse a string in Python.md"),
    with what no file system takes removed; "chat" for a title with nothing left."""
    name = " ".join(_UNSAFE_IN_NAME.sub(" ", title).split()).strip(". ")[:MAX_NAME_CHARS].rstrip(". ")
    return f"{name or 'chat'}.{ext}"


_Finite = Annotated[float, Field(allow_inf_nan=False)]
_StatValue = _Finite | None


class _ExportImage(BaseModel):
    """An attached image: the file's bytes as base64, where it sits in the text, and its hash (checked)."""

    model_config = ConfigDict(extra="forbid")

    offset: int = Field(ge=0, le=MAX_MESSAGE_CHARS)
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    data: str = Field(max_length=MAX_IMAGE_BYTES * 4 // 3 + 4)

    def image(self) -> ImageInput:
        try:
            data = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ChatImportError(f"This chat export is malformed: an image is not base64 ({e}).") from e
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise ChatImportError("This chat export is malformed: an image does not match its sha256.")
        return ImageInput(data=data, offset=self.offset)


class _ExportCall(BaseModel):
    """A tool call an assistant turn made."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(max_length=200)
    server: str = Field(max_length=200)
    tool: str = Field(max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)


class _ExportSource(BaseModel):
    """A passage a reply was given from the user's documents, as it was then."""

    model_config = ConfigDict(extra="forbid")

    number: int = Field(ge=1, le=999)
    collection: str = Field("", max_length=200)
    file: str = Field(max_length=4096)
    page: int | None = Field(None, ge=0)
    heading: str = Field("", max_length=MAX_TEXT)
    text: str = Field(max_length=MAX_MESSAGE_CHARS)

    @classmethod
    def of(cls, s: Source) -> _ExportSource:
        return cls(
            number=s.number, collection=s.collection, file=str(s.file), page=s.page, heading=s.heading, text=s.text
        )

    def source(self) -> Source:
        return Source(self.number, self.collection, Path(self.file), self.page, self.heading, self.text)


class _ExportMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    parent: int | None = None
    role: Literal[ROLES]  # type: ignore[valid-type]
    content: str = Field(max_length=MAX_MESSAGE_CHARS)
    status: Literal[STATUSES] = "done"  # type: ignore[valid-type]
    created_at: _Finite
    updated_at: _Finite | None = None
    stats: dict[Annotated[str, Field(max_length=64)], _StatValue] | None = Field(None, max_length=32)
    finish_reason: str | None = Field(None, max_length=32)
    error: str | None = Field(None, max_length=MAX_TEXT)
    images: list[_ExportImage] | None = Field(None, max_length=MAX_IMAGES)
    tool_calls: list[_ExportCall] | None = Field(None, max_length=64)
    tool_call_id: str | None = Field(None, max_length=200)
    sources: list[_ExportSource] | None = Field(None, max_length=999)


class _ExportConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(max_length=1000)
    created_at: _Finite
    updated_at: _Finite
    system_prompt: str = Field("", max_length=MAX_TEXT)
    model_id: str | None = Field(None, max_length=4096)
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    context_length: int | None = Field(None, ge=16, le=16_777_216)
    tool_servers: list[Annotated[str, Field(max_length=64)]] = Field(default_factory=list, max_length=64)
    doc_collections: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=256)


class ExportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["hearth-chat"]
    version: Literal[1, 2, 3, 4]  # 2: messages may carry images; 3: tool calls and results; 4: documents
    exported_at: _Finite
    conversation: _ExportConversation
    messages: list[_ExportMessage] = Field(max_length=MAX_MESSAGES)
    active_leaf: int | None = None


def export_json(store: ChatStore, conv_id: int) -> str:
    """Everything needed to import the conversation back: all branches, statuses, stats, settings."""
    conv = store.get_conversation(conv_id)
    messages = store.all_messages(conv_id)
    images = store.images_of(m.id for m in messages)
    sources = store.sources_of(m.id for m in messages if m.role == "assistant")
    doc = ExportFile(
        format=FORMAT,
        version=VERSION,
        exported_at=time.time(),
        conversation=_ExportConversation(
            title=conv.title,
            created_at=conv.created_at,
            updated_at=conv.updated_at,
            system_prompt=conv.system_prompt,
            model_id=conv.model_id,
            sampling=conv.sampling,
            context_length=conv.context_length,
            tool_servers=list(conv.tool_servers),
            doc_collections=list(conv.doc_collections),
        ),
        messages=[
            _ExportMessage(
                id=m.id,
                parent=m.parent_id,
                role=m.role,
                content=m.content,
                status=m.status,
                created_at=m.created_at,
                updated_at=m.updated_at,
                stats=m.stats,
                finish_reason=m.finish_reason,
                error=m.error,
                images=[_exported(i) for i in images[m.id]] if m.id in images else None,
                tool_calls=[_ExportCall.model_validate(c) for c in m.tool_calls] if m.tool_calls else None,
                tool_call_id=m.tool_call_id,
                sources=[_ExportSource.of(s) for s in sources[m.id]] if m.id in sources else None,
            )
            for m in messages
        ],
        active_leaf=conv.active_leaf_id,
    )
    return json.dumps(doc.model_dump(mode="json"), ensure_ascii=False, indent=1)


def _exported(image: ImageInput) -> _ExportImage:
    data = base64.b64encode(image.data).decode("ascii")
    return _ExportImage(offset=image.offset, sha256=hashlib.sha256(image.data).hexdigest(), data=data)


def _validation_summary(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(x) for x in e["loc"]) or "top level"
        parts.append(f"{where}: {e['msg']}")
    more = f" (and {err.error_count() - 3} more)" if err.error_count() > 3 else ""
    return "; ".join(parts) + more


def parse_export(data: str | bytes) -> ExportFile:
    """Validate an export; raises ChatImportError with a plain reason."""
    if len(data) > MAX_IMPORT_BYTES:
        raise ChatImportError(
            f"This file is too large to import as a chat ({len(data) // 2**20} MiB;"
            f" the limit is {MAX_IMPORT_BYTES // 2**20} MiB)."
        )
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ChatImportError(f"This is not a JSON file, so it cannot be imported as a chat ({e}).") from e
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ChatImportError('This JSON file is not a Hearth chat export (no "format": "hearth-chat").')
    try:
        doc = ExportFile.model_validate(raw)
    except ValidationError as e:
        raise ChatImportError(f"This chat export is malformed: {_validation_summary(e)}.") from e
    seen: set[int] = set()
    for m in doc.messages:
        if m.id in seen:
            raise ChatImportError(f"This chat export is malformed: message id {m.id} appears twice.")
        if m.parent is not None and m.parent not in seen:
            raise ChatImportError(
                f"This chat export is malformed: message {m.id} replies to {m.parent}, which does not come before it."
            )
        numbers = [s.number for s in m.sources or ()]
        if len(set(numbers)) != len(numbers):
            raise ChatImportError(f"This chat export is malformed: message {m.id} has two sources of one number.")
        seen.add(m.id)
    if doc.active_leaf is not None and doc.active_leaf not in seen:
        raise ChatImportError(f"This chat export is malformed: active message {doc.active_leaf} is missing.")
    return doc


def import_json(store: ChatStore, data: str | bytes) -> int:
    """Import an export as a new conversation (nothing is written if it is rejected); returns its id."""
    doc = parse_export(data)
    c = doc.conversation
    conv = Conversation(
        id=0,
        title=c.title,
        created_at=c.created_at,
        updated_at=c.updated_at,
        system_prompt=c.system_prompt,
        model_id=c.model_id,
        sampling=c.sampling,
        context_length=c.context_length,
        tool_servers=tuple(c.tool_servers),
        doc_collections=tuple(c.doc_collections),
    )
    messages = [
        Message(
            id=m.id,
            conversation_id=0,
            parent_id=m.parent,
            role=m.role,
            content=m.content,
            # A reply that was mid-stream when exported will never finish here.
            status="interrupted" if m.status == "streaming" else m.status,
            created_at=m.created_at,
            updated_at=m.updated_at if m.updated_at is not None else m.created_at,
            stats=m.stats,
            finish_reason=m.finish_reason,
            error=m.error,
            tool_calls=[call.model_dump() for call in m.tool_calls] if m.tool_calls else None,
            tool_call_id=m.tool_call_id,
        )
        for m in doc.messages
    ]
    images = {m.id: [i.image() for i in m.images] for m in doc.messages if m.images}
    sources = {m.id: [s.source() for s in m.sources] for m in doc.messages if m.sources and m.role == "assistant"}
    cid = store.import_conversation(conv, messages, doc.active_leaf, images, sources)
    logger.info("imported chat %r with %d messages as conversation %d", c.title, len(messages), cid)
    return cid


def import_json_file(store: ChatStore, path: Path) -> int:
    size = Path(path).stat().st_size
    if size > MAX_IMPORT_BYTES:
        raise ChatImportError(f"{path} is too large to import as a chat ({size // 2**20} MiB).")
    return import_json(store, Path(path).read_bytes())


# --- Markdown ---------------------------------------------------------------------------------
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADINGS = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}


def _close_fences(text: str) -> str:
    """A reply stopped inside a code block would swallow the next heading: close the fence."""
    open_fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if not m:
            continue
        fence = m.group(1)
        if open_fence is None:
            open_fence = fence
        elif fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not line.strip()[len(fence) :]:
            open_fence = None
    if open_fence is None:
        return text
    return text + ("" if text.endswith("\n") else "\n") + open_fence


def _stats_line(m: Message) -> str | None:
    s = m.stats or {}
    parts = []
    if s.get("generated_tokens"):
        parts.append(f"{int(s['generated_tokens'])} tokens")
    tps = s.get("decode_tok_s")
    if isinstance(tps, (int, float)) and math.isfinite(tps) and tps > 0:
        parts.append(f"{tps:.1f} tok/s")
    ttft = s.get("time_to_first_token_s")
    if isinstance(ttft, (int, float)) and ttft > 0:
        parts.append(f"first token {ttft:.2f} s")
    if m.finish_reason:
        parts.append(f"finish: {m.finish_reason}")
    return "*" + " · ".join(parts) + "*" if parts else None


def export_markdown(store: ChatStore, conv_id: int) -> str:
    """The shown thread as Markdown: roles as headings, message text (and its code blocks) as is."""
    conv = store.get_conversation(conv_id)
    when = datetime.fromtimestamp(conv.updated_at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# {conv.title}", ""]
    meta = f"*Exported from Hearth · last active {when}"
    out += [meta + (f" · model: {conv.model_id}*" if conv.model_id else "*"), ""]
    if conv.system_prompt.strip():
        out += ["**System prompt**", ""]
        out += ["> " + line if line else ">" for line in conv.system_prompt.splitlines()]
        out.append("")
    path = store.active_path(conv_id)
    counts = store.image_counts(m.id for m in path)
    sources = store.sources_of(m.id for m in path if m.role == "assistant")
    for m in path:
        heading = _HEADINGS.get(m.role, m.role.title())
        if m.status != "done":
            heading += f" ({m.status})"
        out += [f"## {heading}", "", _close_fences(m.content).rstrip("\n"), ""]
        for call in m.tool_calls or ():  # a call and its arguments, as the user approved it
            out += [f"*Called {call.get('server')}.{call.get('tool')}:*", "", "```json"]
            out += [json.dumps(call.get("arguments") or {}, ensure_ascii=False, indent=2), "```", ""]
        if n := counts.get(m.id, 0):  # the pictures themselves are in the JSON export
            out += [f"*({n} image{'s' if n > 1 else ''} attached)*", ""]
        if m.error:
            out += [f"> Error: {m.error}", ""]
        if (line := _stats_line(m)) is not None:
            out += [line, ""]
        if m.id in sources:
            out += _sources_markdown(m.content, sources[m.id])
    return "\n".join(out).rstrip("\n") + "\n"


def _sources_markdown(reply: str, given: list[Source]) -> list[str]:
    """The passages a reply was given, as a Sources section: the ones it cites (all, when it cites none), each
    with its file, page or section and the passage quoted."""
    shown = cited(reply, given) or given
    out = ["**Sources**", ""]
    for s in shown:
        place = f"{s.where} ({s.file})" + (f", collection {s.collection}" if s.collection else ", attached")
        out += [f"[{s.number}] {place}", ""]
        out += ["> " + line if line.strip() else ">" for line in s.text.splitlines()]
        out.append("")
    return out
