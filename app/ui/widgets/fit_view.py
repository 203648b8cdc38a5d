"""Will this model fit, and how fast: the planner's verdict, per-device bars and live context/KV controls."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QPainter, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.core.models.calibration import Correction
from app.core.models.devices import Device, Machine
from app.core.models.memory import KV_CACHE_TYPES, DeviceUse, LoadOptions
from app.core.models.planner import DraftFit, Plan, plan_load, projector_fit
from app.core.models.projector import ProjectorMemory
from app.core.models.spec import ModelSpec
from app.core.models.speed import SpeedPrediction, has_weights, image_seconds, predict_speed
from app.core.units import fmt_bytes
from app.ui.theme import set_verdict
from app.ui.widgets.stacked_bar import SEGMENTS, StackedMemoryBar, overflow_colour

logger = logging.getLogger(__name__)

MIN_SLIDER_CTX = 512
DEFAULT_TRAIN_CTX = 131072  # when the GGUF does not say
DEBOUNCE_MS = 30


def context_steps(n_ctx_train: int) -> list[int]:
    """Powers of two from 512 up to the trained context, which is always the last step."""
    top = n_ctx_train or DEFAULT_TRAIN_CTX
    steps, c = [], MIN_SLIDER_CTX
    while c < top:
        steps.append(c)
        c *= 2
    return steps + [top]


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 else f"{v:.1f}"


def speed_text(s: SpeedPrediction) -> str:
    return (
        f"≈ {fmt_rate(s.decode_tok_s)} tok/s decode ({fmt_rate(s.decode_tok_s_full_ctx)} tok/s at full "
        f"context), {fmt_rate(s.prefill_tok_s)} tok/s prompt — {s.basis}"
    )


def _swatch(colour: QColor, hatched: bool = False) -> QLabel:
    pix = QPixmap(10, 10)
    pix.fill(colour)
    if hatched:
        p = QPainter(pix)
        p.fillRect(pix.rect(), QBrush(QColor(0, 0, 0, 90), Qt.BrushStyle.BDiagPattern))
        p.end()
    label = QLabel()
    label.setPixmap(pix)
    return label


class FitView(QWidget):
    plan_changed = Signal(object)  # Plan, after every re-plan

    def __init__(
        self,
        spec: ModelSpec,
        machine: Machine,
        *,
        n_ctx: int = 8192,
        options: LoadOptions | None = None,
        correction: Correction | None = None,
        slots: int = 1,
        parent: QWidget | None = None,
        projector: ProjectorMemory | None = None,
    ) -> None:
        """`slots`: the parallel requests a load plans for (as many as fit beside the context, up to this);
        `projector`: the vision projector that loads with the model, counted in the bars and the verdict."""
        super().__init__(parent)
        self.spec = spec
        self.projector = projector
        self.projector_fit: DraftFit | None = None
        self.machine = machine
        self.slots = slots
        self.correction = correction
        self._base = options or LoadOptions()
        self.plan: Plan | None = None
        self.speed: SpeedPrediction | None = None  # None while the model does not fit
        self.bars: dict[str, StackedMemoryBar] = {}
        self.captions: dict[str, QLabel] = {}
        self.context_steps = context_steps(spec.n_ctx_train)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._replan)

        self.badge = QLabel()
        self.badge.setObjectName("fitBadge")
        self.ctx_note = QLabel()
        self.ctx_note.setObjectName("cardKey")
        head = QHBoxLayout()
        head.addWidget(self.badge)
        head.addWidget(self.ctx_note, 1)

        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, len(self.context_steps) - 1)
        self.slider.setPageStep(1)
        self.slider.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.slider.setEnabled(len(self.context_steps) > 1)
        self.slider.setAccessibleName("Context length")
        self.slider.setValue(self._step_index(n_ctx))
        self.slider.valueChanged.connect(self._on_slider)
        self.context_label = QLabel()
        self.context_label.setMinimumWidth(110)
        self.kv_combo = QComboBox()
        self.kv_combo.setAccessibleName("KV cache type")
        self.kv_combo.setToolTip("Quantized KV caches need flash attention, which is turned on with them")
        extra = [self._base.cache_type_k] if self._base.cache_type_k not in KV_CACHE_TYPES else []
        kv_types = [*KV_CACHE_TYPES, *extra]
        self.kv_combo.addItems(kv_types)
        self.kv_combo.setCurrentText(self._base.cache_type_k)
        self.kv_combo.currentTextChanged.connect(lambda _t: self._replan())
        controls = QGridLayout()
        controls.setColumnStretch(1, 1)
        for col, w in enumerate((_key("Context"), self.slider, self.context_label, _key("KV cache"), self.kv_combo)):
            controls.addWidget(w, 0, col)

        self._bars_layout = QVBoxLayout()
        self._bars_layout.setSpacing(3)
        self.legend_labels: list[QLabel] = []
        legend = QHBoxLayout()
        for _key_name, name, colour in SEGMENTS:
            legend.addWidget(_swatch(colour))
            legend.addWidget(self._legend_label(name))
        self._over_legend = (_swatch(overflow_colour(), hatched=True), self._legend_label("over budget"))
        for w in self._over_legend:
            legend.addWidget(w)
        legend.addStretch(1)

        self.explanation_label = QLabel()
        self.explanation_label.setObjectName("fitExplanation")
        self.explanation_label.setWordWrap(True)
        self.explanation_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.explanation_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.speed_label = QLabel()
        self.speed_label.setObjectName("fitSpeed")
        self.speed_label.setWordWrap(True)
        self.speed_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addLayout(controls)
        layout.addLayout(self._bars_layout)
        layout.addLayout(legend)
        layout.addWidget(self.explanation_label)
        layout.addWidget(self.speed_label)
        self._replan()

    # -- public --------------------------------------------------------------------------------
    @property
    def requested_ctx(self) -> int:
        return self.context_steps[self.slider.value()]

    @property
    def kv_type(self) -> str:
        return self.kv_combo.currentText()

    def set_context(self, n: int) -> None:
        """Move the slider to the largest step ≤ n and re-plan now."""
        self.slider.blockSignals(True)
        self.slider.setValue(self._step_index(n))
        self.slider.blockSignals(False)
        self._replan()

    def set_machine(self, machine: Machine) -> None:
        self.machine = machine
        self._replan()

    def set_kv_type(self, kv_type: str) -> None:
        if self.kv_combo.findText(kv_type) < 0:
            self.kv_combo.addItem(kv_type)
        self.kv_combo.setCurrentText(kv_type)  # re-plans through currentTextChanged

    def current_options(self) -> LoadOptions:
        kv = self.kv_type
        # llama.cpp only quantizes the V cache with flash attention on.
        flash = self._base.flash_attn or kv not in ("f16", "f32", "bf16")
        return self._base.model_copy(
            update={
                "n_ctx": self.requested_ctx,
                "cache_type_k": kv,
                "cache_type_v": kv,
                "flash_attn": flash,
                "n_seq": 1,  # one conversation's plan; the slots beside it come from `slots`
            }
        )

    def text(self) -> str:
        """All visible text, for tests and accessibility."""
        lines = [
            self.badge.text(),
            self.ctx_note.text(),
            f"Context {self.context_label.text()}",
            f"KV cache {self.kv_type}",
        ]
        lines += [caption.text() for caption in self.captions.values()]
        lines += [w.text() for w in self.legend_labels if not w.isHidden()]
        lines += [self.explanation_label.text(), self.speed_label.text()]
        return "\n".join(s for s in lines if s)

    # -- internals -----------------------------------------------------------------------------
    def _step_index(self, n: int) -> int:
        fitting = [i for i, c in enumerate(self.context_steps) if c <= n]
        return fitting[-1] if fitting else 0

    def _legend_label(self, text: str) -> QLabel:
        label = _key(text)
        self.legend_labels.append(label)
        return label

    def _on_slider(self, _value: int) -> None:
        self.context_label.setText(f"{self.requested_ctx:,} tokens")
        self._timer.start()  # debounce: a drag re-plans once it pauses

    def _replan(self) -> None:
        self._timer.stop()
        plan = plan_load(
            self.spec, self.machine, n_ctx=self.requested_ctx, options=self.current_options(), max_slots=self.slots
        )
        self.plan = plan
        self.speed = predict_speed(self.spec, plan, self.correction) if plan.fits and has_weights(self.spec) else None
        self.projector_fit = projector_fit(plan, self.projector) if self.projector is not None else None
        self._show(plan)
        logger.debug("re-planned %s at %d ctx: %s", self.spec.name, plan.options.n_ctx, plan.verdict)
        self.plan_changed.emit(plan)

    def _show(self, plan: Plan) -> None:
        beside = self.projector_fit
        if beside is not None and plan.fits and not beside.fits:
            self.badge.setText("Does not fit with its vision projector")
            set_verdict(self.badge, "no_fit")
        else:
            self.badge.setText(plan.label)
            set_verdict(self.badge, plan.verdict)
        self.context_label.setText(f"{self.requested_ctx:,} tokens")
        if plan.ctx_reduced:
            self.ctx_note.setText(f"runs at {plan.options.n_ctx:,} context to fit")
        elif not plan.fits:
            self.ctx_note.setText(f"not even at {plan.options.n_ctx:,} context")
        elif plan.options.flash_attn:
            self.ctx_note.setText("flash attention on")
        else:
            self.ctx_note.setText("")
        self._show_bars(plan, plan.device_rows(beside.estimate if beside is not None else None))
        overflowing = any(bar.overflow_bytes for bar in self.bars.values())
        for w in self._over_legend:
            w.setHidden(not overflowing)
        extra = f"\n→ With {beside.line}" if beside is not None and plan.fits else ""
        self.explanation_label.setText(plan.explanation + extra)
        if self.speed is None and not has_weights(self.spec):
            self.speed_label.setText("Speed: not predicted, the file holds no model weights")
        elif self.speed is None:
            self.speed_label.setText("Speed: not predicted, the model does not fit")
        else:
            seconds = image_seconds(self.spec, plan, self.projector, self.correction) if self.projector else None
            image = f" · ~{seconds:.1f} s to read an image" if seconds is not None else ""
            self.speed_label.setText(speed_text(self.speed) + image)

    def _show_bars(self, plan: Plan, rows: list[tuple[Device, DeviceUse]]) -> None:
        names = [d.name for d, _ in rows]
        if names != list(self.bars):
            self._clear_bars()
            for name in names:
                caption = QLabel()
                caption.setObjectName("fitCaption")
                bar = StackedMemoryBar()
                bar.setAccessibleName(f"{name} memory")
                if self.bars:
                    self._bars_layout.addSpacing(4)
                self._bars_layout.addWidget(caption)
                self._bars_layout.addWidget(bar)
                self.captions[name], self.bars[name] = caption, bar
        for device, use in rows:
            pool = device.label or "memory"
            self.bars[device.name].set_values(use.parts(), device.budget_bytes, pool)
            # The CPU's count includes the output layer when it stays on the host.
            n = plan.n_layers - plan.layers_on_gpu if device.kind == "cpu" else use.layers
            layers = f" · {n} layer{'s' if n != 1 else ''}" if self.machine.gpus else ""
            shared = " (shared)" if self.machine.unified else ""
            over = self.bars[device.name].overflow_bytes
            tail = f" — {fmt_bytes(over, 2)} over" if over else ""
            self.captions[device.name].setText(
                f"{device.name} · {pool}{shared}: {fmt_bytes(use.total, 2)} of "
                f"{fmt_bytes(device.budget_bytes, 1)} usable{layers}{tail}"
            )

    def _clear_bars(self) -> None:
        while self._bars_layout.count():
            item = self._bars_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.bars.clear()
        self.captions.clear()


def _key(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("cardKey")
    return label
