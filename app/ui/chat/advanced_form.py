"""The model bar's Advanced popover: the planner's defaults for a load, and the user's overrides of them."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QPushButton, QSpinBox, QWidget

from app.core.models.memory import KV_CACHE_TYPES
from app.core.runtime.chat_templates import AUTO, format_options
from app.core.settings import MAX_PARALLEL_REQUESTS
from app.ui.chat.model_bar_defaults import LoadPlanDefaults

PASTE = "\0paste"  # the template combo's "Custom…": open the dialog to paste one


class AdvancedForm(QWidget):
    """The Advanced popover: overrides of the planner's defaults. `custom_template_requested` when the
    chat template's "Custom…" is chosen (the model bar opens the dialog)."""

    custom_template_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(256, 1_048_576)
        self.n_ctx.setSingleStep(1024)
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("all")
        self.kv_type = QComboBox()
        self.kv_type.addItems(KV_CACHE_TYPES)
        self.flash_attn = QCheckBox("Flash attention")
        self.slots = QSpinBox()
        self.slots.setRange(1, MAX_PARALLEL_REQUESTS)
        self.slots.setToolTip("Replies generated at once (chat and API); each slot holds a whole context's KV cache")
        self.speculative = QComboBox()
        self.speculative.setToolTip(
            "Speculative decoding (lossless: the reply is the one plain decoding gives). Prompt lookup drafts "
            "from text already in the conversation and keeps drafting only while it measures faster; a draft "
            "model is a smaller one from your library with the same tokenizer"
        )
        self.template = QComboBox()
        self.template.setToolTip(
            "How the conversation is written into the prompt: Auto uses the model file's template, or its "
            "family's format when the file has none; the pick is kept for this model, on the API too"
        )
        self.template.activated.connect(self._template_activated)
        self.set_template(None)
        self.reset = QPushButton("Planner defaults")
        form.addRow("Context length", self.n_ctx)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("Parallel slots", self.slots)
        form.addRow("Speculative decoding", self.speculative)
        form.addRow("Chat template", self.template)
        form.addRow("", self.flash_attn)
        form.addRow("", self.reset)

    def set_values(self, d: LoadPlanDefaults) -> None:
        self.n_ctx.setValue(d.n_ctx)
        self.gpu_layers.setValue(d.n_gpu_layers)
        self.kv_type.setCurrentText(d.kv_type if d.kv_type in KV_CACHE_TYPES else "f16")
        self.flash_attn.setChecked(d.flash_attn)
        self.slots.setValue(d.slots)
        self.speculative.clear()
        self.speculative.addItem("Off", ("off", "", ""))
        if d.ngram:
            self.speculative.addItem("Prompt lookup (n-gram)", ("auto", "", ""))
        for draft_id, name, path in d.drafts:
            self.speculative.addItem(f"Draft model: {name}", ("draft", draft_id, path))
        want = ("draft", d.draft) if d.draft else (d.speculative if d.speculative == "off" else "auto", "")
        for i in range(self.speculative.count()):
            if self.speculative.itemData(i)[:2] == want:
                self.speculative.setCurrentIndex(i)

    def set_template(self, pick: str | None) -> None:
        """Show the model's chat template pick: None/AUTO, a format's name, or a pasted template."""
        self.template.clear()
        self.template.addItem("Auto", AUTO)
        names = [name for name, _label in format_options()]
        for name, label in format_options():
            self.template.addItem(label, name)
        if pick and pick not in names:
            self.template.addItem("Custom (pasted)", pick)
        self.template.addItem("Custom…", PASTE)
        index = self.template.findData(pick or AUTO)
        self.template.setCurrentIndex(index if index >= 0 else 0)
        self._template_shown = self.template.currentIndex()

    def template_pick(self) -> str | None:
        """The chat template chosen: None for Auto, else a format's name or a pasted template."""
        data = self.template.currentData()
        return None if data in (None, AUTO, PASTE) else str(data)

    def _template_activated(self, index: int) -> None:
        if self.template.itemData(index) == PASTE:
            self.template.setCurrentIndex(self._template_shown)  # until a template is saved
            self.custom_template_requested.emit()
        else:
            self._template_shown = index

    def speculation(self) -> tuple[str, str, str]:
        """(LoadSpec.speculative, draft model id, its path) as chosen."""
        data = self.speculative.currentData()
        return data if data is not None else ("off", "", "")
