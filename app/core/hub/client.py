"""The one door to the Hub (or a mirror): search, repo details, trees, branches, model cards, small
JSON files and ranged header reads, with typed errors. What a repo offers (variants.py) and those
variants' metadata (metadata.py) are built on these calls; nothing else in Hearth talks to the Hub.

Endpoint and token are always explicit: no token means no Authorization header, never the token
huggingface_hub would find saved on the machine; its import-time environment is never trusted.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from app.core.formats import GGUF
from app.core.hub import search as query
from app.core.hub.errors import HubError, HubNotFound, HubRefused, map_hub_error
from app.core.hub.names import validate_remote_name
from app.core.hub.ranged import HttpRangeSource, read_remote_gguf_split
from app.core.hub.results import FileMetadata, ModelSummary, Ref, RepoDetails, SearchPage, as_int, parse_time
from app.core.hub.urls import DEFAULT_ENDPOINT, resolve_url
from app.core.models.files import RepoFile

if TYPE_CHECKING:
    import httpx

    from app.core.models.gguf import GGUFHeader

logger = logging.getLogger(__name__)

LIBRARY_NAME = "hearth"
MAX_CARD_BYTES = 512 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
MAX_PAGES = 200  # tree listings: a runaway Link chain must end
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


def _hf() -> Any:
    """Import huggingface_hub with telemetry off (it reads the environment at import time)."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
    import huggingface_hub
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True
    return huggingface_hub


def repo_files(info: Any) -> list[RepoFile]:
    """A `model_info(files_metadata=True)` listing: size, LFS sha256, and the git blob id of small files."""
    out = []
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        size = s.size if s.size is not None else (lfs.size if lfs else 0)
        out.append(
            RepoFile(
                s.rfilename, int(size or 0), getattr(lfs, "sha256", None) if lfs else None, getattr(s, "blob_id", None)
            )
        )
    return out


def check_repo_id(repo_id: str) -> str:
    """`owner/name` as the Hub allows it; anything else (`..`, extra slashes) never reaches a URL."""
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise HubNotFound(f"{str(repo_id)[:100]!r} is not a Hub model id (expected owner/name)")
    return repo_id


def _checked(repo_id: str, files: list[RepoFile]) -> list[RepoFile]:
    for f in files:
        try:
            validate_remote_name(f.path)
        except HubError as exc:
            raise type(exc)(f"{repo_id}: {exc}") from None
    return files


