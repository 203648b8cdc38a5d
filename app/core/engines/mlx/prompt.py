"""What the MLX engine reads from a model folder for its prompts: its JSON files, the tokens tokenizer_config
names, and the chat template (the config's own, else chat_template.jinja)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.engines.errors import EngineError


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise EngineError(f"cannot read {path.name}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def token_text(value: Any) -> str:
    """tokenizer_config tokens are strings or AddedToken dicts ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def chat_template(folder: Path, tok_config: dict[str, Any]) -> str | None:
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template.strip():
        return template
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    return None
