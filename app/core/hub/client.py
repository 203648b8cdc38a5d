"""Hub client: search, repo details, trees, branches, model cards and variants, with typed errors.

Endpoint and token are always passed explicitly; huggingface_hub's import-time environment is never trusted.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from typing import Any, Iterator, Mapping
from urllib.parse import quote, urlsplit

from app.core.hub.errors import HubError, HubNotFound, HubRefused, map_hub_error
from app.core.hub.names import validate_remote_name
from app.core.hub.urls import DEFAULT_ENDPOINT, resolve_url
from app.core.hub.results import FileMetadata, ModelSummary, Ref, RepoDetails, SearchPage, as_int, parse_time
from app.core.hub.variants import RepoFile, VariantChoice, gguf_choices, is_allowed_file, pickle_only

__all__ = ["FileMetadata", "HubClient", "ModelSummary", "Ref", "RepoDetails", "SearchPage", "VariantChoice"]

logger = logging.getLogger(__name__)

LIBRARY_NAME = "hearth"
MAX_CARD_BYTES = 512 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
MAX_PAGES = 200  # tree listings: a runaway Link chain must end
SORTS = {"downloads": "downloads", "likes": "likes", "trending": "trendingScore", "updated": "lastModified"}
# The Hub indexes a repo's library as a tag too, so every format is one `filter=` value.
FORMAT_FILTERS = {"gguf": "gguf", "mlx": "mlx", "exl2": "exl2"}
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
_EXPAND = ("author", "downloads", "likes", "trendingScore", "lastModified", "createdAt", "tags",
           "library_name", "pipeline_tag", "gated", "private")


def _hf() -> Any:
    """Import huggingface_hub with telemetry off (it reads the environment at import time)."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
    import huggingface_hub
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True
    return huggingface_hub


