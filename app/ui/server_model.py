"""What the Server page shows and decides, Qt-free: the base URL, which edits need a restart, the
snippets a user copies, how a logged request reads, and when closing the window keeps serving."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from pydantic import BaseModel

from app.core.connect import KEY_PLACEHOLDER, MODEL_PLACEHOLDER
from app.core.runtime.drafts import drafting_text
from app.core.runtime.jobs import HostState
from app.core.settings import AUTO_PARALLEL, AUTO_PARALLEL_MAX, ServerSettings, Settings

# A running server must be restarted for these to apply; JIT (and its context), idle unload and queue
# size reach the engine host through Services.apply_settings without one.
RESTART_FIELDS = (
    "port",
    "bind",
    "api_key",
    "require_api_key",
    "cors_origins",
    "keep_responses",
    "ollama_port",
    "fetch_image_urls",
)
MASK_SHOWN = 7  # the characters of a key the page shows until Show: "hearth-" says which kind it is


def base_url(settings: ServerSettings) -> str:
    """The URL clients on this machine use, as the server will report it once started (LAN mode listens
    on every interface; 127.0.0.1 is still how this machine reaches it)."""
    return f"http://127.0.0.1:{settings.port}/v1"


def mask_key(key: str) -> str:
    return key[:MASK_SHOWN] + "•" * 8


def needs_restart(old: ServerSettings, new: ServerSettings) -> bool:
    return any(getattr(old, name) != getattr(new, name) for name in RESTART_FIELDS)


PARALLEL_HINT = (
    "How many replies the engine writes at the same time, for the chat and the API together. Each one keeps "
    "its own context in memory, so where memory is short a model is loaded for fewer. Auto lets memory decide "
    f"(up to {AUTO_PARALLEL_MAX}, keeping room for another model); 1 answers one request at a time. A change "
    "applies the next time a model loads."
)


def parallel_text(n: int) -> str:
    """Settings → Parallel requests in words: "Auto (by memory)" or "4 at once"."""
    return "Auto (by memory)" if n == AUTO_PARALLEL else f"{n} at once"


def bounds(name: str) -> tuple[int, int]:
    """The (ge, le) a ServerSettings int field allows, so a spin box offers exactly what validation takes."""
    return _bounds(ServerSettings, name)


def settings_bounds(name: str) -> tuple[int, int]:
    """The same for a field of the top-level Settings."""
    return _bounds(Settings, name)


def _bounds(model: type[BaseModel], name: str) -> tuple[int, int]:
    low, high = 0, 2**31 - 1
    for rule in model.model_fields[name].metadata:
        low = getattr(rule, "ge", low)
        high = getattr(rule, "le", high)
    return low, high


MESSAGES = '[{"role": "user", "content": "Hello!"}]'


def curl_snippet(url: str, model: str, key: str = "") -> str:
    lines = [f"curl {shlex.quote(url + '/chat/completions')}", '-H "Content-Type: application/json"']
    if key:
        lines.append(f"-H {shlex.quote('Authorization: Bearer ' + key)}")
    body = f'{{\n    "model": {json.dumps(model or MODEL_PLACEHOLDER)},\n    "messages": {MESSAGES}\n  }}'
    lines.append(f"-d {shlex.quote(body)}")
    return " \\\n  ".join(lines)


def python_snippet(url: str, model: str, key: str = "") -> str:
    # json.dumps of a str is a valid Python string literal, quotes and escapes included.
    return "\n".join(
        [
            "from openai import OpenAI",
            "",
            f"client = OpenAI(base_url={json.dumps(url)}, api_key={json.dumps(key or KEY_PLACEHOLDER)})",
            "reply = client.chat.completions.create(",
            f"    model={json.dumps(model or MODEL_PLACEHOLDER)},",
            f"    messages={MESSAGES},",
            ")",
            "print(reply.choices[0].message.content)",
        ]
    )


def fmt_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def fmt_clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def keep_serving_in_tray(tray_available: bool, serving: bool, setting_on: bool) -> bool:
    """Closing the window hides it to the tray only when all three hold; otherwise it quits, as always."""
    return tray_available and serving and setting_on


def engine_text(state: HostState, jit: bool) -> str:
    """What the one engine is doing: the chat and the API share it, so a chat reply makes API requests wait."""
    model = Path(state.model.path).name if state.model is not None else ""
    waiting = f" · {state.queue_depth} waiting" if state.queue_depth else ""
    free = state.slots_total - state.slots_busy
    if state.status == "generating" and state.source == "chat":
        if free > 0:  # slots: an API request runs beside the chat's reply
            room = f"room for {free} of {state.slots_total} API requests beside it"
            return f"Engine: writing a chat reply — {room}{waiting}"
        return f"Engine: busy with a chat reply — API requests wait their turn{waiting}"
    if state.status == "generating":
        who = "an API request" if state.source == "api" else f"a {state.source or 'job'} request"
        return f"Engine: answering {who} ({model}){waiting}"
    if state.status == "loading":
        return "Engine: loading a model…"
    if state.status == "error":
        return f"Engine: error — {state.error or 'unknown'}"
    if state.model is None:
        return "Engine: no model loaded" + (" — a request loads the model it names" if jit else "")
    # One context serves every route: say it, since an agent's prompt must fit in it.
    return f"Engine: ready · {model} · {state.model.n_ctx:,}-token context for every route (chat, Responses, Messages)"


SLOTS_TOOLTIP = (
    "How many replies the loaded model writes at the same time (its parallel slots, chat and API together),"
    " how many are being written now, and how many requests wait for a free one"
)


def slots_text(state: HostState) -> str:
    """'Replies at once: 2 of 4 in use · 0 waiting' while a model is loaded (and how it drafts, if it does);
    "" without one. Plain words for llama.cpp's "slots" and the queue (SLOTS_TOOLTIP says more)."""
    if state.model is None or state.slots_total <= 0:
        return ""
    text = f"Replies at once: {state.slots_busy} of {state.slots_total} in use · {state.queue_depth} waiting"
    drafting = drafting_text(state.model.extra)
    return f"{text} · {drafting}" if drafting else text


def key_note(settings: ServerSettings) -> str:
    if settings.bind == "lan":
        need = "Required: LAN mode always needs it."
    elif settings.require_api_key:
        need = "Required on this computer too (a setting)."
    else:
        need = "Not required on this computer; LAN mode always needs it."
    return f"{need} Clients send it as “Authorization: Bearer <key>”."
