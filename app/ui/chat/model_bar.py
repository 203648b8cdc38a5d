"""The chat header's model bar: pick a library model, load it with the planner's defaults (or the
Advanced overrides), and show what is loaded in a short line (name, context, where it runs, measured speed)
with the engine's details (slots, layers, drafting, predicted against measured speed) in its tooltip."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from app.core.engines.base import LoadSpec
from app.core.engines.registry import abilities
from app.core.library.projectors import projector_of, sees_images
from app.core.library.store import Library, LocalModel
from app.core.models.devices import Machine
from app.core.runtime.chat_templates import TemplatePrefs
from app.core.runtime.drafts import DraftPrefs, drafting_text
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import HostBusy, HostClosed, HostState, LoadJob
from app.core.runtime.load_plan import chat_load_slots
from app.core.settings import DEFAULT_PARALLEL_REQUESTS
from app.ui.chat.advanced_form import AdvancedForm
from app.ui.chat.model_bar_defaults import LoadPlanDefaults, load_failure_sentence, plan_defaults
from app.ui.chat.model_line import LoadedFacts, model_details, model_line, where_it_runs
from app.ui.tasks import TaskRunner
from app.ui.theme import restyle_by, set_status
from app.ui.widgets.loaded_models import LoadedModelsStrip

logger = logging.getLogger(__name__)


class ModelBar(QWidget):
    """`host_state(state)` is fed by the page (UI thread); errors show in place under the bar."""

    def __init__(
        self,
        host: JobHost,
        library: Library | None,
        tasks: TaskRunner,
        machine_source: Callable[[], Machine | None] | None = None,
        parent: QWidget | None = None,
        remote_models: Callable[[], list[LocalModel]] | None = None,
        parallel: Callable[[], int] | None = None,
        drafts: DraftPrefs | None = None,
        serving: Callable[[], bool] | None = None,
        templates: TemplatePrefs | None = None,
    ) -> None:
        """`remote_models()` lists the remote servers' models beside the library's; `parallel()` is the
        Parallel requests setting and `serving()` whether the API server is up: a load plans for that many
        slots while it is, else for one (chat_load_slots; all main thread); `drafts`: the Speculative
        decoding setting and the draft model picked per model; `templates`: the chat template picked per
        model (the Advanced form's Chat template)."""
        super().__init__(parent)
        self.host, self.library, self.tasks = host, library, tasks
        self.machine_source = machine_source
        self.parallel: Callable[[], int] = parallel or (lambda: DEFAULT_PARALLEL_REQUESTS)
        self.serving: Callable[[], bool] = serving or (lambda: False)
        self._planned_serving = False  # whether the shown plan counted the API server's slots
        self.remote_models = remote_models
        self.drafts = drafts
        self.templates = templates
        self.defaults = LoadPlanDefaults()
        self._plan_ticket = 0  # the latest plan asked for
        self.state = HostState()
        self.measured_tok_s = 0.0
        self._measured_path: Path | None = None  # the model the speed was measured on
        self._loading_name = ""
        self._loading_path: Path | None = None  # what `_loading_name` names
        self._shown_failure = ""  # the host's error text shown last (the host repeats it in later states)
        self._chat_path: Path | None = None  # the model the chat ran on last (kept through a load's states)

        self.picker = QComboBox()
        self.picker.setMinimumWidth(180)
        self.picker.setPlaceholderText("Pick a model…")
        self.picker.currentIndexChanged.connect(self._picked)
        self.load_button = QPushButton("Load")
        self.load_button.setProperty("role", "primary")  # until the picked model is loaded (_render)
        self.load_button.clicked.connect(self.load_selected)
        self.advanced = AdvancedForm()
        self.advanced.reset.clicked.connect(lambda: self.advanced.set_values(self.defaults))
        self.advanced.custom_template_requested.connect(self.edit_template)
        menu = QMenu(self)
        action = QWidgetAction(menu)
        action.setDefaultWidget(self.advanced)
        menu.addAction(action)
        self.advanced_button = QToolButton()
        self.advanced_button.setText("Advanced")
        self.advanced_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.advanced_button.setMenu(menu)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)  # a load reports no fraction: busy indicator
        self.progress.setMaximumWidth(90)
        self.progress.setVisible(False)
        self.status = QLabel("No model loaded")
        self.status.setObjectName("modelStatus")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setWordWrap(True)  # engine, context, offload, speed: wraps on a narrow window
        self.error = QLabel()
        self.error.setObjectName("modelError")
        set_status(self.error, "error")
        self.error.setWordWrap(True)
        self.error.setVisible(False)
        # The engine's own words for a failed load: for a bug report, not for reading first.
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setVisible(False)
        self.details = QPlainTextEdit(readOnly=True)
        self.details.setObjectName("modelErrorDetails")
        self.details.setMaximumHeight(80)
        self.details.setVisible(False)
        self.details_button.toggled.connect(self.details.setVisible)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        # No Unload here: each loaded model's row below has one (the chat's is marked "in chat"), so unloading
        # is one action under one word, not a bar button beside a row button that looked like another.
        for w in (self.picker, self.load_button, self.advanced_button):
            top.addWidget(w)
        top.addStretch(1)
        # The busy bar sits beside the status line, not the buttons: there it never widens the window.
        status_row = QHBoxLayout()
        status_row.addWidget(self.progress, 0, Qt.AlignmentFlag.AlignVCenter)
        status_row.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addLayout(status_row)
        error_row = QHBoxLayout()
        error_row.addWidget(self.error, 1)
        error_row.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(error_row)
        layout.addWidget(self.details)
        # Every loaded model, under the one the chat is on: which others hold memory, Pin and Unload them.
        self.loaded_models = LoadedModelsStrip(host, compact=True)
        layout.addWidget(self.loaded_models)
        # "2 more loaded…" (a short window lists only the model in chat) ends the status line: no line of its own.
        status_row.addWidget(self.loaded_models.more, 0, Qt.AlignmentFlag.AlignTop)
        self.refresh_models()
        self._render()

    # -- picking and loading --------------------------------------------------------------------
    def refresh_models(self) -> None:
        current = self.picker.currentData()
        self.picker.blockSignals(True)
        self.picker.clear()
        models = self.library.list(status="ready") if self.library is not None else []
        if self.remote_models is not None:
            models += self.remote_models()
        for m in models:
            # Which models can take the composer's images (their projector is kept beside them).
            self.picker.addItem(f"{m.name} · {m.format}" + (" · vision" if sees_images(m) else ""), m)
        self.picker.blockSignals(False)
        ids = [m.id for m in models]
        if current is not None and current.id in ids:
            self.picker.setCurrentIndex(ids.index(current.id))
        elif models:
            self.picker.setCurrentIndex(0)

    def _picked(self, _index: int) -> None:
        model = self.picker.currentData()
        if model is None:
            return
        if self.state.status != "loading":
            self._clear_error()  # the failure was the other model's
        self._render()  # Load or Reload, for this pick
        self.defaults = LoadPlanDefaults()
        self.advanced.set_values(self.defaults)
        self.advanced.set_template(self.templates.picked(model.id) if self.templates is not None else None)
        # Plans run on the pool and may finish out of order: only the latest pick's plan is shown.
        self._plan_ticket += 1
        ticket = self._plan_ticket
        self.tasks.run(
            self.planner_for(model),
            lambda d: self._planned(d) if ticket == self._plan_ticket else None,
            lambda exc: self._plan_failed(exc) if ticket == self._plan_ticket else None,
            owner=self,
        )

    def planner_for(self, model: LocalModel) -> Callable[[], LoadPlanDefaults]:
        """UI thread: the planning of `model`'s load as the settings are now, to run on a background thread."""
        self._planned_serving = self.serving()
        slots = chat_load_slots(self.parallel(), self._planned_serving)
        path, source, drafts = Path(model.path), self.machine_source, self.drafts
        return lambda: plan_defaults(path, model.format, source, slots, model, drafts)

    def replan(self) -> None:
        """UI thread: the machine is known (or changed): plan the picked model again. A model picked
        before the first hardware probe finished was planned with safe defaults only."""
        if self.state.status != "loading":
            self._picked(self.picker.currentIndex())

    def replan_if_serving_changed(self) -> None:
        """UI thread: the API server started or stopped since the picked model was planned: plan it again,
        for the server's parallel requests or for one conversation."""
        if self.serving() != self._planned_serving:
            self.replan()

    def _planned(self, d: LoadPlanDefaults) -> None:
        """UI thread."""
        self.defaults = d
        self.advanced.set_values(d)
        self._render()

    def _plan_failed(self, exc: BaseException) -> None:
        self._show_error(f"Cannot plan this model: {exc}")

    def load_selected(self) -> None:
        model = self.picker.currentData()
        if model is None:
            self._show_error("Pick a model from your library first.")
            return
        a = self.advanced
        mode, draft_id, draft_path = a.speculation()
        # The Advanced form's values over the load as planned (runtime.load_plan), which also carries what
        # the form does not show (an embedding model's pooling, its batch sizes).
        planned = self.defaults.spec
        base = planned if planned is not None and planned.path == Path(model.path) else LoadSpec(path=Path(model.path))
        n_ctx = a.n_ctx.value()
        chat = {
            "slots": 1 if mode == "draft" and abilities(model.format).draft_alone else a.slots.value(),
            "prompt_cache_mib": self.defaults.prompt_cache_mib,
            "speculative": mode if abilities(model.format).ngram or mode == "draft" else "off",
            "draft_model": Path(draft_path) if mode == "draft" else None,
            "projector": projector_of(model),  # a vision model's mmproj, kept with its files
            "chat_template": a.template_pick(),  # the picked format or template; None: the file's, else its family's
        }
        # An embedding model or reranker decodes a whole input at once: its batch is its context.
        pooled = {"n_batch": n_ctx, "n_ubatch": n_ctx}
        spec = base.model_copy(
            update={
                "n_ctx": n_ctx,
                "n_gpu_layers": a.gpu_layers.value(),
                "flash_attn": a.flash_attn.isChecked(),
                "cache_type_k": a.kv_type.currentText(),
                "cache_type_v": a.kv_type.currentText(),
                **(pooled if base.embedding else chat),
            }
        )
        self.load_spec(spec, model.format, model.name)
        if (library := self.library) is not None and model.source != "remote":
            self.tasks.run(lambda: library.touch(model.id), owner=self)
        if (templates := self.templates) is not None and model.source != "remote":
            # Kept for this model, as the draft pick is: the API's loads of it render with it too.
            pick = a.template_pick()
            if pick != templates.picked(model.id):
                self.tasks.run(lambda: templates.remember(model.id, pick), None, self._template_failed, owner=self)
        if (prefs := self.drafts) is not None and abilities(model.format).draft_model:
            # The pick (or dropping it) is remembered: the API server's loads of this model follow it.
            picked = draft_id or None
            if picked is not None or prefs.picked(model.id) is not None:
                self.tasks.run(lambda: prefs.remember(model.id, picked), owner=self)

    def edit_template(self) -> None:
        """The Chat template dialog for the picked model; what it saves is shown in the Advanced form."""
        from app.ui.chat_template_dialog import ChatTemplateDialog

        model = self.picker.currentData()
        if self.templates is None or model is None or model.source == "remote":
            self._show_error("Pick a model from your library first.")
            return
        dialog = ChatTemplateDialog(model, self.templates, self.tasks, self)
        if dialog.exec() and dialog.saved is not None:
            self.advanced.set_template(dialog.saved)

    def _template_failed(self, exc: BaseException) -> None:
        self._show_error(f"The chat template was not kept: {exc}")

    def load_spec(self, spec: LoadSpec, fmt: str, name: str | None = None) -> bool:
        """Queue a load on the host; progress and errors come back through the host state."""
        self._loading_name, self._loading_path = name or Path(spec.path).name, Path(spec.path)
        self._clear_error()
        try:
            self.host.submit(LoadJob(spec=spec, format=fmt))
        except (HostBusy, HostClosed) as exc:
            self._show_error(str(exc))
            return False
        self.measured_tok_s = 0.0
        self.progress.setVisible(True)
        self.status.setText(f"Loading {self._loading_name}…")
        return True

    def set_measured(self, tok_s: float) -> None:
        if tok_s > 0 and self.state.model is not None:
            self.measured_tok_s, self._measured_path = tok_s, Path(self.state.model.path)
            self._render()

    # -- state ----------------------------------------------------------------------------------
    def host_state(self, state: HostState) -> None:
        """UI thread (re-posted by HostWatcher)."""
        self.state = state
        self._follow_the_chat(state)
        if state.status == "error" and state.error:
            if state.error != self._shown_failure:  # state changes repeat it; a cleared one stays cleared
                self._shown_failure = state.error
                self._show_error(load_failure_sentence(self._loading_name, state.error), details=state.error)
        elif state.status in ("ready", "loading"):
            self._shown_failure = ""
            self._clear_error()
        self._render()

    def _follow_the_chat(self, state: HostState) -> None:
        """The chat moved to another model without the picker (its model was unloaded and a pool's other
        model took the focus, or a request loaded one): the picker shows the model the chat now runs on,
        unless the user has picked another one to load meanwhile."""
        if state.model is None:
            return
        before, now = self._chat_path, Path(state.model.path)
        self._chat_path = now
        if before == now:
            return
        picked = self.picker.currentData()
        if picked is not None and before is not None and Path(picked.path) != before:
            return  # the user's own pick waits for its Load
        index = next((i for i in range(self.picker.count()) if Path(self.picker.itemData(i).path) == now), -1)
        if index >= 0:
            self.picker.setCurrentIndex(index)

    def _show_error(self, text: str, details: str = "") -> None:
        self.error.setText(text)
        self.error.setVisible(True)
        self.details.setPlainText(details)
        self.details_button.setChecked(False)
        self.details_button.setVisible(bool(details))

    def _clear_error(self) -> None:
        self.error.setVisible(False)
        self.details_button.setChecked(False)
        self.details_button.setVisible(False)

    @property
    def busy_text(self) -> str:
        s = self.state
        if s.status != "generating":
            return ""
        if s.slots_total > 1:  # a message joins the running replies while a slot is free
            return f"busy: all {s.slots_total} slots in use" if s.slots_busy >= s.slots_total else ""
        return "busy: API request" if s.source == "api" else ""

    def picked_is_loaded(self) -> bool:
        """Whether the model in the picker is the one loaded (Load would only load it again)."""
        model, info = self.picker.currentData(), self.state.model
        return model is not None and info is not None and Path(model.path) == Path(info.path)

    def _name_of(self, path: Path) -> str:
        """The name the chat loaded `path` under (a remote model's), else its file's."""
        return self._loading_name if self._loading_path == path and self._loading_name else path.name

    def loaded_facts(self) -> LoadedFacts | None:
        """The loaded model as the bar describes it; None when none is."""
        info = self.state.model
        if info is None:
            return None
        by_path = {Path(self.picker.itemData(i).path): self.picker.itemData(i) for i in range(self.picker.count())}
        entry = by_path.get(Path(info.path))
        d = self.defaults
        as_planned = d.spec is not None and Path(d.spec.path) == Path(info.path)
        return LoadedFacts(
            name=entry.name if entry is not None else self._name_of(Path(info.path)),
            engine=self.host.registry.name(info.format),
            file_name=Path(info.path).name,
            n_ctx=info.n_ctx,
            slots=max(1, self.state.slots_total),
            place=where_it_runs(
                info.extra.get("n_gpu_layers"), d.verdict if as_planned else "", d.n_gpu_layers if as_planned else None
            ),
            offload=d.offload if as_planned else "",
            drafting=drafting_text(info.extra),
            predicted_tok_s=d.predicted_tok_s if as_planned else 0.0,
            # Another model since (the API swapped it in): its speed is not measured yet.
            measured_tok_s=self.measured_tok_s if self._measured_path == Path(info.path) else 0.0,
        )

    def _render(self) -> None:
        s = self.state
        self.progress.setVisible(s.status == "loading")
        self.load_button.setEnabled(s.status != "loading")
        # The next useful action is the accent: Load, until the picked model is loaded; then Send is.
        loaded = self.picked_is_loaded()
        self.load_button.setText("Reload" if loaded else "Load")
        self.load_button.setToolTip("Load it again with the Advanced settings" if loaded else "")
        nothing_else = s.model is not None and self.picker.currentData() is None
        restyle_by(self.load_button, "role", None if loaded or nothing_else else "primary")
        if s.status == "loading":
            self.status.setText(f"Loading {self._loading_name or 'model'}…")
            self.status.setToolTip("")
            return
        facts = self.loaded_facts()
        if facts is None:
            notes = [n for n in (self.defaults.note, self.defaults.engine_note) if n]
            self.status.setText(" · ".join(["No model loaded", *notes]))
            self.status.setToolTip("")
            return
        info = s.model
        assert info is not None
        parts = [model_line(facts)]
        if busy := self.busy_text:
            parts.append(busy)
        if info.template_notice:
            parts.append(info.template_notice)
        if info.extra.get("native_note"):  # the native check turned something off for this machine
            parts.append(str(info.extra["native_note"]))
        if self.defaults.engine_note:  # the plan counts on a GPU this llama.cpp cannot use
            parts.append(self.defaults.engine_note)
        self.status.setText(" · ".join(parts))
        self.status.setToolTip(model_details(facts))
