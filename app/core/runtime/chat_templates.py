"""The chat template picked per model: a built-in format by name ("gemma") or a pasted template, saved in
the settings model (Settings.chat_templates, by library id) and applied wherever the model loads: the chat's
loads (the model bar) and the API's (ModelResolver.template_for). A pasted template is user input: it is
checked in the sandbox before it is kept (chat_formats.check_custom_template), and only ever rendered there."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.engines.chat_templates.formats import FORMATS, TemplateChoice, check_custom_template, choose_template
from app.core.engines.chat_templates.jinja_sandbox import TemplateError
from app.core.formats import GGUF
from app.core.settings import Settings

if TYPE_CHECKING:
    from app.core.models.gguf import GGUFHeader

logger = logging.getLogger(__name__)

__all__ = [
    "AUTO",
    "TemplateChoice",
    "TemplateError",
    "TemplatePrefs",
    "checked_pick",
    "format_options",
    "header_template",
    "template_of",
]

AUTO = ""  # no pick: the file's own template, else the format its architecture uses


def format_options() -> list[tuple[str, str]]:
    """(name, label) of every built-in format, for a picker."""
    return [(f.name, f.label) for f in FORMATS.values()]


def checked_pick(value: str | None) -> str:
    """`value` as it is kept: AUTO for none, a format's name, or a pasted template that renders in the
    sandbox. Raises TemplateError, saying what is wrong, for a template that cannot be used."""
    if value is None or not value.strip() or value.strip().lower() == "auto":
        return AUTO
    if value.strip() in FORMATS:
        return value.strip()
    return check_custom_template(value)


def template_of(path: Path, fmt: str, override: str | None = None) -> TemplateChoice | None:
    """The template a GGUF would run with (its header read, nothing loaded); None for other formats or a
    file that cannot be read (the load says why)."""
    if fmt != GGUF:
        return None
    from app.core.models.errors import ModelFileError
    from app.core.models.gguf import read_gguf_header

    try:
        header = read_gguf_header(path)
    except (ModelFileError, OSError) as exc:
        logger.debug("cannot read %s for its template: %s", path, exc)
        return None
    return header_template(header, override)


def header_template(header: GGUFHeader, override: str | None = None) -> TemplateChoice:
    """The template a GGUF with this header runs with, `override` being the user's pick (chat_formats)."""
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    pre = header.metadata.get("tokenizer.ggml.pre")
    return choose_template(
        header.chat_template,
        header.architecture,
        tokens if isinstance(tokens, list) else (),
        pre=pre if isinstance(pre, str) else None,
        override=override,
    )


class TemplatePrefs:
    """The per-model picks, read from and saved through the settings model (one door for settings)."""

    def __init__(self, settings: Callable[[], Settings], save: Callable[[Settings], None]) -> None:
        self._settings = settings
        self._save = save

    def picked(self, model_id: str) -> str | None:
        """The pick for `model_id` (a format's name or a template), None for Auto."""
        return self._settings().chat_templates.get(model_id) or None

    def remember(self, model_id: str, value: str | None) -> str:
        """Background thread (it writes the settings file): keep `value` for `model_id` (AUTO, None or
        "auto" forgets the pick). Returns what was kept; raises TemplateError for a template that cannot be
        used, and keeps nothing then."""
        kept = checked_pick(value)
        current = self._settings()
        picks = dict(current.chat_templates)
        if picks.get(model_id, AUTO) == kept:
            return kept
        if kept == AUTO:
            picks.pop(model_id, None)
        else:
            picks[model_id] = kept
        self._save(current.model_copy(update={"chat_templates": picks}))
        logger.info("chat template for %s: %s", model_id, kept if kept in FORMATS else "custom" if kept else "auto")
        return kept
