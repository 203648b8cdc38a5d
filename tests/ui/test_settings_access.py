"""Settings are easy to find (a Settings entry at the foot of the sidebar, besides File → Settings… and
Ctrl+,), the dialog has plain Save and Cancel buttons, and Parallel requests is edited in one place only:
the Server page's settings, which the dialog shows and links to."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialogButtonBox, QSpinBox

from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.main import build_shell
from app.ui.settings_dialog import MEASURE_HINT, PARALLEL_HERE, SPECULATIVE_HINT, SettingsDialog


@pytest.fixture
def shell(qtbot, themed):
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False, "parallel_requests": 3})
    store.save(settings)
    made = build_shell(paths, store, settings, themes=themed)
    qtbot.addWidget(made.window)
    made.window.resize(900, 600)
    made.window.show()
    qtbot.waitExposed(made.window)
    yield made
    made.shutdown()


def test_the_sidebar_foot_opens_settings(shell, qtbot):
    window = shell.window
    button = window.settings_button
    assert button.isVisible() and button.text() == "Settings" and not button.icon().isNull()
    # At the foot of the sidebar, below every page.
    last = window.sidebar.visualItemRect(window.sidebar.item(window.sidebar.count() - 1))
    assert button.mapTo(window, button.rect().topLeft()).y() > window.sidebar.mapTo(window, last.bottomLeft()).y()
    button.click()
    dialog = window.findChild(SettingsDialog)
    assert dialog is not None and dialog.isVisible()
    dialog.reject()


def test_the_dialog_has_plain_save_and_cancel_buttons():
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths, env={})
    box = dialog.findChild(QDialogButtonBox)
    buttons = box.buttons()
    assert [b.text() for b in buttons] == ["Save", "Cancel"] or [b.text() for b in buttons] == ["Cancel", "Save"]
    for b in buttons:
        # Not the platform's standard buttons, which carry stock icons on some desktops.
        assert box.standardButton(b) == QDialogButtonBox.StandardButton.NoButton and b.icon().isNull()
    dialog.deleteLater()


def test_parallel_requests_is_shown_in_settings_and_changed_on_the_server_page(shell, qtbot):
    window, store = shell.window, shell.services.settings
    dialog = window.open_settings()
    assert dialog.parallel_requests.text() == "3 at once"
    assert not any(box.suffix() == " at once" for box in dialog.findChildren(QSpinBox))  # shown, not edited
    assert dialog.edited().parallel_requests == 3  # nothing here can change it
    dialog.parallel_link.click()
    assert not dialog.isVisible()
    server = window.page("server")
    assert window.current_page_key == "server"
    qtbot.waitUntil(server.form.parallel.hasFocus)
    assert server.form.parallel.value() == store.parallel_requests == 3
    assert server.form.parallel_hint.isVisibleTo(server)  # its explanation in view, not only a tooltip


def test_following_the_link_saves_what_was_edited_in_the_dialog_first(shell, qtbot):
    window = shell.window
    dialog = window.open_settings()
    dialog.log_level.setCurrentText("DEBUG")
    dialog.parallel_link.click()
    assert window.current_page_key == "server" and not dialog.isVisible()
    assert SettingsStore(app_paths().settings_file).load().log_level == "DEBUG"


def test_the_help_texts_are_whole_sentences():
    from app.ui.server_model import PARALLEL_HINT

    for text in (MEASURE_HINT, PARALLEL_HERE, SPECULATIVE_HINT, PARALLEL_HINT):
        sentences = [s.strip() for s in text.split(". ") if s.strip()]
        assert text.rstrip().endswith("."), text
        assert all(s[0].isupper() or s[0].isdigit() for s in sentences), text
    assert "1 answers one request at a time." in PARALLEL_HINT


def test_settings_import_mcp_servers_and_set_the_tool_step_limit(qtbot, tmp_path):
    import json
    import stat

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(dialog)
    assert dialog.mcp_servers.text() == "none yet" and dialog.tool_steps.value() == 10
    lmstudio = tmp_path / "mcp.json"
    lmstudio.write_text(json.dumps({"mcpServers": {"files": {"command": "npx", "env": {"API_KEY": "k"}}}}))
    dialog.import_mcp(lmstudio)
    assert dialog.mcp_servers.text() == "Imported 1. Now: files"
    written = paths.config / "mcp.json"
    assert '"files"' in written.read_text() and '"k"' not in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    dialog.import_mcp(broken)
    assert "is not JSON" in dialog.mcp_servers.text()
    dialog.tool_steps.setValue(4)
    dialog.accept()
    assert store.load().tool_steps == 4