def _repo_files(info: Any) -> list[RepoFile]:
    out = []
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        size = s.size if s.size is not None else (lfs.size if lfs else 0)
        out.append(RepoFile(s.rfilename, int(size or 0), getattr(lfs, "sha256", None) if lfs else None))
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
    """A Hub (or mirror) session. Every call has a timeout and raises only HubError subclasses."""

    def __init__(self, endpoint: str | None, token: str | None, *, timeout: float = 15) -> None:
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self._api: Any = None

    @classmethod
    def from_settings(cls, settings: Any, env: Mapping[str, str] | None = None, **kw: Any) -> "HubClient":
        """Settings win; `HF_ENDPOINT` / `HF_TOKEN` from `env` are the defaults."""
        env = os.environ if env is None else env
        endpoint = getattr(settings, "hf_endpoint", "") or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
        token = getattr(settings, "hf_token", "") or env.get("HF_TOKEN") or None
        return cls(endpoint, token, **kw)

    # ---- plumbing ----

    @property
    def api(self) -> Any:
        """The underlying `huggingface_hub.HfApi`, bound to this endpoint and token."""
        if self._api is None:
            hf = _hf()
            self._api = hf.HfApi(endpoint=self.endpoint, token=self.token or False, library_name=LIBRARY_NAME)
        return self._api

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _headers(self) -> dict[str, str]:
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

            response = get_session().get(url, params=params, headers=self._headers(), timeout=self.timeout)
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
        formats: tuple[str, ...] | list[str] = ("gguf",),
        sort: str = "downloads",
        limit: int = 50,
        page_token: str | None = None,
    ) -> SearchPage:
        """One page of models. Several formats run one query each (the Hub ANDs filters), merged by `sort`."""
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {sorted(SORTS)}, not {sort!r}")
        unknown = [f for f in formats if f not in FORMAT_FILTERS]
        if unknown:
            raise ValueError(f"unknown format(s) {unknown}; choose from {sorted(FORMAT_FILTERS)}")
        limit = max(1, min(int(limit), 1000))
        queries = list(formats) or [None]
        if page_token:
            urls = self._decode_token(page_token, len(queries))
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
                response = self._get(f"{self.endpoint}/api/models", self._params(text, author, fmt, sort, limit))
            items = self._json(response)
            if not isinstance(items, list):
                raise HubError("the Hub sent an unexpected search answer")
            results += [ModelSummary.from_json(d) for d in items if isinstance(d, dict)]
            link = response.links.get("next", {}).get("url")
            nexts.append(link if link and self._same_origin(link) else None)
        if len(queries) > 1:
            seen: set[str] = set()
            results = [r for r in results if not (r.id in seen or seen.add(r.id))]
            results.sort(key=_sort_key(sort), reverse=True)
        return SearchPage(results, self._encode_token(nexts))

    @staticmethod
    def _params(text: str, author: str | None, fmt: str | None, sort: str, limit: int) -> list[tuple[str, Any]]:
        params: list[tuple[str, Any]] = []
        if text:
            params.append(("search", text))
        if author:
            params.append(("author", author))
        if fmt:
            params.append(("filter", FORMAT_FILTERS[fmt]))
        params += [("sort", SORTS[sort]), ("limit", limit)]
        params += [("expand", e) for e in _EXPAND]
        return params

    @staticmethod
    def _encode_token(nexts: list[str | None]) -> str | None:
        if not any(nexts):
            return None
        if len(nexts) == 1:
            return nexts[0]
        return "m:" + base64.urlsafe_b64encode(json.dumps(nexts).encode()).decode()

    @staticmethod
    def _decode_token(token: str, n: int) -> list[str | None]:
        try:
            if token.startswith("m:"):
                urls = json.loads(base64.urlsafe_b64decode(token[2:].encode()))
            else:
                urls = [token]
        except ValueError as exc:
            raise ValueError("not a page token from this search") from exc
        if not isinstance(urls, list) or len(urls) != n or not all(u is None or isinstance(u, str) for u in urls):
            raise ValueError("the page token does not match these search formats")
        return urls

    # ---- one repo ----

    def model(self, repo_id: str, revision: str = "main") -> RepoDetails:
        """Repo metadata with every file's size and LFS sha256. Works for gated repos without access."""
        check_repo_id(repo_id)
        try:
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True, timeout=self.timeout)
        except Exception as exc:
            raise self._error(exc, repo_id) from exc
        card = getattr(info, "card_data", None)
        card_dict = card.to_dict() if hasattr(card, "to_dict") else (dict(card) if isinstance(card, Mapping) else {})
        return RepoDetails(
            id=info.id,
            sha=info.sha or revision,
            files=_checked(repo_id, _repo_files(info)),
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
        """Every file of a revision (recursive), with size and LFS sha256."""
        check_repo_id(repo_id)
        url = f"{self.endpoint}/api/models/{repo_id}/tree/{quote(revision, safe='')}"
        files = []
        for e in self._paged(url, {"recursive": "true", "expand": "false"}, repo_id):
            if not isinstance(e, dict) or e.get("type") != "file":
                continue
            lfs = e.get("lfs") if isinstance(e.get("lfs"), dict) else None
            files.append(RepoFile(str(e.get("path")), as_int(e.get("size")), lfs.get("oid") if lfs else None))
        return _checked(repo_id, files)

    def branches(self, repo_id: str) -> list[Ref]:
        """The repo's branches (EXL2 quants live on them), each with its head commit."""
        check_repo_id(repo_id)
        data = self._json(self._get(f"{self.endpoint}/api/models/{repo_id}/refs", None, repo_id), repo_id)
        branches = data.get("branches") if isinstance(data, dict) else None
        return [Ref(str(b.get("name")), str(b.get("targetCommit") or "")) for b in branches or []
                if isinstance(b, dict) and b.get("name")]

    def resolve_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        check_repo_id(repo_id)
        validate_remote_name(path)
        return resolve_url(self.endpoint, repo_id, path, revision)

    def _small_get(self, repo_id: str, path: str, revision: str, cap: int) -> bytes:
        """A capped GET of a small file; bodies over `cap` are cut (cards) or refused by the caller."""
        try:
            _hf()
            from huggingface_hub.utils import get_session, hf_raise_for_status

            url = self.resolve_url(repo_id, path, revision)
            with get_session().stream("GET", url, headers=self._headers(), timeout=self.timeout) as response:
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

    def file_metadata(self, repo_id: str, path: str, revision: str = "main") -> FileMetadata:
        """HEAD of a file: commit, ETag, size. The first call with download intent (raises HubGated)."""
        url = self.resolve_url(repo_id, path, revision)
        try:
            hf = _hf()
            meta = hf.get_hf_file_metadata(url, token=self.token or False, timeout=self.timeout,
                                           library_name=LIBRARY_NAME, endpoint=self.endpoint)
        except Exception as exc:
            raise self._error(exc, repo_id) from exc
        return FileMetadata(url=url, commit=meta.commit_hash, etag=meta.etag, size=meta.size)

    # ---- variants ----

    def variants(self, repo_id: str, revision: str = "main") -> list[VariantChoice]:
        """What a user can choose in a repo; raises HubRefused (pickle-only, remote code, nothing usable)."""
        details = self.model(repo_id, revision)
        if pickle_only(details.files):
            raise HubRefused(f"{repo_id} offers only pickle weights (.bin/.pt), which Hearth never loads")
        allowed = [f for f in details.files if is_allowed_file(f.path)]
        gated = bool(details.gated)
        out = gguf_choices(repo_id, allowed, details.sha, gated=gated)
        names = {f.path for f in allowed}
        tags = set(details.tags)
        if ("mlx" in tags or details.library_name == "mlx") and "config.json" in names:
            out.append(self._mlx_choice(repo_id, details, allowed))
        if "exl2" in tags or details.library_name == "exllamav2":
            out += self._exl2_choices(repo_id, gated)
        if not out:
            raise HubRefused(f"{repo_id} has no GGUF, MLX or EXL2 model Hearth can use")
        return out

    def _config(self, repo_id: str, revision: str) -> dict[str, Any]:
        raw = self._small_get(repo_id, "config.json", revision, MAX_CONFIG_BYTES)
        if len(raw) > MAX_CONFIG_BYTES:
            raise HubRefused(f"{repo_id}: config.json is larger than {MAX_CONFIG_BYTES // 1024} KiB")
        try:
            config = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise HubRefused(f"{repo_id}: config.json is not valid JSON") from exc
        if not isinstance(config, dict):
            raise HubRefused(f"{repo_id}: config.json is not a JSON object")
        from app.core.models.errors import ModelFileError
        from app.core.models.hf_config import check_no_remote_code

        try:
            check_no_remote_code(config)
        except ModelFileError as exc:
            raise HubRefused(f"{repo_id}: {exc}") from exc
        return config

    def _mlx_choice(self, repo_id: str, details: RepoDetails, allowed: list[RepoFile]) -> VariantChoice:
        from app.core.models.errors import ModelFileError
        from app.core.models.mlx_meta import mlx_quantization

        config = self._config(repo_id, details.sha)
        try:
            bits, group, _, _ = mlx_quantization(config)
        except ModelFileError as exc:
            raise HubRefused(f"{repo_id}: {exc}") from exc
        label = f"{bits}-bit g{group}" if group else f"{bits}-bit"
        files = [f for f in allowed if not f.path.lower().endswith(".gguf")]
        return VariantChoice(repo_id, "mlx", label, details.sha, files, bits=float(bits), gated=bool(details.gated))

    def _exl2_choices(self, repo_id: str, gated: bool) -> list[VariantChoice]:
        from app.core.models.exl2 import parse_bpw

        out = []
        for ref in self.branches(repo_id):
            bpw = parse_bpw(ref.name)
            if bpw is None:
                continue
            files = [f for f in self.tree(repo_id, ref.commit or ref.name) if is_allowed_file(f.path)]
            if not any(f.path.endswith(".safetensors") for f in files):
                logger.debug("branch %s of %s holds no weights", ref.name, repo_id)
                continue
            out.append(VariantChoice(repo_id, "exl2", ref.name, ref.commit or ref.name, files,
                                     branch=ref.name, bits=bpw, gated=gated))
        return sorted(out, key=lambda v: v.bits or 0)


def _sort_key(sort: str):
    if sort == "updated":
        return lambda r: r.last_modified.timestamp() if r.last_modified else 0.0
    attr = {"downloads": "downloads", "likes": "likes", "trending": "trending_score"}[sort]
    return lambda r: getattr(r, attr)
