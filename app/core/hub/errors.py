"""Typed Hub errors; each message is written to be shown to the user as-is."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from app.core.errors import HearthError


class HubError(HearthError):
    """Anything that went wrong talking to the Hub."""


class HubOffline(HubError):
    """The Hub (or mirror) could not be reached: no network, DNS, refused, timed out."""


class HubNotFound(HubError):
    """No such repo, revision or file (or a private repo without a token)."""


class HubGated(HubError):
    """The repo is gated and this token (or no token) has not been granted access."""


class HubUnauthorized(HubError):
    """The Hub refused the token."""


class HubRateLimited(HubError):
    """HTTP 429; `retry_after` is the server's Retry-After in seconds when it sent one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class HubRefused(HubError):
    """Hearth will not use this repo: pickle-only weights, remote code, or nothing it can run."""


class HubUnsafeName(HubRefused):
    """A file name from the Hub could escape the models folder (`..`, absolute, drive, UNC, backslash)."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    out: list[type[BaseException]] = [OSError, TimeoutError]
    for mod in ("httpx", "httpx2"):  # huggingface_hub 2.x ships its own httpx fork as httpx2
        try:
            out.append(__import__(mod).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(out)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from datetime import datetime
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def map_hub_error(
    exc: BaseException, *, endpoint: str, repo_id: str | None = None, has_token: bool = False
) -> HubError:
    """Turn a huggingface_hub / httpx / socket exception into the HubError the UI shows."""
    if isinstance(exc, HubError):
        return exc
    what = repo_id or "the model"
    hfe: Any
    try:
        from huggingface_hub import errors as hfe
    except ImportError:  # without huggingface_hub only transport errors can occur
        hfe = None
    offline = f"can't reach the Hub at {endpoint}; check your connection or mirror"
    if hfe is not None and isinstance(exc, getattr(hfe, "OfflineModeIsEnabled", ())):
        return HubOffline(offline)
    # HfHubHTTPError is an OSError too, so HTTP answers are told apart from transport failures first.
    if hfe is None or not isinstance(exc, hfe.HfHubHTTPError):
        if isinstance(exc, _transport_errors()):
            return HubOffline(offline)
        if hfe is None:
            return HubError(f"the Hub request failed: {exc}")
    if isinstance(exc, hfe.GatedRepoError):
        return HubGated(f"{what} is gated: accept the licence on the model page, then add a token in Settings")
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(exc, hfe.RevisionNotFoundError):
        return HubNotFound(f"{what} has no such branch or revision")
    if isinstance(exc, (hfe.RemoteEntryNotFoundError, hfe.EntryNotFoundError)):
        return HubNotFound(f"{what}: file not found on the Hub")
    if isinstance(exc, hfe.RepositoryNotFoundError):
        if has_token and status == 401 and "invalid" in str(exc).lower():
            return HubUnauthorized("the Hub refused your token; check it in Settings")
        hint = "" if has_token else " (or it is private: add a token in Settings)"
        return HubNotFound(f"{what}: no such model on the Hub{hint}")
    if isinstance(exc, getattr(hfe, "LocalEntryNotFoundError", ())):
        return HubOffline(offline)
    if status == 429:
        retry = parse_retry_after(getattr(response, "headers", {}).get("Retry-After"))
        wait = f"; try again in {retry:.0f} s" if retry is not None else "; try again later"
        return HubRateLimited(f"the Hub is rate limiting requests{wait}", retry)
    if status in (401, 403):
        if has_token:
            return HubUnauthorized("the Hub refused your token; check it in Settings")
        return HubUnauthorized(f"the Hub wants a token for {what}; add one in Settings")
    if status == 404:
        return HubNotFound(f"{what}: not found on the Hub")
    if isinstance(status, int) and status >= 500:
        return HubError(f"the Hub had a problem (HTTP {status}); try again later")
    if isinstance(status, int):
        return HubError(f"the Hub answered HTTP {status} for {what}")
    return HubError(f"the Hub request failed: {exc}")
