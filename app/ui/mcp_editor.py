"""Settings → Tools: the MCP servers of mcp.json listed, with Add, Edit and Remove. The rules live in
app.core.mcp.editing; this only shows a server's fields and hands them over."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.mcp.config import CONFIG_NAME, McpConfigError, load_config
from app.core.mcp.editing import ServerDraft, draft_of, format_pairs, parse_pairs, remove_server, save_server
from app.core.mcp.secrets import SecretStore
from app.ui.theme import set_status

KINDS = (("A program on this computer (stdio)", "stdio"), ("A server at a URL (Streamable HTTP)", "http"))


def _box(text: str, placeholder: str) -> QPlainTextEdit:
    box = QPlainTextEdit(text)
    box.setPlaceholderText(placeholder)
    box.setTabChangesFocus(True)
    box.setFixedHeight(box.fontMetrics().lineSpacing() * 4 + 12)
    return box


class McpServerDialog(QDialog):
    """Add a server (`original` None) or edit the one named `original`; Save writes mcp.json or says why not."""

    def __init__(
        self, config_dir: Path, secrets: SecretStore, original: str | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.config_dir, self.secrets, self.original = config_dir, secrets, original
        draft = ServerDraft()
        if original is not None:
            draft = draft_of(original, load_config(config_dir / CONFIG_NAME).servers[original])
        self.setWindowTitle("Edit MCP server" if original else "Add MCP server")
        form = QFormLayout()
        self.name = QLineEdit(draft.name)
        self.name.setPlaceholderText("files")
        form.addRow("Name", self.name)
        self.kind = QComboBox()
        for label, value in KINDS:
            self.kind.addItem(label, value)
        self.kind.setCurrentIndex(self.kind.findData(draft.transport))
        form.addRow("Kind", self.kind)

        stdio = QWidget()
        sform = QFormLayout(stdio)
        sform.setContentsMargins(0, 0, 0, 0)
        self.command = QLineEdit(draft.command)
        self.command.setPlaceholderText("npx")
        sform.addRow("Command", self.command)
        self.args = _box("\n".join(draft.args), "-y\n@modelcontextprotocol/server-filesystem\n/home/me/notes")
        sform.addRow("Arguments, one a line", self.args)
        self.env = _box(format_pairs(draft.env, "="), "API_KEY=…")
        sform.addRow("Environment, NAME=value", self.env)
        self.cwd = QLineEdit(draft.cwd)
        self.cwd.setPlaceholderText("(Hearth's own)")
        sform.addRow("Working folder", self.cwd)
        http = QWidget()
        hform = QFormLayout(http)
        hform.setContentsMargins(0, 0, 0, 0)
        self.url = QLineEdit(draft.url)
        self.url.setPlaceholderText("https://example.com/mcp")
        hform.addRow("URL", self.url)
        self.headers = _box(format_pairs(draft.headers, ":"), "Authorization: Bearer …")
        hform.addRow("Headers, Name: value", self.headers)
        self.pages = QStackedWidget()
        self.pages.addWidget(stdio)
        self.pages.addWidget(http)
        self.kind.currentIndexChanged.connect(self.pages.setCurrentIndex)
        self.pages.setCurrentIndex(self.kind.currentIndex())

        note = QLabel(
            f"Keys, tokens, passwords and Authorization headers are kept in {secrets.where}, not in"
            f" {CONFIG_NAME}; •••• stands for one kept there."
        )
        note.setWordWrap(True)
        note.setObjectName("hint")
        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.error.setVisible(False)
        buttons = QDialogButtonBox()
        self.save_button = buttons.addButton("Save", QDialogButtonBox.ButtonRole.AcceptRole)
        self.save_button.setProperty("role", "primary")
        self.save_button.setDefault(True)
        buttons.addButton("Cancel", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.pages)
        layout.addWidget(note)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.resize(max(self.sizeHint().width(), 520), self.sizeHint().height())
        self.saved_name = ""

    def draft(self) -> ServerDraft:
        """The fields as a draft; McpConfigError for an environment or header line that is not a pair."""
        return ServerDraft(
            name=self.name.text(),
            transport=self.kind.currentData(),
            command=self.command.text(),
            args=[line.strip() for line in self.args.toPlainText().splitlines() if line.strip()],
            env=parse_pairs(self.env.toPlainText(), "=", "Environment"),
            cwd=self.cwd.text(),
            url=self.url.text(),
            headers=parse_pairs(self.headers.toPlainText(), ":", "Headers"),
        )

    def accept(self) -> None:
        try:
            draft = self.draft()
            save_server(self.config_dir, draft, self.secrets, original=self.original)
        except McpConfigError as exc:  # stay open, say what to fix
            self.error.setText(str(exc))
            self.error.setVisible(True)
            return
        self.saved_name = draft.name.strip()
        super().accept()


class McpServerList(QWidget):
    """The servers of mcp.json, each with what starts it; Add…, Edit…, Remove. `changed(text)` after a save
    or removal, with a sentence saying what was done."""

    changed = Signal(str)

    def __init__(self, config_dir: Path, secrets: SecretStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.config_dir = config_dir
        self._secrets = secrets
        self.list = QListWidget()
        self.list.setMaximumHeight(self.list.fontMetrics().lineSpacing() * 6 + 8)
        self.list.itemDoubleClicked.connect(lambda _item: self.edit())
        self.add_button = QPushButton("Add…")
        self.edit_button = QPushButton("Edit…")
        self.remove_button = QPushButton("Remove")
        self.add_button.clicked.connect(self.add)
        self.edit_button.clicked.connect(self.edit)
        self.remove_button.clicked.connect(self.remove)
        self.list.currentRowChanged.connect(self._enable)
        buttons = QHBoxLayout()
        for b in (self.add_button, self.edit_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        self.refresh()

    @property
    def secrets(self) -> SecretStore:
        """Made when first needed: finding the system keyring is not free, and most people never edit."""
        if self._secrets is None:
            self._secrets = SecretStore.for_config(self.config_dir)
        return self._secrets

    def refresh(self) -> None:
        """The list as mcp.json has it now (an unreadable file: empty; the Settings label says why)."""
        current = self.selected()
        self.list.clear()
        try:
            servers = load_config(self.config_dir / CONFIG_NAME).servers
        except McpConfigError:
            servers = {}
        for name, entry in servers.items():
            item = QListWidgetItem(f"{name} — {entry.command_line()}" + (" (off)" if entry.disabled else ""))
            item.setData(Qt.ItemDataRole.UserRole, name)
            self.list.addItem(item)
            if name == current:
                self.list.setCurrentItem(item)
        self._enable()

    def selected(self) -> str | None:
        item = self.list.currentItem()
        return None if item is None else item.data(Qt.ItemDataRole.UserRole)

    def _enable(self, *_: object) -> None:
        chosen = self.selected() is not None
        self.edit_button.setEnabled(chosen)
        self.remove_button.setEnabled(chosen)

    def dialog(self, original: str | None) -> McpServerDialog:
        """The editor for one server (a test fills and saves it without running it modally)."""
        return McpServerDialog(self.config_dir, self.secrets, original, self)

    def _run(self, dialog: McpServerDialog, done: str) -> None:
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.refresh()
            self.changed.emit(f"{done} {dialog.saved_name}. Now: ")

    def add(self) -> None:
        self._run(self.dialog(None), "Added")

    def edit(self) -> None:
        if (name := self.selected()) is not None:
            self._run(self.dialog(name), "Saved")

    def remove(self) -> None:
        name = self.selected()
        if name is None or not self.confirm_remove(name):
            return
        try:
            remove_server(self.config_dir, name, self.secrets)
        except McpConfigError as exc:
            self.changed.emit(f"{exc}. ")
            return
        self.refresh()
        self.changed.emit(f"Removed {name}. Now: ")

    def confirm_remove(self, name: str) -> bool:
        answer = QMessageBox.question(
            self, "Remove MCP server", f"Remove {name} from {CONFIG_NAME}? Chats that used its tools lose them."
        )
        return answer == QMessageBox.StandardButton.Yes
