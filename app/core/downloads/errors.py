"""Download errors; each message is written for the user and names what to do next."""

from __future__ import annotations

from app.core.errors import HearthError
from app.core.units import fmt_bytes


class DownloadError(HearthError):
    """Base of every download failure."""


class UnsafePathError(DownloadError):
    """A remote file name that could write outside the models folder, or a path through a symlink (T8)."""


class RefusedFileTypeError(DownloadError):
    """A file type Hearth never downloads (pickle weights, code) (T6/T7)."""


class IntegrityError(DownloadError):
    """The bytes do not hash to what the Hub published; the file went to quarantine (T11)."""

    def __init__(self, message: str, quarantined: str | None = None) -> None:
        super().__init__(message)
        self.quarantined = quarantined


class DiskFullError(DownloadError):
    """Too little free space, before start (nothing written) or mid-download (partial kept) (T12)."""

    def __init__(self, path: str, needed: int, free: int, *, partial_kept: bool = False) -> None:
        self.path, self.needed, self.free, self.partial_kept = path, needed, free, partial_kept
        if partial_kept:
            msg = (
                f"The disk filled up while downloading {path}: {fmt_bytes(needed)} more are needed, "
                f"{fmt_bytes(free)} free. The part already downloaded is kept; free some space and resume."
            )
        else:
            msg = (
                f"Not enough disk space for {path}: {fmt_bytes(needed)} needed, {fmt_bytes(free)} free. "
                "Free some space or choose another models folder."
            )
        super().__init__(msg)


class RemoteChangedError(DownloadError):
    """The Hub now serves a different file than the metadata we were given (T10)."""


class AccessError(DownloadError):
    """401/403/404: gated, private, or missing; retrying will not help."""


class NetworkError(DownloadError):
    """Retries exhausted on stalls, resets, 5xx or 429; the partial is kept."""


class DownloadCancelled(DownloadError):
    def __init__(self, path: str) -> None:
        super().__init__(f"Download of {path} was cancelled.")


class DownloadPaused(DownloadError):
    def __init__(self, path: str) -> None:
        super().__init__(f"Download of {path} is paused.")
