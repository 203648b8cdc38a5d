"""Settings → Tools: MCP servers added, edited and removed in the app (stdio and HTTP), written to mcp.json
with their secrets in the store; a mistake keeps the dialog open and says what to fix."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QDialog

from app.core.mcp.config import load_config
from app.core.mcp.secrets import HIDDEN, SecretStore, with_secrets
from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.ui.mcp_editor import McpServerDialog, McpServerList
from app.ui.settings_dialog import SettingsDialog


@pytest.fixture
def editor(qtbot, tmp_path):
    store = SecretStore(tmp_path / "mcp-secrets.json")
    widget = McpServerList(tmp_path, store)
    qtbot.addWidget(widget)
    return widget


def run_dialog(monkeypatch, fill) -> None:
    """The editor's dialog filled by `fill(dialog)` and saved, as a person would, without a modal loop."""

    def exec_(dialog: McpServerDialog) -> int:
        fill(dialog)
        dialog.save_button.click()
        return dialog.result()

    monkeypatch.setattr(McpServerDialog, "exec", exec_)


def items(editor: McpServerList) -> list[str]:
    return [editor.list.item(i).text() for i in range(editor.list.count())]


def test_add_a_stdio_server_then_an_http_one(editor, monkeypatch, tmp_path):
    said = []
    editor.changed.connect(said.append)
    assert items(editor) == [] and not editor.edit_button.isEnabled() and not editor.remove_button.isEnabled()

    def stdio(d: McpServerDialog) -> None:
        d.name.setText("files")
        d.command.setText("npx")
        d.args.setPlainText("-y\nserver-fs\n/tmp")
        d.env.setPlainText("API_KEY=k-1\nMODE=ro")

    run_dialog(monkeypatch, stdio)
    editor.add_button.click()
    assert items(editor) == ["files — npx -y server-fs /tmp"] and said == ["Added files. Now: "]
    entry = load_config(tmp_path / "mcp.json").servers["files"]
    assert "k-1" not in (tmp_path / "mcp.json").read_text()
    assert with_secrets("files", entry, editor.secrets).env == {"API_KEY": "k-1", "MODE": "ro"}

    def http(d: McpServerDialog) -> None:
        d.name.setText("search")
        d.kind.setCurrentIndex(d.kind.findData("http"))
        assert d.pages.currentIndex() == 1  # the URL and headers, not the command
        d.url.setText("https://mcp.example.com/mcp")
        d.headers.setPlainText("Authorization: Bearer s")

    run_dialog(monkeypatch, http)
    editor.add_button.click()
    assert items(editor)[1] == "search — connect to https://mcp.example.com/mcp"
    search = load_config(tmp_path / "mcp.json").servers["search"]
    assert with_secrets("search", search, editor.secrets).headers == {"Authorization": "Bearer s"}


def test_edit_shows_secrets_hidden_and_keeps_them(editor, monkeypatch, tmp_path):
    (tmp_path / "mcp.json").write_text(
        json.dumps({"mcpServers": {"gh": {"command": "docker", "env": {"GITHUB_TOKEN": "ghp_1", "LOG": "info"}}}})
    )
    editor.refresh()
    editor.list.setCurrentRow(0)
    seen = {}

    def rename(d: McpServerDialog) -> None:
        seen["env"] = d.env.toPlainText()
        d.name.setText("github")
        d.env.setPlainText(d.env.toPlainText().replace("LOG=info", "LOG=debug"))

    run_dialog(monkeypatch, rename)
    editor.edit_button.click()
    assert seen["env"] == f"GITHUB_TOKEN={HIDDEN}\nLOG=info"  # the dialog never holds the token
    entry = load_config(tmp_path / "mcp.json").servers["github"]
    assert with_secrets("github", entry, editor.secrets).env == {"GITHUB_TOKEN": "ghp_1", "LOG": "debug"}
    assert items(editor) == ["github — docker"]


def test_a_mistake_keeps_the_dialog_open_and_says_what_to_fix(editor, qtbot, tmp_path):
    dialog = editor.dialog(None)
    dialog.name.setText("x")
    dialog.env.setPlainText("not a pair")
    dialog.command.setText("run")
    dialog.save_button.click()
    assert dialog.result() != QDialog.DialogCode.Accepted and dialog.error.isVisibleTo(dialog)
    assert dialog.error.text() == "Environment, line 1: write it as NAME=value"
    dialog.env.setPlainText("")
    dialog.command.setText("")
    dialog.save_button.click()
    assert "needs its command" in dialog.error.text() and not (tmp_path / "mcp.json").exists()


def test_remove_asks_then_takes_it_out(editor, monkeypatch, tmp_path):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}}))
    editor.refresh()
    editor.list.setCurrentRow(0)
    monkeypatch.setattr(editor, "confirm_remove", lambda name: False)
    editor.remove_button.click()
    assert list(load_config(tmp_path / "mcp.json").servers) == ["a", "b"]
    monkeypatch.setattr(editor, "confirm_remove", lambda name: True)
    editor.remove_button.click()
    assert list(load_config(tmp_path / "mcp.json").servers) == ["b"] and items(editor) == ["b — b"]


def test_the_settings_dialog_lists_the_servers_and_says_what_an_edit_did(qtbot, monkeypatch):
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(dialog)
    assert dialog.mcp_servers.text() == "none yet" and dialog.mcp_list.config_dir == paths.config

    def fill(d: McpServerDialog) -> None:
        d.name.setText("echo")
        d.command.setText("echo-server")

    run_dialog(monkeypatch, fill)
    dialog.mcp_list.add_button.click()
    assert dialog.mcp_servers.text() == "Added echo. Now: echo"
    assert list(load_config(paths.config / "mcp.json").servers) == ["echo"]
