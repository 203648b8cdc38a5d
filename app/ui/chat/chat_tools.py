"""MCP tools in the chat: the header's Tools menu (which servers the open conversation lets the model use,
and importing other programs' servers), the approval bar's answers, and the replies that use them."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMenu, QToolButton

from app.core.chat.models import Conversation
from app.core.chat.operations import ChatOperations
from app.core.chat.tool_loop import Approval, PendingCall, ToolLoop
from app.core.mcp.config import McpConfigError, known_config_files
from app.core.mcp.importing import import_servers
from app.core.mcp.servers import McpServers
from app.core.runtime.job_host import JobHost
from app.ui.chat.approval_bar import ApprovalBar
from app.ui.chat.tool_replies import ToolReply
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)


class ChatTools(QObject):
    """Signals (UI thread): `changed(conv)` once a conversation's servers are saved; `notice(text, level)`."""

    changed = Signal(object)
    notice = Signal(str, str)

    def __init__(
        self,
        servers: McpServers | None,
        host: JobHost,
        chats: ChatOperations,
        writes: TaskRunner,
        button: QToolButton,
        bar: ApprovalBar,
        conversation: Callable[[], Conversation | None],
        max_steps: Callable[[], int] = lambda: 10,
        parent: QObject | None = None,
    ) -> None:
        """`servers` None: no MCP here (the button says so); `conversation()`: the open one."""
        super().__init__(parent)
        self.servers, self.host, self.chats, self.writes = servers, host, chats, writes
        self.button, self.bar, self.conversation, self.max_steps = button, bar, conversation, max_steps
        self.allowed: set[tuple[str, str]] = set()  # "Always allow", for this session
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chat-tools")  # one reply streams at a time
        self._reply: ToolReply | None = None
        self.menu = QMenu(button)
        self.menu.aboutToShow.connect(self._fill)
        button.setMenu(self.menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        bar.answered.connect(self._answered)
        self.refresh()

    # -- the menu --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """The button for the open conversation: how many servers it uses."""
        conv = self.conversation()
        n = len(conv.tool_servers) if conv is not None else 0
        self.button.setText(f"Tools ({n})" if n else "Tools")
        self.button.setEnabled(self.servers is not None and conv is not None)
        self.button.setToolTip(
            "MCP servers whose tools the model may call in this chat"
            if self.servers is not None
            else "MCP tools are not available"
        )

    def _fill(self) -> None:
        """UI thread, as the menu opens: the servers in mcp.json (read again: it may have been edited)."""
        self.menu.clear()
        conv = self.conversation()
        if self.servers is None or conv is None:
            return
        try:
            self.servers.reload()
        except McpConfigError as exc:
            self.notice.emit(str(exc), "error")
        states = self.servers.states()
        if not states:
            # The real path, so a user can open it (or add one in Settings → Tools).
            empty = self.menu.addAction(
                f"No MCP servers yet: add them in Settings → Tools, or to {self.servers.config_path}"
            )
            empty.setEnabled(False)
        for state in states:
            action = self.menu.addAction(f"{state.name} — {state.line}")
            action.setCheckable(True)
            action.setChecked(state.name in conv.tool_servers)
            action.setToolTip(f"Runs: {state.command}")
            action.toggled.connect(lambda on, name=state.name: self.toggle(name, on))
        self.menu.addSeparator()
        self.menu.addAction("Import servers from a file…", self.choose_import)
        for program, path in known_config_files():
            found = self.menu.addAction(f"Import {program}'s servers")
            found.setToolTip(str(path))
            found.triggered.connect(functools.partial(self.import_file, path))

    def toggle(self, name: str, on: bool) -> None:
        conv = self.conversation()
        if conv is None:
            return
        names = [n for n in conv.tool_servers if n != name] + ([name] if on else [])
        if on and self.servers is not None:
            self.notice.emit(
                f"{name}'s tools are on in this chat; it starts when the model first needs it: "
                f"{self.servers.state(name).command}",
                "info",
            )
        self.writes.watch(
            self.chats.set_tool_servers(conv.id, names),
            self._saved,
            lambda exc: self.notice.emit(str(exc), "error"),
            owner=self,
        )

    def _saved(self, conv: Conversation) -> None:
        self.changed.emit(conv)
        self.refresh()

    def choose_import(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self.button, "Import MCP servers", str(Path.home()), "JSON (*.json)")
        if name:
            self.import_file(Path(name))

    def import_file(self, path: Path, _checked: bool = False) -> None:
        """`_checked`: what a menu action's `triggered` passes."""
        if self.servers is None:
            return
        from app.core.mcp.secrets import SecretStore

        config_dir = self.servers.config_path.parent
        try:
            done = import_servers(config_dir, path, SecretStore.for_config(config_dir))
        except McpConfigError as exc:
            self.notice.emit(str(exc), "error")
            return
        self.servers.reload()
        added = ", ".join(done.added) or "none"
        kept = f"; kept as they were: {', '.join(done.kept)}" if done.kept else ""
        self.notice.emit(f"Imported MCP servers: {added}{kept}. Turn them on in Tools.", "info")

    # -- replies ---------------------------------------------------------------------------------
    def reply_for(self, conv: Conversation, reply_id: int) -> ToolReply | None:
        """A reply that may call the conversation's tools, not started; None when it uses none."""
        if self.servers is None or not conv.tool_servers:
            return None
        servers = self.servers

        def make_loop(approve: Callable[[PendingCall], Approval]) -> ToolLoop:
            loop = ToolLoop(self.host, servers, approve, max_steps=self.max_steps(), source="chat")
            loop.allowed = self.allowed  # shared: "always" lasts the session, across replies
            return loop

        reply = ToolReply(make_loop, conv.id, reply_id, parent=self)
        reply.approval.connect(self._ask)
        reply.finished.connect(lambda *_: self.bar.setVisible(False))
        self._reply = reply
        return reply

    @property
    def pool(self) -> ThreadPoolExecutor:
        return self._pool

    def _ask(self, call: PendingCall) -> None:
        first = ""
        if self.servers is not None:
            state = self.servers.state(call.server)
            first = state.command if state.status != "ready" else ""
        self.bar.ask(call, first)

    def _answered(self, approval: str) -> None:
        if self._reply is not None:
            self._reply.answer(approval)  # type: ignore[arg-type]  # the bar's three answers

    def shutdown(self) -> None:
        """The reply controller has stopped the reply; the servers are the services' to close."""
        self._pool.shutdown(wait=False, cancel_futures=True)
