"""Renaming and deleting conversations on the Chat page: shown at once, written on the chat writer thread, and
put back on screen if the write fails. A mixin of ChatPage (its parts are the page's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject

from app.core.chat.models import ChatNotFound
from app.ui.chat.composer import Draft

if TYPE_CHECKING:
    from app.core.chat.operations import ChatOperations
    from app.ui.chat.composer import ComposerBox
    from app.ui.chat.conversations import ConversationList
    from app.ui.chat.header import ChatHeader
    from app.ui.chat.replies import ReplyController
    from app.ui.chat.settings_panel import SettingsPanel
    from app.ui.chat.thread_view import ThreadView
    from app.ui.chat.unsent import UnsentDrafts
    from app.ui.tasks import TaskRunner


class ConversationEdits:
    chats: ChatOperations
    writes: TaskRunner
    header: ChatHeader
    settings: SettingsPanel
    replies: ReplyController
    unsent: UnsentDrafts
    composer: ComposerBox
    thread_view: ThreadView
    conversations: ConversationList
    open_conversation: Callable[[int], None]
    refresh_conversations: Callable[[], None]
    _update_controls: Callable[[], None]
    _write_failed: Callable[[BaseException], None]

    @property
    def conv_id(self) -> int | None:  # the page's: the conversation shown
        raise NotImplementedError

    def rename_conversation(self, conv_id: int, title: str) -> None:
        """Shown at once; written on the writer thread, and the old title comes back if that fails."""
        renaming = self.chats.rename(conv_id, title)
        self._retitled(conv_id)

        def failed(exc: BaseException) -> None:
            self._write_failed(exc)
            self._retitled(conv_id)

        # Read back once written too: a listing that ran on the pool meanwhile may predate the write.
        self.writes.watch(renaming, lambda _done: self._retitled(conv_id), failed, owner=cast(QObject, self))

    def _retitled(self, conv_id: int) -> None:
        if conv_id == self.conv_id:
            try:
                self.header.title.setText(self.chats.get_conversation(conv_id).title)
            except ChatNotFound:
                pass  # deleted meanwhile: the list below drops it
        self.refresh_conversations()

    def delete_conversation(self, conv_id: int) -> None:
        """Gone from the list at once (the next chat opens); written on the writer thread, and listed
        again if that fails. A reply streaming into it is stopped."""
        if conv_id == self.conv_id:
            self.settings.save()  # before the deletion: kept if the deletion fails, never saved after it
        stream = self.replies.stream
        if stream is not None and stream.conv_id == conv_id:
            self.replies.stop()
        deleting = self.chats.delete_conversation(conv_id)
        self._show_without(conv_id)

        def deleted(_r: object) -> None:
            self.unsent.forget(conv_id)
            # Listed again once written: a listing that raced the deletion's overlay must not stay on screen.
            self.refresh_conversations()
            if self.conv_id == conv_id and (first := self.conversations.first_id(skip=conv_id)) is not None:
                self.open_conversation(first)

        self.writes.watch(deleting, deleted, lambda exc: self._delete_failed(conv_id, exc), owner=cast(QObject, self))

    def _show_without(self, conv_id: int) -> None:
        if conv_id == self.conv_id:
            # Its draft is kept until the deletion is committed: a failed one opens it again, draft and all.
            self.unsent.keep(conv_id, Draft() if self.replies.editing is not None else self.composer.draft())
            self.composer.clear()
            self.replies.forget_edit()
            self.settings.set_conversation(None)
            self.thread_view.show_conversation(None)
            self.header.title.setText("")
        self.refresh_conversations()
        if self.conv_id is None and (first := self.conversations.first_id(skip=conv_id)) is not None:
            self.open_conversation(first)
        self._update_controls()

    def _delete_failed(self, conv_id: int, exc: BaseException) -> None:
        """UI thread: nothing was deleted; list it again (and show it, if no chat is open)."""
        self._write_failed(exc)
        self.refresh_conversations()
        if self.conv_id is None:
            self.open_conversation(conv_id)