class HubClient:
    """A Hub (or mirror) session. Every call has a timeout and raises only HubError subclasses
    (ranged header reads raise ModelFileError, as reading any model file does)."""

    def __init__(self, endpoint: str | None, token: str | None, *, timeout: float = 15) -> None:
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self._api: Any = None

    @classmethod
    def from_settings(cls, settings: Any, env: Mapping[str, str] | None = None, **kw: Any) -> HubClient:
        """Settings win; `HF_ENDPOINT` / `HF_TOKEN` from `env` are the defaults."""
        env = os.environ if env is None else env
        endpoint = getattr(settings, "hf_endpoint", "") or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
        token = getattr(settings, "hf_token", "") or env.get("HF_TOKEN") or None
        return cls(endpoint, token, **kw)

    # ---- plumbing ----

    @property
    def api(self) -> Any:
        """The underlying `huggingface_hub.HfApi`, bound to this endpoint and token (False: never a saved one)."""
        if self._api is None:
            hf = _hf()
            self._api = hf.HfApi(endpoint=self.endpoint, token=self.token or False, library_name=LIBRARY_NAME)
        return self._api

    def request_headers(self) -> dict[str, str]:
        """What every request sends: Hearth's user agent, and Authorization only when a token was given."""
        from app import __version__

        _hf()
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token or False, library_name=LIBRARY_NAME, library_version=__version__)

    def _error(self, exc: BaseException, repo_id: str | None = None) -> HubError:
        err = map_hub_error(exc, endpoint=self.endpoint, repo_id=repo_id, has_token=bool(self.token))
        logger.info("hub call failed (%s): %s", type(exc).__name__, exc)
        return err

    def _get(self, url: str, params: Any = None, repo_id: str | None = None) -> Any:
        """GET with the Hub's headers and our timeout; returns the httpx response (status checked)."""
        try:
            _hf()
            from huggingface_hub.utils import get_session, hf_raise_for_status

            response = get_session().get(url, params=params, headers=self.request_headers(), timeout=self.timeout)
            hf_raise_for_status(response)
            return response
        except Exception as exc:
            raise self._error(exc, repo_id) from exc

    def _same_origin(self, url: str) -> bool:
        a, b = urlsplit(url), urlsplit(self.endpoint)
        return (a.scheme, a.netloc) == (b.scheme, b.netloc)

    def _json(self, response: Any, repo_id: str | None = None) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise HubError(f"the Hub sent an unreadable answer for {repo_id or 'the request'}") from exc

    def _paged(self, url: str, params: Any, repo_id: str) -> Iterator[Any]:
        for _ in range(MAX_PAGES):
            response = self._get(url, params, repo_id)
            items = self._json(response, repo_id)
            if not isinstance(items, list):
                raise HubError(f"the Hub sent an unexpected listing for {repo_id}")
            yield from items
            url = response.links.get("next", {}).get("url")
            params = None
            if not url or not self._same_origin(url):
                return

    # ---- search ----

    def search(
        self,
        text: str = "",
        *,
        author: str | None = None,
        formats: tuple[str, ...] | list[str] = (GGUF,),
        sort: str = "downloads",
        limit: int = 50,
        page_token: str | None = None,
    ) -> SearchPage:
        """One page of models. Several formats run one query each (the Hub ANDs filters), merged by `sort`."""
        query.check_query(formats, sort)
        limit = max(1, min(int(limit), 1000))
        queries: list[str | None] = list(formats) or [None]
        if page_token:
            urls = query.decode_page_token(page_token, len(queries))
            if any(u and not self._same_origin(u) for u in urls):
                raise ValueError("the page token points away from this Hub endpoint")
        else:
            urls = [""] * len(queries)
        results: list[ModelSummary] = []
        nexts: list[str | None] = []
        for fmt, url in zip(queries, urls):
            if url is None:  # that query has no more pages
                nexts.append(None)
                continue
            if url:
                response = self._get(url)
            else:
                params = query.search_params(text, author, fmt, sort, limit)
                response = self._get(f"{self.endpoint}/api/models", params)
            items = self._json(response)
            if not isinstance(items, list):
                raise HubError("the Hub sent an unexpected search answer")
            results += [ModelSummary.from_json(d) for d in items if isinstance(d, dict)]
            link = response.links.get("next", {}).get("url")
            nexts.append(link if link and self._same_origin(link) else None)
        if len(queries) > 1:
            results = query.merge_results(results, sort)
        return SearchPage(results, query.encode_page_token(nexts))

    # ---- one repo ----

    def model(self, repo_id: str, revision: str = "main") -> RepoDetails:
        """Repo metadata with every file's size and hash. Works for gated repos without access."""
        check_repo_id(repo_id)
        try:
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True, timeout=self.timeout)
        except Exception as exc:
            raise self._error(exc, repo_id) from exc
        card: Any = getattr(info, "card_data", None)
        card_dict = card.to_dict() if hasattr(card, "to_dict") else (dict(card) if isinstance(card, Mapping) else {})
        return RepoDetails(
            id=info.id,
            sha=info.sha or revision,
            files=_checked(repo_id, repo_files(info)),
            gated=info.gated or False,
            private=bool(info.private),
            tags=list(info.tags or []),
            library_name=info.library_name,
            card_data=card_dict,
            last_modified=parse_time(info.last_modified),
            downloads=as_int(info.downloads),
            likes=as_int(info.likes),
        )

    def tree(self, repo_id: str, revision: str = "main") -> list[RepoFile]:
        """Every file of a revision (recursive), with size and hash."""
        check_repo_id(repo_id)
        url = f"{self.endpoint}/api/models/{repo_id}/tree/{quote(revision, safe='')}"
        files = []
        for e in self._paged(url, {"recursive": "true", "expand": "false"}, repo_id):
            if not isinstance(e, dict) or e.get("type") != "file":
                continue
            lfs = e.get("lfs") if isinstance(e.get("lfs"), dict) else None
            oid = e.get("oid") if isinstance(e.get("oid"), str) else None
            files.append(
                RepoFile(
                    str(e.get("path")), as_int(e.get("size")), lfs.get("oid") if lfs else None, None if lfs else oid
                )
            )
        return _checked(repo_id, files)

    def branches(self, repo_id: str) -> list[Ref]:
        """The repo's branches (EXL2 quants live on them), each with its head commit."""
        check_repo_id(repo_id)
        data = self._json(self._get(f"{self.endpoint}/api/models/{repo_id}/refs", None, repo_id), repo_id)
        branches = data.get("branches") if isinstance(data, dict) else None
        return [
            Ref(str(b.get("name")), str(b.get("targetCommit") or ""))
            for b in branches or []
            if isinstance(b, dict) and b.get("name")
        ]

    def resolve_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        check_repo_id(repo_id)
        validate_remote_name(path)
        return resolve_url(self.endpoint, repo_id, path, revision)

    def _small_get(self, repo_id: str, path: str, revision: str, cap: int) -> bytes:
        """A capped GET of a small file: at most `cap + 1` bytes come back, so a caller sees it was cut."""
        try:
            _hf()
            from huggingface_hub.utils import get_session, hf_raise_for_status

            url = self.resolve_url(repo_id, path, revision)
            with get_session().stream("GET", url, headers=self.request_headers(), timeout=self.timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    hf_raise_for_status(response)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > cap:
                        break
                return bytes(body[: cap + 1])
        except Exception as exc:
            raise self._error(exc, repo_id) from exc

    def model_card(self, repo_id: str, revision: str = "main") -> str:
        """README.md text ("" when the repo has none), cut at MAX_CARD_BYTES."""
        check_repo_id(repo_id)
        try:
            raw = self._small_get(repo_id, "README.md", revision, MAX_CARD_BYTES)
        except HubNotFound:
            return ""
        return raw[:MAX_CARD_BYTES].decode("utf-8", errors="replace")

    def json_file(self, repo_id: str, path: str, revision: str = "main", *, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
        """A small JSON file of the repo (a config, an index); refused above `max_bytes` or when not JSON."""
        raw = self._small_get(repo_id, path, revision, max_bytes)
        if len(raw) > max_bytes:
            raise HubRefused(f"{repo_id}: {path} is larger than {max_bytes // 1024} KiB")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise HubRefused(f"{repo_id}: {path} is not valid JSON") from exc

    def config(self, repo_id: str, revision: str = "main") -> dict[str, Any]:
        """config.json, refused when it is not an object or asks to run the repo's own code (T6)."""
        from app.core.models.errors import ModelFileError
        from app.core.models.hf_config import check_no_remote_code

        config = self.json_file(repo_id, "config.json", revision)
        if not isinstance(config, dict):
            raise HubRefused(f"{repo_id}: config.json is not a JSON object")
        try:
            check_no_remote_code(config)
        except ModelFileError as exc:
            raise HubRefused(f"{repo_id}: {exc}") from exc
        return config

    def file_metadata(self, repo_id: str, path: str, revision: str = "main") -> FileMetadata:
        """HEAD of a file: commit, ETag, size. The first call with download intent (raises HubGated)."""
        url = self.resolve_url(repo_id, path, revision)
        try:
            hf = _hf()
            meta = hf.get_hf_file_metadata(
                url, token=self.token or False, timeout=self.timeout, library_name=LIBRARY_NAME, endpoint=self.endpoint
            )
        except Exception as exc:
            raise self._error(exc, repo_id) from exc
        return FileMetadata(url=url, commit=meta.commit_hash, etag=meta.etag, size=meta.size)

    # ---- model headers by HTTP Range ----

    def range_source(
        self, repo_id: str, path: str, revision: str = "main", *, http: httpx.Client | None = None, **kw: Any
    ) -> HttpRangeSource:
        """Random access to one remote file in ranged GETs (for a header parser); nothing else is fetched."""
        return HttpRangeSource(
            self.resolve_url(repo_id, path, revision), client=http, headers=self.request_headers(), **kw
        )

    def gguf_headers(
        self, repo_id: str, paths: Sequence[str], revision: str = "main", *, http: httpx.Client | None = None
    ) -> list[GGUFHeader]:
        """Every shard's GGUF header of one model, checked to belong together."""
        urls = [self.resolve_url(repo_id, p, revision) for p in paths]
        return read_remote_gguf_split(urls, client=http, headers=self.request_headers(), timeout=self.timeout * 2)
