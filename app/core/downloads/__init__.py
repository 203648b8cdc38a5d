"""Resumable, verified downloads from the Hugging Face Hub into the models folder, and the queue that runs them.

One file: `FileDownload(Source, Target, options=DownloadOptions(...))`. A queue of variants: `DownloadManager`.
"""

from app.core.downloads.downloader import FileDownload
from app.core.downloads.errors import NetworkError
from app.core.downloads.items import RemoteFile
from app.core.downloads.manager import DownloadManager
from app.core.downloads.retry import RetryPolicy
from app.core.downloads.spec import DownloadOptions, Source, Target

__all__ = [
    "DownloadManager",
    "DownloadOptions",
    "FileDownload",
    "NetworkError",
    "RemoteFile",
    "RetryPolicy",
    "Source",
    "Target",
]
