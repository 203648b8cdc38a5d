""" "Chat with this model" from My Models: switch to the Chat page, pick the model there and load it
with the planner's defaults, then put the focus in the message box once it is loaded.

It drives the Chat page only through what that page already offers (its model bar's picker, Advanced
form and `load_selected`, its host watcher, its composer), so the chat package stays unaware of it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject

from app.core.library import LocalModel
from app.core.runtime.jobs import HostState
from app.ui.chat import ChatPage
from app.ui.chat.model_bar_defaults import LoadPlanDefaults
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)


class ChatLauncher(QObject):
    def __init__(
        self,
        chat: ChatPage,
        tasks: TaskRunner,
        show_chat: Callable[[], None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent or chat)
        self._chat = chat
        self._tasks = tasks
        self._show_chat = show_chat
        self._ticket = 0  # only the last model asked for is loaded
        self.waiting_for: Path | None = None  # the model whose load, once done, focuses the message box
        chat.watcher.changed.connect(self._host_state)

    def chat_with(self, model: LocalModel) -> bool:
        """UI thread: show Chat with `model` picked and loading. False (with a notice) if Chat cannot
        offer it: the picker only lists ready models."""
        self._show_chat()
        bar = self._chat.model_bar
        bar.refresh_models()  # a model downloaded or imported a moment ago may not be listed yet
        index = next(
            (i for i in range(bar.picker.count()) if getattr(bar.picker.itemData(i), "id", None) == model.id), -1
        )
        if index < 0:
            self._chat.show_notice(f"{model.name} is not ready to load ({model.status}).", "error")
            return False
        bar.picker.setCurrentIndex(index)
        self._ticket += 1
        state = bar.state
        if state.status in ("ready", "generating") and state.model and Path(state.model.path) == Path(model.path):
            self.waiting_for = None
            self._chat.composer.focus()  # already loaded: nothing to wait for
            return True
        self.waiting_for = Path(model.path)
        # Picking resets the bar's Advanced form to safe defaults while it plans on the pool; loading now
        # would load with those (no GPU layers). Plan as the bar does and load with the plan once it is known.
        ticket = self._ticket
        self._tasks.run(
            bar.planner_for(model),
            lambda d: self._load(ticket, model, d),
            lambda exc: self._plan_failed(ticket, model, exc),
            owner=self,
        )
        return True

    def _plan_failed(self, ticket: int, model: LocalModel, exc: BaseException) -> None:
        logger.info("planning %s failed (%s); loading with safe defaults", model.name, exc)
        self._load(ticket, model, LoadPlanDefaults(note=f"cannot plan this model: {exc}"))

    def _load(self, ticket: int, model: LocalModel, defaults: LoadPlanDefaults) -> None:
        bar = self._chat.model_bar
        picked = bar.picker.currentData()
        if ticket != self._ticket or picked is None or picked.id != model.id:
            return  # another model was asked for, or the user picked one in the bar meanwhile
        bar.advanced.set_values(defaults)
        bar.load_selected()

    def _host_state(self, state: HostState) -> None:
        """UI thread (the chat page's HostWatcher re-posts the host's state)."""
        if self.waiting_for is None:
            return
        if state.status == "ready" and state.model is not None and Path(state.model.path) == self.waiting_for:
            self.waiting_for = None
            self._chat.composer.focus()
        elif state.status == "error":
            self.waiting_for = None  # the model bar shows why; the focus stays where the user put it
