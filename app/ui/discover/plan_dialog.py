""" "Plan a server for it": for a model that will not fit this machine, pick the hardware (a GPU type and how
many, or an Apple Ultra), the context and the users; read what it takes (weights and KV per GPU, the
parallel layout, the quantization those GPUs have kernels for, the engine and why) and copy the launch
command. The model's shape is read from the Hub on the pool; planning is pure arithmetic."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.deploy.errors import PlanError
from app.core.deploy.plan import DTYPES, DeployPlan, make_plan
from app.core.deploy.report import format_plan
from app.core.deploy.shape import ModelShape
from app.core.deploy.targets import all_targets, find_target
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status
from app.ui.widgets.message_label import MessageLabel, as_sentences

logger = logging.getLogger(__name__)

DEFAULT_TARGET = "h100"
DEFAULT_CTX = 32768
PLACEHOLDER_HOST = "gpu-server"  # the machine the plan is for: the user types its real name


class PlanDialog(QDialog):
    """`load_shape()` reads the model's shape (any thread: it is run on the pool)."""

    def __init__(
        self,
        name: str,
        load_shape: Callable[[], ModelShape],
        tasks: TaskRunner,
        parent: QWidget | None = None,
        add_remote: Callable[[str], None] | None = None,
    ) -> None:
        """`add_remote(url)`: offer to add the planned server as a remote once it runs (My Models)."""
        super().__init__(parent)
        self._add_remote = add_remote
        self.setWindowTitle(f"Plan a server for {name}")
        self._tasks = tasks
        self.shape: ModelShape | None = None
        self.plan: DeployPlan | None = None
        self.targets = all_targets()
        intro = QLabel(
            "This model does not fit here. Pick the hardware it would run on: Hearth works out what fits, "
            "which engine to serve it with and the command that starts it."
        )
        intro.setWordWrap(True)
        self.target = QComboBox()
        for t in self.targets:
            self.target.addItem(f"{t.name} · {t.memory_bytes / 2**30:.0f} GiB", t.id)
        default = next((i for i, t in enumerate(self.targets) if t.id == find_target(DEFAULT_TARGET).id), 0)
        self.target.setCurrentIndex(default)
        self.gpus = QSpinBox()
        self.gpus.setRange(1, 64)
        self.gpus.setValue(1)
        self.users = QSpinBox()
        self.users.setRange(1, 4096)
        self.users.setValue(8)
        self.ctx = QSpinBox()
        self.ctx.setRange(512, 1_048_576)
        self.ctx.setSingleStep(4096)
        self.ctx.setValue(DEFAULT_CTX)
        self.ctx.setSuffix(" tokens")
        self.dtype = QComboBox()
        for d in DTYPES:
            self.dtype.addItem("the best the hardware runs" if d == "auto" else d.upper(), d)
        form = QFormLayout()
        form.addRow("GPU", self.target)
        form.addRow("How many", self.gpus)
        form.addRow("Users at once", self.users)
        form.addRow("Context per user", self.ctx)
        form.addRow("Weights", self.dtype)
        self.status = MessageLabel("Reading the model…")  # a failure's long words break here, not the dialog
        set_status(self.status, "muted")
        self.verdict = QLabel()
        self.verdict.setObjectName("cardTitle")
        self.verdict.setWordWrap(True)
        self.report = QPlainTextEdit()
        self.report.setReadOnly(True)
        self.report.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.report.setMinimumSize(640, 240)
        self.copy_button = QPushButton("Copy command")
        self.copy_button.setProperty("role", "primary")
        self.copy_button.clicked.connect(self.copy_command)
        self.copy_button.setEnabled(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.remote_button = QPushButton("It is running: add it as a remote…")
        self.remote_button.setToolTip("Chat with it from Hearth, and serve it on Hearth's API if you like")
        self.remote_button.clicked.connect(self.add_as_remote)
        self.remote_button.setEnabled(False)
        self.remote_button.setVisible(add_remote is not None)
        row = QHBoxLayout()
        row.addWidget(self.copy_button)
        row.addWidget(self.remote_button)
        row.addStretch(1)
        row.addWidget(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.verdict)
        layout.addWidget(self.report, 1)
        layout.addLayout(row)
        for w in (self.target, self.dtype):
            w.currentIndexChanged.connect(lambda *_: self.replan())
        for s in (self.gpus, self.users, self.ctx):
            s.valueChanged.connect(lambda *_: self.replan())
        self._set_enabled(False)
        tasks.run(load_shape, self._shape_read, self._shape_failed, owner=self)

    def _set_enabled(self, on: bool) -> None:
        for w in (self.target, self.gpus, self.users, self.ctx, self.dtype):
            w.setEnabled(on)

    def _shape_read(self, shape: ModelShape) -> None:
        self.shape = shape
        if shape.max_ctx:
            self.ctx.setMaximum(shape.max_ctx)
            self.ctx.setValue(min(DEFAULT_CTX, shape.max_ctx))
        self.status.setText("")
        self.status.setVisible(False)
        self._set_enabled(True)
        self.replan()

    def _shape_failed(self, exc: BaseException) -> None:
        logger.info("no shape for the plan: %s", exc)
        self.status.setText(as_sentences(f"Could not read the model's configuration: {exc}"))
        set_status(self.status, "error")

    def replan(self) -> None:
        """Main thread: plan again for the choices shown (arithmetic only, no I/O)."""
        if self.shape is None:
            return
        target = self.targets[self.target.currentIndex()]
        try:
            plan = make_plan(
                self.shape,
                target,
                gpus=self.gpus.value(),
                users=self.users.value(),
                ctx=self.ctx.value(),
                dtype=str(self.dtype.currentData()),
            )
        except PlanError as exc:
            self.plan = None
            self.verdict.setText(as_sentences(str(exc)))
            set_status(self.verdict, "error")
            self.report.setPlainText("")
            self.copy_button.setEnabled(False)
            self.remote_button.setEnabled(False)
            return
        self.plan = plan
        text = plan.verdict
        self.verdict.setText(text[0].upper() + text[1:] + ".")
        set_status(self.verdict, "success" if plan.fits else "warning")
        self.report.setPlainText(format_plan(plan))
        self.copy_button.setEnabled(plan.fits and plan.launch is not None)
        self.remote_button.setEnabled(bool(self.server_url()))

    def command(self) -> str:
        plan = self.plan
        return plan.launch.command if plan is not None and plan.fits and plan.launch is not None else ""

    def server_url(self) -> str:
        """Where the planned server will answer, for the remote's URL: its port, on a host the user names."""
        argv = shlex.split(self.command())
        if not argv:
            return ""
        port = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"), "")
        return f"http://{PLACEHOLDER_HOST}:{port}" if port else f"http://{PLACEHOLDER_HOST}"

    def add_as_remote(self) -> None:
        url = self.server_url()
        if url and self._add_remote is not None:
            self._add_remote(url)

    def copy_command(self) -> None:
        command = self.command()
        if command:
            QGuiApplication.clipboard().setText(command)
            self.copy_button.setText("Copied")

    def choose(self, **choices: Any) -> None:
        """Set the form's fields by name (target id, gpus, users, ctx, dtype); for tests and links."""
        if "target" in choices:
            wanted = find_target(str(choices["target"])).id  # an alias as `hearth plan --gpu` takes it
            self.target.setCurrentIndex(next(i for i, t in enumerate(self.targets) if t.id == wanted))
        for name in ("gpus", "users", "ctx"):
            if name in choices:
                getattr(self, name).setValue(int(choices[name]))
        if "dtype" in choices:
            self.dtype.setCurrentIndex(self.dtype.findData(choices["dtype"]))
