"""Per-conversation settings: system prompt, presets (pick, save, update, delete), sampling and
context length. Edits are saved to the conversation as they happen, on the chat writer thread; the
panel keeps showing them meanwhile, and reads through ChatOperations see them before the commit."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.models import ChatStoreError, Conversation, Preset
from app.core.chat.operations import ChatOperations
from app.core.chat.store import ChatStore
from app.core.engines.base import SamplingParams
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)

SAVE_DELAY_MS = 400  # typing in the system prompt saves once, after a pause


def _dspin(lo: float, hi: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    w = QDoubleSpinBox()
    w.setRange(lo, hi)
    w.setSingleStep(step)
    w.setDecimals(decimals)
    return w


def _spin(lo: int, hi: int, special: str | None = None) -> QSpinBox:
    w = QSpinBox()
    w.setRange(lo, hi)
    if special:
        w.setSpecialValueText(special)
    return w


class SettingsPanel(QWidget):
    """`set_conversation(conv)` loads a conversation's settings; `saved(Conversation)` once a save is
    committed; `error(text)` when a write failed (UI thread, both)."""

    saved = Signal(object)
    error = Signal(str)

    def __init__(
        self, store: ChatStore, chats: ChatOperations, writes: TaskRunner, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("chatSettings")
        self.store, self.chats, self.writes = store, chats, writes
        self.conv: Conversation | None = None
        self._loading = False
        self._dirty = False

        self.presets = QComboBox()
        self.presets.activated.connect(self._preset_picked)
        self.save_preset = QPushButton("Save as…")
        self.save_preset.clicked.connect(self._save_as)
        self.update_preset = QPushButton("Update")
        self.update_preset.setToolTip("Overwrite the selected preset with these settings")
        self.update_preset.clicked.connect(self.update_selected_preset)
        self.delete_preset = QPushButton("Delete")
        self.delete_preset.setProperty("role", "destructive")
        self.delete_preset.clicked.connect(self.delete_selected_preset)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("System prompt (optional)")
        self.system_prompt.setMaximumHeight(110)
        self.temperature = _dspin(0.0, 5.0, 0.05)
        self.top_p = _dspin(0.01, 1.0, 0.05)
        self.top_k = _spin(0, 1000, "off")
        self.min_p = _dspin(0.0, 1.0, 0.01)
        self.repeat_penalty = _dspin(0.0, 3.0, 0.05)
        self.max_tokens = _spin(0, 1_000_000, "no limit")
        self.max_tokens.setToolTip("The most tokens a reply may have; with no limit, until the context is full")
        self.seed = _spin(-1, 2_147_483_647, "random")
        self.context_length = _spin(0, 1_048_576, "the model's")
        self.context_length.setSingleStep(1024)

        row = QHBoxLayout()  # the buttons under the list, not beside it: a narrow panel fits them
        for b in (self.save_preset, self.update_preset, self.delete_preset):
            row.addWidget(b)
        row.addStretch(1)
        form = QFormLayout()
        # Fields take the panel's width, so the panel is as narrow as its longest label and a number.
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top P", self.top_p)
        form.addRow("Top K", self.top_k)
        form.addRow("Min P", self.min_p)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        form.addRow("Context length", self.context_length)
        fields = self.number_fields()
        height = max(w.sizeHint().height() for w in fields)
        for w in fields:  # one height for whole and decimal numbers alike
            w.setFixedHeight(height)
            w.setMinimumWidth(0)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Preset</b>"))
        layout.addWidget(self.presets)
        layout.addLayout(row)
        layout.addWidget(QLabel("<b>System prompt</b>"))
        layout.addWidget(self.system_prompt)
        layout.addWidget(QLabel("<b>Sampling</b>"))
        layout.addLayout(form)
        layout.addStretch(1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SAVE_DELAY_MS)
        self._timer.timeout.connect(self.save)
        self.system_prompt.textChanged.connect(self._changed)
        for w in fields:
            w.valueChanged.connect(self._changed)
        self.reload_presets()
        self.setEnabled(False)

    def number_fields(self) -> list[QSpinBox | QDoubleSpinBox]:
        return [
            self.temperature,
            self.top_p,
            self.top_k,
            self.min_p,
            self.repeat_penalty,
            self.max_tokens,
            self.seed,
            self.context_length,
        ]

    # -- values ---------------------------------------------------------------------------------
    def sampling(self) -> SamplingParams:
        base = self.conv.sampling if self.conv is not None else SamplingParams()
        return base.model_copy(
            update={
                "temperature": self.temperature.value(),
                "top_p": self.top_p.value(),
                "top_k": self.top_k.value(),
                "min_p": self.min_p.value(),
                "repeat_penalty": self.repeat_penalty.value(),
                "max_tokens": self.max_tokens.value() or None,
                "seed": None if self.seed.value() < 0 else self.seed.value(),
            }
        )

    def context_value(self) -> int | None:
        return self.context_length.value() or None

    def set_conversation(self, conv: Conversation | None) -> None:
        self.save()  # pending edits belong to the conversation they were made in
        self.conv = conv
        self.setEnabled(conv is not None)
        if conv is None:
            return
        self._loading = True
        try:
            s = conv.sampling
            self.system_prompt.setPlainText(conv.system_prompt)
            self.temperature.setValue(s.temperature)
            self.top_p.setValue(s.top_p)
            self.top_k.setValue(s.top_k)
            self.min_p.setValue(s.min_p)
            self.repeat_penalty.setValue(s.repeat_penalty)
            self.max_tokens.setValue(s.max_tokens or 0)
            self.seed.setValue(-1 if s.seed is None else s.seed)
            self.context_length.setValue(conv.context_length or 0)
            ids = [self.presets.itemData(i) for i in range(self.presets.count())]
            self.presets.setCurrentIndex(ids.index(conv.preset_id) if conv.preset_id in ids else 0)
        finally:
            self._loading = False

    def _changed(self, *_: object) -> None:
        if not self._loading and self.conv is not None:
            self._dirty = True
            self._timer.start()

    def save(self) -> None:
        """Write pending edits now (also called before a send, so the request uses them): submitted
        to the writer thread; a failure leaves them on screen, to be saved with the next one."""
        self._timer.stop()
        if not self._dirty or self.conv is None:
            return
        self._dirty = False
        conv_id = self.conv.id
        changes: dict[str, Any] = {
            "system_prompt": self.system_prompt.toPlainText(),
            "sampling": self.sampling(),
            "context_length": self.context_value(),
        }
        self.conv = replace(self.conv, **changes)
        self.writes.watch(
            self.chats.update_settings(conv_id, **changes),
            self.saved.emit,
            lambda exc: self._save_failed(conv_id, exc),
            owner=self,
        )

    def _save_failed(self, conv_id: int, exc: BaseException) -> None:
        """UI thread."""
        if self.conv is not None and self.conv.id == conv_id:
            self._dirty = True  # nothing typed is lost: the next save writes it again
        self.error.emit(str(exc))

    def _show_stored(self, conv_id: int) -> None:
        """Show `conv_id`'s settings as reads see them now, if it is still the one shown."""
        if self.conv is None or self.conv.id != conv_id:
            return
        try:
            self.set_conversation(self.chats.get_conversation(conv_id))
        except ChatStoreError:  # deleted meanwhile: the page opens another one
            logger.debug("conversation %d is gone; its settings are not shown again", conv_id)

    # -- presets --------------------------------------------------------------------------------
    def reload_presets(self, select: int | None = None) -> None:
        self.presets.clear()
        self.presets.addItem("(no preset)", None)
        for p in self.store.list_presets():
            self.presets.addItem(p.name + (" (built-in)" if p.builtin else ""), p.id)
        if select is not None:
            ids = [self.presets.itemData(i) for i in range(self.presets.count())]
            if select in ids:
                self.presets.setCurrentIndex(ids.index(select))

    def pick_preset(self, preset_id: int) -> None:
        """Shown at once; written on the writer thread (the panel goes back if that fails)."""
        if self.conv is None:
            return
        self.save()
        conv_id = self.conv.id
        applying = self.chats.apply_preset(conv_id, preset_id)
        self._show_stored(conv_id)

        def failed(exc: BaseException) -> None:
            self.error.emit(str(exc))
            self._show_stored(conv_id)

        self.writes.watch(applying, self.saved.emit, failed, owner=self)

    def _preset_picked(self, index: int) -> None:
        pid = self.presets.itemData(index)
        if pid is not None:
            self.pick_preset(pid)

    def save_as_preset(self, name: str) -> Future:
        """Future[Preset]; once it is saved, it is listed, selected and this conversation's preset."""
        conv_id = self.conv.id if self.conv is not None else None
        saving = self.chats.save_preset(name, self.system_prompt.toPlainText(), self.sampling(), conv_id=conv_id)

        def saved(p: Preset) -> None:
            self.reload_presets(select=p.id)
            if self.conv is not None and self.conv.id == conv_id:
                self.conv = replace(self.conv, preset_id=p.id)

        self.writes.watch(saving, saved, lambda exc: self.error.emit(str(exc)), owner=self)
        return saving

    def _save_as(self) -> None:
        name, ok = QInputDialog.getText(self, "Save preset", "Preset name:")
        if ok and name.strip():
            self.save_as_preset(name)

    def _selected_own_preset(self, refusal: str) -> int | None:
        """The selected preset's id, unless none is selected or it is built-in (then says `refusal`)."""
        pid = self.presets.currentData()
        if pid is None:
            return None
        try:
            builtin = self.store.get_preset(pid).builtin
        except ChatStoreError as exc:
            self.error.emit(str(exc))
            return None
        if builtin:
            self.error.emit(refusal)
            return None
        return pid

    def update_selected_preset(self) -> None:
        """Overwrite the selected preset with the panel's prompt and sampling."""
        pid = self._selected_own_preset("Built-in presets cannot be changed; save a copy with “Save as…”.")
        if pid is not None:
            updating = self.chats.update_preset(
                pid, system_prompt=self.system_prompt.toPlainText(), sampling=self.sampling()
            )
            self.writes.watch(updating, None, lambda exc: self.error.emit(str(exc)), owner=self)

    def delete_selected_preset(self) -> None:
        pid = self._selected_own_preset("Built-in presets cannot be deleted.")
        if pid is not None:
            self.writes.watch(
                self.chats.delete_preset(pid),
                lambda _r: self.reload_presets(),
                lambda exc: self.error.emit(str(exc)),
                owner=self,
            )
