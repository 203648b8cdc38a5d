"""The model bar's Advanced popover: the planner's defaults for a load, and the user's overrides of them."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QPushButton, QSpinBox, QWidget

from app.core.models.memory import KV_CACHE_TYPES
from app.core.settings import MAX_PARALLEL_REQUESTS
from app.ui.chat.load_plan import LoadPlanDefaults


class AdvancedForm(QWidget):
    """The Advanced popover: overrides of the planner's defaults."""

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
        self.reset = QPushButton("Planner defaults")
        form.addRow("Context length", self.n_ctx)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("Parallel slots", self.slots)
        form.addRow("Speculative decoding", self.speculative)
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

    def speculation(self) -> tuple[str, str, str]:
        """(LoadSpec.speculative, draft model id, its path) as chosen."""
        data = self.speculative.currentData()
        return data if data is not None else ("off", "", "")
