"""What the user can do to one message: copy, edit and resend, delete, switch branch, follow its links.

A mixin of ChatPage: the actions drive the page's store, model, composer and notices.
"""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu

from app.core.chat.models import ChatStoreError, Message


def active_branch(everything: list[Message], leaf_id: int | None):
    """The root-to-leaf path ending at `leaf_id`, and each message's (position, count) among its siblings."""
    by_id = {m.id: m for m in everything}
    siblings: dict[int | None, list[int]] = {}
    for m in everything:
        siblings.setdefault(m.parent_id, []).append(m.id)
    path: list[Message] = []
    node = by_id.get(leaf_id) if leaf_id is not None else None
    while node is not None:
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    branches = {m.id: (siblings[m.parent_id].index(m.id) + 1, len(siblings[m.parent_id])) for m in path}
    return path, branches


class MessageActions:
    """Needs the host class to provide messages, store, composer, stream, editing and the page's slots."""

    def _anchor(self, msg_id: int, href: str) -> None:
        row = self.messages.row(msg_id)
        if row is None:
            return
        kind, _, arg = href.partition(":")
        if href.startswith("copy:") and row.rendered is not None and arg.isdigit():
            blocks = row.rendered.code_blocks
            if int(arg) < len(blocks):
                QGuiApplication.clipboard().setText(blocks[int(arg)])
        elif href == "think:toggle":
            self.messages.toggle_reasoning(msg_id)
        elif kind == "act":
            {"copy": self.copy_message, "edit": self.begin_edit, "delete": self.delete_message}[arg](msg_id)
        elif kind == "branch":
            self.switch_branch(msg_id, -1 if arg == "prev" else 1)
        else:  # a link in the text: never opened by a click
            QGuiApplication.clipboard().setText(href)
            self.show_notice(f"Links are not opened from chats. Copied: {href}", "info")

    def _context_menu(self, msg_id: int, pos) -> None:
        row = self.messages.row(msg_id)
        if row is None:
            return
        menu = QMenu(self)
        menu.addAction("Copy", lambda: self.copy_message(msg_id))
        if row.message.role == "user":
            menu.addAction("Edit and resend", lambda: self.begin_edit(msg_id))
        if row is self.messages.rows[-1] and row.message.role == "assistant":
            menu.addAction("Regenerate", self.regenerate)
        menu.addAction("Delete", lambda: self.delete_message(msg_id))
        menu.popup(pos)

    def copy_message(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is not None:
            QGuiApplication.clipboard().setText(row.text)

    def begin_edit(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is None or row.message.role != "user":
            return
        self.editing = msg_id
        self.composer.setPlainText(row.text)
        self.composer.setFocus()
        self._update_controls()

    def delete_message(self, msg_id: int) -> None:
        if self.stream is not None and self.stream.msg_id == msg_id:
            self.stop()
            return  # deleting a reply mid-stream: stop it; delete the kept part afterwards
        try:
            self.store.delete_message(msg_id)
        except ChatStoreError as exc:
            self.show_notice(str(exc), "error")
        self.reload_thread()
        self._update_controls()

    def switch_branch(self, msg_id: int, step: int) -> None:
        siblings = self.store.branches(msg_id)
        ids = [m.id for m in siblings]
        target = ids[(ids.index(msg_id) + step) % len(ids)]
        self.store.switch_branch(target)
        self.reload_thread()
