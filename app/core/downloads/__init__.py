"""Resumable, verified downloads from the Hugging Face Hub into the models folder, and the queue that runs them."""

from app.core.downloads.downloader import FileDownload
from app.core.downloads.errors import (
    AccessError,
    DiskFullError,
    DownloadCancelled,
    DownloadError,
    DownloadPaused,
    IntegrityError,
    NetworkError,
    RefusedFileTypeError,
    RemoteChangedError,
    UnsafePathError,
)
from app.core.downloads.items import DownloadItem, Progress, RemoteFile, State
from app.core.downloads.manager import DownloadManager
from app.core.downloads.paths import check_file_type, destination, repo_folder, validate_remote_name
from app.core.downloads.progress import Reporting
from app.core.downloads.retry import RetryPolicy
from app.core.downloads.spec import Controls, DownloadOptions, Source, Target

__all__ = [
    "AccessError",
    "Controls",
    "DiskFullError",
    "DownloadCancelled",
    "DownloadError",
    "DownloadItem",
    "DownloadManager",
    "DownloadOptions",
    "DownloadPaused",
    "FileDownload",
    "IntegrityError",
    "NetworkError",
    "Progress",
    "RefusedFileTypeError",
    "RemoteChangedError",
    "RemoteFile",
    "Reporting",
    "RetryPolicy",
    "Source",
    "State",
    "Target",
    "UnsafePathError",
    "check_file_type",
    "destination",
    "repo_folder",
    "validate_remote_name",
]
