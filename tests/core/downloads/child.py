"""A download in its own process, for the kill -9 and two-process tests (T13/T14).

python -m tests.core.downloads.child URL DEST ROOT SIZE SHA256
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from app.core.downloads import DownloadOptions, FileDownload, RetryPolicy, Source, Target


def main(argv: list[str]) -> int:
    url, dest, root, size, sha256 = argv
    source = Source(url, Path(dest).name, sha256, size=int(size))
    options = DownloadOptions(RetryPolicy(backoff_s=0.05))
    with httpx.Client(trust_env=False) as client:
        FileDownload(source, Target(Path(dest), Path(root)), options=options).run(client)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
