"""The models loaded now, one row each: memory, status, when it unloads, Pin and Eject; and the pool's latest
notice ("Unloaded b.gguf to make room for c.gguf"), which is how the user learns why a model went."""

from __future__ import annotations

import logging

import shiboken6
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.core.errors import HearthError
from app.core.runtime.job_host import JobHost, Resident
from app.core.runtime.jobs import HostEvent, JobFailed, UnloadJob
from app.ui.bridge import EventBridge
from app.ui.theme import set_status
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.resident_text import leaves_text, leaves_tooltip, memory_text, status_text

logger = logging.getLogger(__name__)

NOTICE_MS = 10_000  # how long "Unloaded … to make room for …" stays
TICK_MS = 1000


class ResidentRow(QWidget):
    """One loaded model. `pin_toggled(key, pinned)` and `eject_clicked(key)` say what the user asked."""

    pin_toggled = Signal(str, bool)
    eject_clicked = Signal(str)

    def __init__(self, key: str, *, can_pin: bool, compact: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.name = ElidedLabel()  # a long file name elides; its tooltip has the whole of it
        self.focus = QLabel("· in chat")
        self.focus.setToolTip("The model the chat (and a request that names no model) runs on")
        self.memory, self.status, self.leaves = QLabel(), QLabel(), QLabel()
        for label in (self.focus, self.memory, self.leaves):
            set_status(label, "muted")
        self.pin = QToolButton()
        self.pin.setText("Pin")
        self.pin.setCheckable(True)
        self.pin.setVisible(can_pin)  # a single engine host has one model and nothing to pin it against
        self.pin.toggled.connect(self._show_pin)
        self.pin.toggled.connect(lambda on: self.pin_toggled.emit(self.key, on))
        self._show_pin(False)
        # One action under one word wherever a model is unloaded (the chat's bar has no second button for it).
        self.eject = QToolButton()
        self.eject.setText("Unload")
        self.eject.setToolTip("Unload this model now and free its memory (even if it is pinned)")
        self.eject.clicked.connect(lambda: self.eject_clicked.emit(self.key))
        metrics = self.fontMetrics()
        self.name.setMinimumWidth(metrics.horizontalAdvance("M" * 8))  # a few letters even when squeezed
        if not compact:  # columns that line up, and a countdown that does not shift what is beside it
            for label, wide in (
                (self.memory, "1023.9 GiB"),
                (self.status, "Generating 4 of 4"),
                (self.leaves, "unloads in 59 min"),
            ):
                label.setMinimumWidth(metrics.horizontalAdvance(wide) + 8)  # minimum: a narrow page does not scroll
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(12 if compact else 6)  # compact: the spacing tells its words apart, not columns
        row.addWidget(self.name)
        row.addWidget(self.focus)
        row.addStretch(1)  # "· in chat" beside the name; the long names elide first
        for w in (self.memory, self.status, self.leaves, self.pin, self.eject):
            row.addWidget(w)

    def show_resident(self, r: Resident, unloading: bool) -> None:
        self.name.setText(r.name)
        self.focus.setVisible(r.focus)
        self.memory.setText(memory_text(r.memory_bytes))
        self.memory.setToolTip("What its load was planned to hold" if r.memory_bytes else "Not planned")
        self.status.setText("Unloading…" if unloading else status_text(r))
        self.leaves.setText(leaves_text(r))
        self.leaves.setToolTip(leaves_tooltip(r))
        self.pin.blockSignals(True)  # showing the pool's pin is not the user asking for one
        self.pin.setChecked(r.pinned)
        self.pin.blockSignals(False)
        self._show_pin(r.pinned)
        self.pin.setEnabled(not unloading)
        self.eject.setEnabled(not unloading)

    def _show_pin(self, pinned: bool) -> None:
        """The button says what a click does next: Pin, or Unpin once pinned."""
        self.pin.setText("Unpin" if pinned else "Pin")
        self.pin.setToolTip(
            "Pinned: never unloaded to make room, nor for being idle. Unpin to let it go when room is needed"
            if pinned
            else "Keep it loaded: never unloaded to make room, nor for being idle"
        )

    def texts(self) -> list[str]:
        """What the row says, for tests and accessibility."""
        shown = [self.name.full_text(), self.focus.text() if not self.focus.isHidden() else ""]
        return [t for t in (*shown, self.memory.text(), self.status.text(), self.leaves.text()) if t]


class LoadedModelsStrip(QWidget):
    """The host's residents (a ModelPool's models, or a single EngineHost's one). `compact`: no title, and
    hidden while nothing is loaded (the chat's model bar already says so)."""

    _unload_failed = Signal(str, str)  # (key, why), from the host's thread

    def __init__(
        self, host: JobHost, *, compact: bool = False, notice_ms: int = NOTICE_MS, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.host = host
        self.compact = compact
        self.rows: dict[str, ResidentRow] = {}
        self._unloading: set[str] = set()
        # A single EngineHost has no residents_changed; its state_changed says as much for its one model.
        changes = getattr(host, "residents_changed", None) or host.state_changed
        self._can_pin = hasattr(host, "residents_changed")

        self.title = QLabel("Loaded models")
        self.title.setObjectName("cardTitle")
        self.title.setVisible(not compact)
        self.empty = QLabel("No model loaded")
        set_status(self.empty, "muted")
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        set_status(self.notice, "muted")
        self.notice.setVisible(False)
        self._rows_layout = QVBoxLayout()
        self._rows_layout.setSpacing(2 if compact else 4)
        # Compact, over the chat on a short window: the model in chat only, and a "2 more loaded…" link that
        # shows the others (set_max_rows), so the thread keeps its height. A compact strip's owner places the
        # link on a line it already has (the chat's model bar: its status line).
        self.max_rows = 0  # the most rows shown until "more" is clicked (0: all)
        self.expanded = False
        self.more = QLabel(self)  # the strip's until placed: never placed, it goes with the strip
        self.more.setObjectName("loadedMore")
        self.more.setTextFormat(Qt.TextFormat.RichText)
        self.more.linkActivated.connect(lambda _link: self.show_all(not self.expanded))
        self.more.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0 if compact else 6, 0, 0)  # the title apart from what is above it
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self.empty)
        layout.addLayout(self._rows_layout)
        if not compact:
            layout.addWidget(self.more, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.notice)

        self._tick = QTimer(self, interval=TICK_MS)
        self._tick.timeout.connect(self.refresh)
        self._notice_timer = QTimer(self, singleShot=True, interval=notice_ms)
        self._notice_timer.timeout.connect(lambda: self.show_notice(""))
        # Changes come from any thread (engine threads, the residency thread); a burst is one refresh.
        self._changes = EventBridge(changes, self, coalesce_key=lambda _: None)
        self._changes.fired.connect(lambda _: self.refresh())
        if (notice := getattr(host, "notice", None)) is not None:
            self._notices = EventBridge(notice, self)
            self._notices.fired.connect(self.show_notice)
        self._unload_failed.connect(self._eject_failed)  # queued: a sink runs on the host's thread
        self.refresh()

    def refresh(self) -> None:
        """UI thread: the rows as the host has them now."""
        residents = self.host.residents()
        keys = {r.key for r in residents}
        for key in [k for k in self.rows if k not in keys]:
            self.rows.pop(key).deleteLater()
        self._unloading &= keys  # gone: a later load of the same file is not "Unloading…"
        # Rows keep their place (the order they came in): sorted by last use they would jump with each reply.
        for r in residents:
            row = self.rows.get(r.key)
            if row is None:
                row = self.rows[r.key] = ResidentRow(r.key, can_pin=self._can_pin, compact=self.compact)
                row.pin_toggled.connect(self._pin)
                row.eject_clicked.connect(self.eject)
                self._rows_layout.addWidget(row)
            row.show_resident(r, r.key in self._unloading)
        self.empty.setVisible(not residents and not self.compact)
        self._fit_rows()
        self._show_self()
        counting = any(r.idle_left_s is not None for r in residents)
        if counting and self.isVisible():
            if not self._tick.isActive():
                self._tick.start()
        else:
            self._tick.stop()

    def set_max_rows(self, rows: int) -> None:
        """Compact: show at most `rows` rows (0: all of them), the model in chat first; a "more" button
        shows the others."""
        self.max_rows = rows
        self._fit_rows()

    def show_all(self, expanded: bool) -> None:
        """The "more" link: every row (True), or only `max_rows` of them again."""
        self.expanded = expanded
        self._fit_rows()

    def _fit_rows(self) -> None:
        rows = list(self.rows.values())
        limited = 0 < self.max_rows < len(rows)
        if limited and not self.expanded:
            # The model in chat first, then the others in their order.
            ordered = sorted(rows, key=lambda r: r.focus.isHidden())
            shown = set(map(id, ordered[: self.max_rows]))
            self.more.setText(f"<a href='more'>{len(rows) - len(shown)} more loaded…</a>")
            self.more.setToolTip("Show every loaded model: its memory, Pin and Unload")
        else:
            shown = set(map(id, rows))
            self.more.setText("<a href='fewer'>show fewer</a>")
            self.more.setToolTip("")
        for row in rows:
            row.setVisible(id(row) in shown)
        self.more.setVisible(limited)

    def show_notice(self, text: str) -> None:
        """UI thread: `text` for a while ("" clears it)."""
        self.notice.setText(text)
        self.notice.setVisible(bool(text))
        if text:
            self._notice_timer.start()
        self._show_self()

    def _show_self(self) -> None:
        if not self.compact:
            return
        if not self.rows and self.notice.isHidden():
            self.hide()
        elif self.isHidden() and self.parentWidget() is not None:  # without a parent, show() opens a window
            self.show()

    # -- what the user asks ----------------------------------------------------------------------
    def _pin(self, key: str, pinned: bool) -> None:
        if not self.host.keep(key, pin=pinned):
            self.show_notice("That model is no longer loaded.")
        self.refresh()  # a plain host emits nothing for a pin; the row shows what the host holds

    def eject(self, key: str) -> None:
        """Unload `key`; its row says "Unloading…" until the host no longer lists it."""
        name = self.rows[key].name.full_text() if key in self.rows else key

        def ended(event: HostEvent) -> None:
            """Any thread (the host's, or this one when the host refuses at once)."""
            if isinstance(event, JobFailed) and shiboken6.isValid(self):
                self._unload_failed.emit(key, f"Could not unload {name}: {event.error_message}")

        self._unloading.add(key)
        try:
            self.host.submit(UnloadJob(model=key, even_pinned=True), ended)  # the person asked: a pin yields
        except HearthError as exc:  # the host's queue is full, or it has shut down
            self._eject_failed(key, f"Could not unload {name}: {exc}")
            return
        self.refresh()

    def _eject_failed(self, key: str, text: str) -> None:
        """UI thread."""
        logger.warning("%s", text)
        self._unloading.discard(key)
        self.show_notice(text)
        self.refresh()

    # -- the countdowns tick only while they can be seen ------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        self.refresh()

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt API)
        super().hideEvent(event)
        self._tick.stop()

    def row_texts(self) -> list[list[str]]:
        """Each row's text, top to bottom (tests, accessibility)."""
        return [self.rows[k].texts() for k in self.rows]
