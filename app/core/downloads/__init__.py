"""Resumable, verified downloads from the Hugging Face Hub into the models folder, and the queue that runs them."""

from app.core.downloads.downloader import FileDownload, download_file
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
from app.core.downloads.manager import DownloadItem, DownloadManager, Progress, RemoteFile, State
from app.core.downloads.paths import check_file_type, destination, repo_folder, validate_remote_name

__all__ = [
    "AccessError",
    "DiskFullError",
    "DownloadCancelled",
    "DownloadError",
    "DownloadItem",
    "DownloadManager",
    "DownloadPaused",
    "FileDownload",
    "IntegrityError",
    "NetworkError",
    "Progress",
    "RefusedFileTypeError",
    "RemoteChangedError",
    "RemoteFile",
    "State",
    "UnsafePathError",
    "check_file_type",
    "destination",
    "download_file",
    "repo_folder",
    "validate_remote_name",
]
