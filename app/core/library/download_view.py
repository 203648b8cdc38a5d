"""What a Download button shows for one variant: its download's state and the library's copy, as plain data.

Qt-free so the mapping can be unit-tested; app.ui.download_button draws it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.downloads.items import DownloadItem, Progress, State
from app.core.library.store import LocalModel
from app.core.units import fmt_bytes

Action = Literal["download", "chat", "retry", "resume", "none"]

SHORT_ERROR = 48  # characters of an error shown in place; the whole text goes in the tooltip
# Why a Download (or a Retry) waits while the Hub cannot be reached: its tooltip, the banner says the rest.
OFFLINE_WHY = "Hugging Face can't be reached, so nothing can be downloaded until Hearth is back online"
NEEDS_THE_HUB = ("download", "retry", "resume")


@dataclass(frozen=True)
class ButtonView:
    text: str
    enabled: bool
    action: Action
    tooltip: str = ""
    error: str = ""  # short words for a failure shown next to the button ("" when none)


def short_error(text: str) -> str:
    """The first sentence of `text`, cut to fit beside a button."""
    first = text.strip().split("\n", 1)[0]
    for stop in (". ", ": "):
        if stop in first and first.index(stop) >= 12:  # keep "Error: x" style prefixes readable
            first = first[: first.index(stop)]
            break
    return first if len(first) <= SHORT_ERROR else first[: SHORT_ERROR - 1].rstrip() + "…"


def percent(done: int, total: int) -> str:
    return f"{int(100 * done / total)} %" if total else fmt_bytes(done)


def button_view(
    item: DownloadItem | None,
    progress: Progress | None,
    model: LocalModel | None,
    *,
    preparing: bool = False,
    request_error: str = "",
    can_download: bool = True,
    why_not: str = "",
    offline: bool = False,
) -> ButtonView:
    """The download (if any) wins over the library: a variant being fetched again shows its progress.
    `offline`: the Hub cannot be reached: what would need it (Download, Retry, Resume) is off, and says why."""
    view = _view(item, progress, model, preparing, request_error, can_download, why_not)
    if not (offline and view.enabled and view.action in NEEDS_THE_HUB):
        return view
    tooltip = f"{view.tooltip}\n{OFFLINE_WHY}" if view.error else OFFLINE_WHY
    return ButtonView(view.text, False, view.action, tooltip, view.error)


def _view(
    item: DownloadItem | None,
    progress: Progress | None,
    model: LocalModel | None,
    preparing: bool,
    request_error: str,
    can_download: bool,
    why_not: str,
) -> ButtonView:
    if preparing:
        return ButtonView("Preparing…", False, "none", "Reading the variant's files from the Hub")
    if item is not None and item.state != State.DONE:
        return _item_view(item, progress)
    if model is not None:
        if model.ready:
            if item is not None:  # fetched here: say it is done, not just that it exists
                return ButtonView("Downloaded — Chat", True, "chat", f"Open {model.name} in Chat")
            return ButtonView("In My Models — Chat", True, "chat", f"{model.name} is in My Models: open it in Chat")
        reason = model.reason or model.status
        return ButtonView("In My Models — not usable", False, "none", f"{model.name}: {reason}", short_error(reason))
    if item is not None:  # done, the library entry not written yet (it follows within moments)
        return ButtonView("Downloaded — adding…", False, "none", "Adding it to My Models")
    if request_error:
        return ButtonView("Retry", True, "download", request_error, short_error(request_error))
    return ButtonView("Download", can_download, "download", why_not if not can_download else "")


def _item_view(item: DownloadItem, progress: Progress | None) -> ButtonView:
    if item.state == State.QUEUED:
        return ButtonView("Queued…", False, "none", "Waiting for a free download slot")
    if item.state == State.VERIFYING:
        return ButtonView("Verifying…", False, "none", "Checking the downloaded files")
    if item.state == State.ACTIVE:
        done, total, rate = item.bytes_done, item.total, 0.0
        if progress is not None and progress.item_id == item.id:
            done, total, rate = progress.done, progress.total or total, progress.rate
        text = percent(done, total) + (f" · {fmt_bytes(rate)}/s" if rate > 0 else "")
        return ButtonView(text, False, "none", f"Downloading {item.repo_id} {item.label}")
    if item.state == State.FAILED:
        error = item.error or "The download failed"
        return ButtonView("Retry", True, "retry", error, short_error(error))
    # PAUSED: by the user (no error), or by a full disk with the partial kept.
    if item.error:
        return ButtonView("Retry", True, "resume", item.error, short_error(item.error))
    at = percent(item.bytes_done, item.total)
    return ButtonView(f"Paused at {at} — Resume", True, "resume", "Resume the download")
