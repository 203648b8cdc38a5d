"""Where things live on a Hub (or a mirror): the default endpoint and a file's resolve URL."""

from __future__ import annotations

from urllib.parse import quote

DEFAULT_ENDPOINT = "https://huggingface.co"


def resolve_url(endpoint: str, repo_id: str, path: str, revision: str = "main") -> str:
    """`{endpoint}/{repo}/resolve/{rev}/{path}`, quoted as huggingface_hub's `hf_hub_url` does
    (a branch like `refs/pr/1` or `4.0bpw` is one path segment)."""
    return f"{endpoint.rstrip('/')}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"
