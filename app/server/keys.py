"""API keys Hearth makes for its own server. Kept apart from the front door so the window can make one
without importing FastAPI, which would slow the app's start."""

from __future__ import annotations

import secrets

KEY_PREFIX = "hearth-"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)
