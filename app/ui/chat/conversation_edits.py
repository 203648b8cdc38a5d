"""Renaming and deleting conversations on the Chat page: shown at once, written on the chat writer thread, and
put back on screen if the write fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.core.chat.models import ChatNotFound
from app.ui.chat.composer import Draft

if TYPE_CHECKING:
    from PySide6.QtCore import QObject

    from app.core.chat.operations import ChatOperations
    from app.ui.chat.composer import ComposerBox
    from app.ui.chat.conversations import ConversationList
    from app.ui.chat.header import ChatHeader
    from app.ui.chat.reply_controller import ReplyController
    from app.ui.chat.settings_panel import SettingsPanel
    from app.ui.chat.thread_view import ThreadView
    from app.ui.chat.unsent import UnsentDrafts
    from app.ui.tasks import TaskRunner


class ConversationEdits:
    """Renames and deletions, across the page's parts that show a conversation. Runs on the UI thread (the Chat
    page's); the writes go through `chats` to the writer thread and their answers come back through `writes`."""

    def __init__(
        self,
        chats: ChatOperations,
        writes: TaskRunner,
        owner: QObject,
        *,
        conversations: ConversationList,
        thread_view: ThreadView,
        header: ChatHeader,
        composer: ComposerBox,
        settings: SettingsPanel,
        replies: ReplyController,
        unsent: UnsentDrafts,
        open_conversation: Callable[[int], None],
        update_controls: Callable[[], None],
        write_failed: Callable[[BaseException], None],
    ) -> None:
        """`owner`: the page, whose answers these are (none is delivered once it is gone);
        `open_conversation`, `update_controls`: the page's; `write_failed(exc)`: shows a failed write."""
        self._chats = chats
        self._writes = writes
        self._owner = owner
        self._conversations = conversations
        self._thread_view = thread_view
        self._header = header
        self._composer = composer
        self._settings = settings
        self._replies = replies
        self._unsent = unsent
        self._open_conversation = open_conversation
        self._update_controls = update_controls
        self._write_failed = write_failed

    @property
    def _conv_id(self) -> int | None:
        """The conversation shown (None when there is none)."""
        return self._thread_view.conv_id

    def _refresh(self) -> None:
        self._conversations.refresh(self._conv_id)

    def rename(self, conv_id: int, title: str) -> None:
        """Shown at once; written on the writer thread, and the old title comes back if that fails."""
        renaming = self._chats.rename(conv_id, title)
        self.show_title(conv_id)

        def failed(exc: BaseException) -> None:
            self._write_failed(exc)
            self.show_title(conv_id)

        # Read back once written too: a listing that ran on the pool meanwhile may predate the write.
        self._writes.watch(renaming, lambda _done: self.show_title(conv_id), failed, owner=self._owner)

    def show_title(self, conv_id: int) -> None:
        """A conversation's title as it is now: in the header when it is the one shown, and in the list."""
        if conv_id == self._conv_id:
            try:
                self._header.title.setText(self._chats.get_conversation(conv_id).title)
            except ChatNotFound:
                pass  # deleted meanwhile: the list below drops it
        self._refresh()

    def delete(self, conv_id: int) -> None:
        """Gone from the list at once (the next chat opens); written on the writer thread, and listed
        again if that fails. A reply streaming into it is stopped."""
        if conv_id == self._conv_id:
            self._settings.save()  # before the deletion: kept if the deletion fails, never saved after it
        stream = self._replies.stream
        if stream is not None and stream.conv_id == conv_id:
            self._replies.stop()
        deleting = self._chats.delete_conversation(conv_id)
        self._show_without(conv_id)

        def deleted(_r: object) -> None:
            self._unsent.forget(conv_id)
            # Listed again once written: a listing that raced the deletion's overlay must not stay on screen.
            self._refresh()
            if self._conv_id == conv_id and (first := self._conversations.first_id(skip=conv_id)) is not None:
                self._open_conversation(first)

        self._writes.watch(deleting, deleted, lambda exc: self._delete_failed(conv_id, exc), owner=self._owner)

    def _show_without(self, conv_id: int) -> None:
        if conv_id == self._conv_id:
            # Its draft is kept until the deletion is committed: a failed one opens it again, draft and all.
            self._unsent.keep(conv_id, Draft() if self._replies.editing is not None else self._composer.draft())
            self._composer.clear()
            self._replies.forget_edit()
            self._settings.set_conversation(None)
            self._thread_view.show_conversation(None)
            self._header.title.setText("")
        self._refresh()
        if self._conv_id is None and (first := self._conversations.first_id(skip=conv_id)) is not None:
            self._open_conversation(first)
        self._update_controls()

    def _delete_failed(self, conv_id: int, exc: BaseException) -> None:
        """UI thread: nothing was deleted; list it again (and show it, if no chat is open)."""
        self._write_failed(exc)
        self._refresh()
        if self._conv_id is None:
            self._open_conversation(conv_id)
