"""Picking a model's chat template in the app: My Models' "Chat template…" (Auto says what Auto means for the
model; a bad pasted template is refused in the dialog and nothing is kept; a format is kept in the settings),
and the chat's Advanced form (Auto / the formats / Custom…), whose pick the load carries and remembers."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialog

from app.core.library import Library, import_path
from app.core.runtime.chat_templates import TemplatePrefs
from app.core.settings import SettingsStore
from tests.ui.hub_gui_fixtures import pool_tasks  # noqa: F401

pytest.importorskip("gguf", reason="the gguf package writes the tiny GGUF models")


@pytest.fixture
def setup(tmp_path):
    """A library holding a Gemma 3 file without a template, and the picks saved to a settings file."""
    from tests.fixtures.tiny_gguf import write_tiny_gemma3_gguf

    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, write_tiny_gemma3_gguf(tmp_path / "gemma" / "tiny-gemma-3.gguf")).imported[0]
    store = SettingsStore(tmp_path / "settings.json")
    now = {"settings": store.load()}

    def save(settings):  # as the app's: what reads see is the saved settings once the file has them
        now["settings"] = settings
        store.save(settings)

    prefs = TemplatePrefs(lambda: now["settings"], save)
    yield library, model, prefs, tmp_path / "settings.json"
    library.close()


def saved_picks(path):
    return SettingsStore(path).load().chat_templates


def test_my_models_offers_chat_template_and_the_dialog_refuses_a_bad_template(qtbot, setup, pool_tasks):  # noqa: F811
    from app.ui.chat_template_dialog import CUSTOM, ChatTemplateDialog
    from app.ui.library_page import LibraryPage

    library, model, prefs, settings_file = setup
    page = LibraryPage(library, pool_tasks, templates=prefs)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    actions = [a.text() for a in page.context_menu(0).actions()]
    assert "Chat template…" in actions

    dialog = ChatTemplateDialog(model, prefs, pool_tasks)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "Gemma's format for architecture gemma3" in dialog.auto_note.text(), timeout=5_000)
    assert dialog.choice.currentText() == "Auto" and not dialog.text.isVisible()
    dialog.choice.setCurrentIndex(dialog.choice.findData(CUSTOM))
    dialog.text.setPlainText("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    qtbot.waitUntil(lambda: not dialog.error.isHidden(), timeout=5_000)
    assert dialog.error.text().startswith("This template cannot be used:") and "line 2" in dialog.error.text()
    assert dialog.result() != QDialog.DialogCode.Accepted and saved_picks(settings_file) == {}

    dialog.choice.setCurrentIndex(dialog.choice.findData("gemma"))
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    qtbot.waitUntil(lambda: dialog.result() == QDialog.DialogCode.Accepted, timeout=5_000)
    assert dialog.saved == "gemma" and saved_picks(settings_file) == {model.id: "gemma"}
    again = ChatTemplateDialog(model, prefs, pool_tasks)  # opened again, it shows the pick
    qtbot.addWidget(again)
    assert again.choice.currentData() == "gemma"


def test_the_chats_advanced_form_picks_a_template_the_load_carries_and_remembers(qtbot, setup, pool_tasks, monkeypatch):  # noqa: F811
    from app.core.runtime.engine_host import EngineHost
    from app.ui.chat.advanced_form import PASTE
    from app.ui.chat.model_bar import ModelBar
    from tests.fixtures.fake_engine import registry_with_fake
    from tests.ui.chat_harness import no_preflight

    library, model, prefs, settings_file = setup
    host = EngineHost(registry_with_fake(), preflight=no_preflight, name="test-template-bar")
    bar = ModelBar(host, library, pool_tasks, templates=prefs)
    qtbot.addWidget(bar)
    try:
        combo = bar.advanced.template
        texts = [combo.itemText(i) for i in range(combo.count())]
        assert texts[0] == "Auto" and "Gemma" in texts and "ChatML" in texts and texts[-1] == "Custom…"
        specs = []
        monkeypatch.setattr(bar, "load_spec", lambda spec, fmt, name=None: specs.append(spec) or True)
        bar.load_selected()
        assert specs[-1].chat_template is None  # Auto: the engine picks (here Gemma's format, by architecture)
        combo.setCurrentIndex(combo.findData("llama3"))
        bar.load_selected()
        assert specs[-1].chat_template == "llama3"
        qtbot.waitUntil(lambda: saved_picks(settings_file) == {model.id: "llama3"}, timeout=5_000)
        bar.advanced.set_template(None)
        bar._picked(bar.picker.currentIndex())  # picked again: the form shows the model's saved pick
        assert combo.currentData() == "llama3"
        asked = []
        monkeypatch.setattr(bar, "edit_template", lambda: asked.append(True))
        bar.advanced.custom_template_requested.disconnect()
        bar.advanced.custom_template_requested.connect(bar.edit_template)
        combo.activated.emit(combo.findData(PASTE))  # "Custom…" opens the dialog; the shown pick stays
        assert asked == [True] and combo.currentData() == "llama3"
        pasted = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        bar.advanced.set_template(pasted)
        assert combo.currentText() == "Custom (pasted)" and bar.advanced.template_pick() == pasted
    finally:
        assert host.shutdown(5.0)
