"""Every chat write, on one writer thread, in the order it was asked for.

The store commits with synchronous=FULL, so each write waits for an fsync: none may run on the UI
thread. `ChatOperations` owns the one writer thread; partial reply saves, the final save, sends and
every edit of conversations, messages and presets go through it, so they land in submission order.
Each named operation returns a Future: its result, or a ChatStoreError whose text is for the user.
Reads that must already show a write in flight (a rename, a settings save, a deletion) go through
`get_conversation` / `list_conversations` / `search` here (see pending.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.core.chat import export, rows
from app.core.chat.grounding import Source
from app.core.chat.models import ChatImportError, ChatNotFound, ChatStoreError, Conversation, Preset
from app.core.chat.pending import PendingWrites
from app.core.chat.store import DEFAULT_TITLE, ChatStore
from app.core.engines.base import GenerationStats, ImageInput, SamplingParams
from app.core.events import Event

logger = logging.getLogger(__name__)

T = TypeVar("T")
WRITER_THREAD = "hearth-chat-writer"
CLOSED = "The chat history is closed; nothing more can be saved."


def user_error(exc: BaseException) -> ChatStoreError:
    """The error a failed write hands back: the store's own (its text is for the user), or a bug
    wrapped as "Could not save the chat: …" and logged with its traceback."""
    if isinstance(exc, ChatStoreError):
        logger.warning("chat write failed: %s", exc)
        return exc
    logger.error("chat write failed", exc_info=exc)  # a bug must not kill the writer or stall the page
    return ChatStoreError(f"Could not save the chat: {exc}")


def _failed(exc: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(exc)
    return future


@dataclass(frozen=True)
class SavedTurn:
    """What a send, a regeneration or an edit committed before its reply may start."""

    conversation_id: int
    parent_id: int  # the user turn the reply answers
    reply_id: int | None  # the `streaming` reply row; None when the request does not fit


class ChatOperations:
    """The chat's writes, run in order on one thread; Qt-free. `failed` (emitted on the writer thread)
    carries the user message of a failed write that nobody waits on (the streaming saves)."""

    def __init__(self, store: ChatStore) -> None:
        self.store = store
        self.failed: Event[str] = Event("chat write failed")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=WRITER_THREAD)
        self._pending = PendingWrites()
        self._closed = False
        self._close_lock = threading.Lock()

    # --- the writer thread ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, fn: Callable[..., T], *args: Any, report: bool = False, **kwargs: Any) -> Future:
        """Any thread: run `fn` on the writer thread after every write submitted before it. Never
        raises: a failure (or a closed writer) is in the future. `report`: also emit its message on
        `failed`, for a write whose future nobody watches."""
        if self._closed:
            return _failed(ChatStoreError(CLOSED))

        def job() -> T:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                err = user_error(exc)
                if report and not self._closed:
                    self.failed.emit(str(err))
                if err is exc:
                    raise
                raise err from exc

        try:
            return self._pool.submit(job)
        except RuntimeError:  # shut down meanwhile
            return _failed(ChatStoreError(CLOSED))

    def _tracked(self, settle: Callable[[], None], future: Future) -> Future:
        # Added before anyone else can watch the future: reads in their callbacks see the settled state.
        future.add_done_callback(lambda _f: settle())
        return future

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every write submitted so far is done (shutdown, tests); False on timeout."""
        done = threading.Event()
        try:
            self._pool.submit(done.set)
        except RuntimeError:
            return True
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Finish the writes submitted so far, then refuse new ones (shutdown)."""
        with self._close_lock:
            if self._closed:
                return
            if not self.flush(timeout):
                logger.warning("chat writes still running after %.0f s at shutdown", timeout)
            self._closed = True
            self._pool.shutdown(wait=True)

    # --- reads that see the writes in flight -----------------------------------------------------
    # Each takes the writes in flight before it reads the store: one that commits in between is then seen
    # in the store, where the other order would show neither (the old title after a rename).
    def get_conversation(self, conv_id: int) -> Conversation:
        pending = self._pending.snapshot()
        if pending.hidden(conv_id):
            raise ChatNotFound(f"No conversation {conv_id}.")
        return pending.apply(self.store.get_conversation(conv_id))

    def list_conversations(self, limit: int | None = None) -> list[Conversation]:
        pending = self._pending.snapshot()
        return pending.visible(self.store.list_conversations(limit))

    def search(self, query: str, limit: int = 50) -> list[Conversation]:
        """Any thread (a search reads every message: the UI runs it on its pool)."""
        pending = self._pending.snapshot()
        return pending.visible(self.store.search(query, limit=limit))

    # --- conversations ---------------------------------------------------------------------------
    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        system_prompt: str = "",
        sampling: SamplingParams | None = None,
        preset_id: int | None = None,
    ) -> Future:
        """Future[Conversation]."""
        return self.run(
            self.store.create_conversation, title, system_prompt=system_prompt, sampling=sampling, preset_id=preset_id
        )

    def rename(self, conv_id: int, title: str) -> Future:
        """Future[None]; reads show the new title at once."""
        settle = self._pending.change(conv_id, title=rows.clean_title(title))
        return self._tracked(settle, self.run(self.store.rename_conversation, conv_id, title))

    def delete_conversation(self, conv_id: int) -> Future:
        """Future[None]; reads leave the conversation out at once."""
        settle = self._pending.delete(conv_id)
        return self._tracked(settle, self.run(self.store.delete_conversation, conv_id))

    def update_settings(self, conv_id: int, **changes: Any) -> Future:
        """Future[Conversation] (as saved); reads show the changes at once. Keywords as the store's."""
        settle = self._pending.change(conv_id, **changes)
        return self._tracked(settle, self.run(self.store.update_settings, conv_id, **changes))

    def import_file(self, path: Path) -> Future:
        """Future[int]: the new conversation's id. A file that cannot be read is a ChatImportError."""

        def load() -> int:
            try:
                return export.import_json_file(self.store, Path(path))
            except OSError as exc:
                raise ChatImportError(str(exc)) from exc

        return self.run(load)

    # --- messages --------------------------------------------------------------------------------
    def send(
        self,
        conv_id: int | None,
        text: str,
        *,
        title: str | None = None,
        reply: bool = True,
        images: Sequence[ImageInput] = (),
    ) -> Future:
        """Future[SavedTurn]: the user turn (with its `images`) on the shown branch (in a new conversation,
        titled `title`, when `conv_id` is None), the conversation's new `title` if any, and a streaming reply
        row."""
        store = self.store

        def save() -> SavedTurn:
            cid = conv_id if conv_id is not None else store.create_conversation(title or DEFAULT_TITLE).id
            user_id = store.add_user_message(cid, text, images)
            if title and conv_id is not None:
                store.rename_conversation(cid, title)
            return SavedTurn(cid, user_id, store.begin_assistant(cid, user_id) if reply else None)

        return self.run(save)

    def regenerate(self, conv_id: int, parent_id: int, *, reply: bool = True) -> Future:
        """Future[SavedTurn]: a new reply row under `parent_id`, beside the ones it has."""
        store = self.store
        return self.run(
            lambda: SavedTurn(conv_id, parent_id, store.begin_assistant(conv_id, parent_id) if reply else None)
        )

    def edit_and_resend(self, conv_id: int, msg_id: int, text: str, *, reply: bool = True) -> Future:
        """Future[SavedTurn]: the edited user message as a sibling of `msg_id`, and its reply row."""
        store = self.store

        def save() -> SavedTurn:
            new_id = store.edit_user_message(msg_id, text)
            return SavedTurn(conv_id, new_id, store.begin_assistant(conv_id, new_id) if reply else None)

        return self.run(save)

    def save_partial(self, msg_id: int, text: str) -> Future:
        """Any thread (the host's sink): the reply so far. Failures go out on `failed`."""
        return self.run(self.store.update_streaming, msg_id, text, report=True)

    def finish_reply(
        self,
        msg_id: int,
        text: str,
        status: str,
        stats: GenerationStats | dict[str, Any] | None,
        finish_reason: str | None,
        error: str | None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
    ) -> Future:
        """The final text and status (and the tool calls it made). Failures go out on `failed`; a reply whose
        conversation was deleted while it streamed has nothing left to save."""
        store = self.store

        def finish() -> None:
            try:
                store.finish_assistant(msg_id, text, status, stats, finish_reason, error, tool_calls)
            except ChatNotFound:
                logger.info("reply %d was deleted before it finished; nothing to save", msg_id)

        return self.run(finish, report=True)

    def add_tool_result(self, conv_id: int, parent_id: int, call_id: str, content: str, error: str | None) -> Future:
        """Future[int]: a tool's result (or why there is none) under the turn that called it."""
        return self.run(self.store.add_tool_result, conv_id, parent_id, call_id, content, error)

    def begin_reply(self, conv_id: int, parent_id: int) -> Future:
        """Future[int]: a streaming reply row under `parent_id` (the model's next turn after its tools)."""
        return self.run(self.store.begin_assistant, conv_id, parent_id)

    def set_tool_servers(self, conv_id: int, servers: Sequence[str]) -> Future:
        """Future[Conversation]: the MCP servers whose tools the model may call in this conversation."""
        return self.run(self.store.set_tool_servers, conv_id, list(servers))

    def set_doc_collections(self, conv_id: int, names: Sequence[str]) -> Future:
        """Future[Conversation]: the document collections searched for each message in this conversation."""
        return self.run(self.store.set_doc_collections, conv_id, list(names))

    def rename_doc_collection(self, old: str, new: str) -> Future:
        """Future[list[int]]: conversations that search collection `old` search it as `new` (their ids)."""
        return self.run(self.store.rename_doc_collection, old, new)

    def set_sources(self, msg_id: int, sources: Sequence[Source]) -> Future:
        """Future[None]: the passages reply `msg_id` is given, kept with it."""
        return self.run(self.store.set_sources, msg_id, list(sources))

    def delete_message(self, msg_id: int) -> Future:
        """Future[None]; its replies move up to its parent."""
        return self.run(self.store.delete_message, msg_id)

    def switch_branch(self, msg_id: int, step: int) -> Future:
        """Future[int]: show the sibling `step` away from `msg_id` (wrapping), read on the writer
        thread so that it follows any write before it; the result is the sibling shown."""
        store = self.store

        def switch() -> int:
            ids = [m.id for m in store.branches(msg_id)]
            target = ids[(ids.index(msg_id) + step) % len(ids)]
            store.switch_branch(target)
            return target

        return self.run(switch)

    # --- presets ---------------------------------------------------------------------------------
    def apply_preset(self, conv_id: int, preset_id: int) -> Future:
        """Future[Conversation]: copy the preset's prompt and sampling into the conversation; reads
        show them at once."""
        try:
            p = self.store.get_preset(preset_id)
        except ChatStoreError as exc:
            return _failed(exc)
        return self.update_settings(conv_id, system_prompt=p.system_prompt, sampling=p.sampling, preset_id=p.id)

    def save_preset(
        self, name: str, system_prompt: str, sampling: SamplingParams, *, conv_id: int | None = None
    ) -> Future:
        """Future[Preset]: a new preset, remembered as `conv_id`'s preset when given."""
        try:
            name = rows.clean_preset_name(name)
        except ValueError as exc:
            return _failed(ChatStoreError(str(exc)))
        store = self.store

        def save() -> Preset:
            preset = store.save_preset(name, system_prompt, sampling)
            if conv_id is not None:
                store.update_settings(conv_id, preset_id=preset.id)
            return preset

        return self.run(save)

    def update_preset(self, preset_id: int, *, system_prompt: str, sampling: SamplingParams) -> Future:
        """Future[Preset]."""
        return self.run(self.store.update_preset, preset_id, system_prompt=system_prompt, sampling=sampling)

    def delete_preset(self, preset_id: int) -> Future:
        """Future[None]; conversations that used it keep their copied settings."""
        return self.run(self.store.delete_preset, preset_id)
