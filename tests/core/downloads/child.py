"""A download in its own process, for the kill -9 and two-process tests (T13/T14).

    python -m tests.core.downloads.child URL DEST ROOT SIZE SHA256
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from app.core.downloads import download_file


def main(argv: list[str]) -> int:
    url, dest, root, size, sha256 = argv
    with httpx.Client(trust_env=False) as client:
        download_file(url, Path(dest), root=Path(root), expected_size=int(size), expected_sha256=sha256,
                      client=client, path=Path(dest).name, backoff_s=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
