"""Whether an MLX model folder can see images here, from its config.json: a vision-language checkpoint (its
config has a vision half), mlx-vlm installed to read it, and images that take one position a token (M-RoPE
families place them in 2-D, which mlx-lm's text model does not). The engine checks more at load
(mlx.vision); this is what the library and the API can tell without loading."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_config(folder: Path) -> dict[str, Any]:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


def has_vision_half(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("vision_config"), dict)


def uses_mrope(config: Mapping[str, Any]) -> bool:
    """Whether the text model places positions in sections (M-RoPE): named in its rope settings."""
    text = config.get("text_config")
    text = text if isinstance(text, Mapping) else config
    for key in ("rope_scaling", "rope_parameters"):
        rope = text.get(key)
        if isinstance(rope, Mapping) and ("mrope_section" in rope or rope.get("type") == "mrope"):
            return True
    return "mrope_section" in text


def mlx_vlm_installed() -> bool:
    return importlib.util.find_spec("mlx_vlm") is not None


def mlx_sees_images(folder: Path) -> bool:
    """Asked for every MLX model each time a model list is shown (the API's, the chat's picker): the config is
    read once for each version of the file, and after that only stat'ed."""
    try:
        changed = (folder / "config.json").stat().st_mtime_ns
    except OSError:
        return False
    return _config_sees(str(folder), changed) and mlx_vlm_installed()


@functools.lru_cache(maxsize=256)
def _config_sees(folder: str, changed: int) -> bool:
    config = read_config(Path(folder))
    return has_vision_half(config) and not uses_mrope(config)
