"""Where the data Hearth ships (`resources/`) lives, in a checkout or an installed tree."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


def resource_path(*parts: str) -> Path:
    return RESOURCES.joinpath(*parts)


@cache
def load_json(name: str) -> Any:
    with resource_path(name).open(encoding="utf-8") as f:
        return json.load(f)
