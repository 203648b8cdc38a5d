"""Repository model of the fake Hub: files, branches, commits, hashes, and the JSON the Hub returns for them."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

Source = bytes | Path

# Suffixes a real Hub repo's .gitattributes sends to LFS.
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".pkl", ".ckpt", ".h5", ".msgpack", ".onnx", ".model")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
DEFAULT_DATE = "2024-05-01T12:00:00.000Z"
_READ_CHUNK = 8 * 1024 * 1024
_digest_cache: dict[tuple[str, int, int], tuple[str, str]] = {}
_digest_lock = threading.Lock()


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, as `git hash-object` computes it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _digests(source: Source) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file's content; cached for files on disk, which may be large."""
    if isinstance(source, (bytes, bytearray)):
        return hashlib.sha256(source).hexdigest(), git_blob_sha1(bytes(source))
    st = os.stat(source)
    key = (str(source), st.st_size, st.st_mtime_ns)
    with _digest_lock:
        if key in _digest_cache:
            return _digest_cache[key]
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % st.st_size)
    with open(source, "rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            sha256.update(chunk)
            sha1.update(chunk)
    result = (sha256.hexdigest(), sha1.hexdigest())
    with _digest_lock:
        _digest_cache[key] = result
    return result


@dataclass
class FakeFile:
    """One file of one revision. `source` is bytes in memory or a path on disk (served with sendfile)."""

    path: str
    source: Source
    lfs_threshold: int = 10 * 1024 * 1024

    @property
    def size(self) -> int:
        return len(self.source) if isinstance(self.source, (bytes, bytearray)) else os.stat(self.source).st_size

    def _hashes(self) -> tuple[str, str]:
        # In-memory content never changes under a FakeFile, so hash it once; files on disk use the stat-keyed cache.
        if isinstance(self.source, Path):
            return _digests(self.source)
        if "_mem_hashes" not in self.__dict__:
            self.__dict__["_mem_hashes"] = _digests(self.source)
        return self.__dict__["_mem_hashes"]

    @property
    def sha256(self) -> str:
        return self._hashes()[0]

    @property
    def is_lfs(self) -> bool:
        return self.path.lower().endswith(LFS_SUFFIXES) or self.size >= self.lfs_threshold

    @property
    def blob_id(self) -> str:
        """Git oid as the Hub reports it: of the LFS pointer for LFS files, of the content otherwise."""
        if self.is_lfs:
            return git_blob_sha1(lfs_pointer(self.sha256, self.size))
        return self._hashes()[1]

    @property
    def etag(self) -> str:
        """Unquoted ETag of the resolve endpoint: sha256 for LFS files, git sha1 otherwise."""
        return self.sha256 if self.is_lfs else self._hashes()[1]

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the content."""
        end = self.size if end is None else end
        if isinstance(self.source, (bytes, bytearray)):
            return bytes(self.source[start:end])
        with open(self.source, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def lfs_json(self) -> dict:
        return {"sha256": self.sha256, "size": self.size, "pointerSize": len(lfs_pointer(self.sha256, self.size))}

    def tree_json(self) -> dict:
        entry = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.is_lfs:
            lfs = self.lfs_json()
            entry["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
        return entry


def _clean_parents(path: str) -> list[str]:
    """Parent folders of a well-formed path; hostile names (absolute, `..`, empty parts) get none."""
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts[:-1]):
        return []
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


@dataclass
class Snapshot:
    """The files of one branch at its current commit."""

    repo_id: str
    branch: str
    files: dict[str, FakeFile]

    @property
    def commit(self) -> str:
        listing = "".join(f"{p}\0{f.blob_id}\n" for p, f in sorted(self.files.items()))
        return hashlib.sha1(f"{self.repo_id}\n{self.branch}\n{listing}".encode()).hexdigest()

    def directories(self) -> set[str]:
        return {d for p in self.files for d in _clean_parents(p)}

    def dir_json(self, path: str) -> dict:
        inner = sorted(p for p in self.files if p.startswith(path + "/"))
        oid = hashlib.sha1("\n".join(f"{p}:{self.files[p].blob_id}" for p in inner).encode()).hexdigest()
        return {"type": "directory", "oid": oid, "size": 0, "path": path}

    def tree(self, prefix: str, recursive: bool) -> list[dict] | None:
        """Entries under `prefix` ("" for the root), or None when `prefix` is not a folder."""
        dirs = self.directories()
        if prefix and prefix not in dirs:
            return None
        base = prefix + "/" if prefix else ""
        entries: dict[str, dict] = {}
        for path, f in self.files.items():
            if not path.startswith(base):
                continue
            parents = [d for d in _clean_parents(path) if len(d) > len(prefix)]
            if recursive or not parents:
                entries[path] = f.tree_json()
            for d in parents if recursive else parents[:1]:
                entries[d] = self.dir_json(d)
        return [entries[k] for k in sorted(entries)]

    def path_info(self, path: str) -> dict | None:
        if path in self.files:
            return self.files[path].tree_json()
        if path in self.directories():
            return self.dir_json(path)
        return None


def _source(s) -> Source:
    """bytes stay in memory (copied if mutable); anything else is a path on disk."""
    return bytes(s) if isinstance(s, (bytes, bytearray, memoryview)) else Path(s)


def _as_files(files: dict[str, Source], threshold: int) -> dict[str, FakeFile]:
    return {p: FakeFile(p, _source(s), threshold) for p, s in files.items()}


@dataclass
class FakeRepo:
    """A model repo. `files` is branch `main`; `branches` adds others (EXL2 quants live on branches)."""

    repo_id: str
    files: dict[str, Source] = field(default_factory=dict)
    branches: dict[str, dict[str, Source]] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    git_tags: dict[str, str] = field(default_factory=dict)  # tag name -> branch it points at
    library_name: str | None = None
    pipeline_tag: str | None = "text-generation"
    downloads: int = 0
    likes: int = 0
    trending_score: int = 0
    created_at: str = DEFAULT_DATE
    last_modified: str = DEFAULT_DATE
    gated: bool | str = False  # False | "auto" | "manual"
    private: bool = False
    card: str | None = None  # README.md text; added to main when given
    card_data: dict | None = None
    gguf: dict | None = None
    lfs_threshold: int = 10 * 1024 * 1024

    def __post_init__(self) -> None:
        main = dict(self.files)
        if self.card is not None:
            main.setdefault("README.md", self.card.encode())
        self._lock = threading.RLock()
        self._branches: dict[str, Snapshot] = {}
        self._former: dict[str, str] = {}  # replaced commit sha -> branch
        for name, content in {"main": main, **self.branches}.items():
            self._branches[name] = Snapshot(self.repo_id, name, _as_files(content, self.lfs_threshold))

    @property
    def author(self) -> str:
        return self.repo_id.split("/")[0]

    def branch_names(self) -> list[str]:
        return list(self._branches)

    def snapshot(self, revision: str) -> Snapshot | None:
        """Branch, git tag, current commit sha, or a former commit sha of a branch.

        A former commit resolves to its branch's current content, so a client pinned to a commit sees a swap.
        """
        with self._lock:
            if revision in self._branches:
                return self._branches[revision]
            if revision in self.git_tags:
                return self._branches.get(self.git_tags[revision])
            for snap in self._branches.values():
                if snap.commit == revision:
                    return snap
            if revision in self._former:
                return self._branches[self._former[revision]]
        return None

    def set_file(self, path: str, source: Source, branch: str = "main") -> str:
        """Replace or add a file: a new commit on `branch`. Returns the new commit sha."""
        with self._lock:
            snap = self._branches[branch]
            self._former[snap.commit] = branch
            files = dict(snap.files)
            files[path] = FakeFile(path, _source(source), self.lfs_threshold)
            self._branches[branch] = Snapshot(self.repo_id, branch, files)
            return self._branches[branch].commit

    def bump(self, path: str, new_content: Source | None = None, branch: str = "main") -> str:
        """Publish a new version of `path` (default: same size, last byte inverted). Returns the new commit.

        A file on disk is never modified: its new version is written next to it as `<name>.v<n>`.
        """
        with self._lock:
            current = self._branches[branch].files[path]
            if new_content is None and isinstance(current.source, Path):
                new_content = current.source.with_name(f"{current.source.name}.v{len(self._former) + 1}")
                new_content.write_bytes(current.source.read_bytes())
                with open(new_content, "r+b") as fh:
                    fh.seek(-1, os.SEEK_END)
                    last = fh.read(1)
                    fh.seek(-1, os.SEEK_END)
                    fh.write(bytes([last[0] ^ 0xFF]))
            elif new_content is None:
                data = bytearray(current.source)
                data[-1:] = bytes([data[-1] ^ 0xFF]) if data else b"\x00"
                new_content = bytes(data)
            return self.set_file(path, new_content, branch)

    def listing_json(self) -> dict:
        """What `GET /api/models` returns for this repo."""
        return {
            "_id": hashlib.sha1(self.repo_id.encode()).hexdigest()[:24],
            "id": self.repo_id,
            "modelId": self.repo_id,
            "likes": self.likes,
            "downloads": self.downloads,
            "trendingScore": self.trending_score,
            "tags": list(self.tags),
            "pipeline_tag": self.pipeline_tag,
            "library_name": self.library_name,
            "createdAt": self.created_at,
            "private": self.private,
        }

    def info_json(self, snap: Snapshot, blobs: bool) -> dict:
        """What `GET /api/models/{repo}[/revision/{rev}]` returns."""
        siblings = []
        for path, f in sorted(snap.files.items()):
            sib: dict = {"rfilename": path}
            if blobs:
                sib.update(size=f.size, blobId=f.blob_id)
                if f.is_lfs:
                    sib["lfs"] = f.lfs_json()
            siblings.append(sib)
        info = self.listing_json() | {
            "author": self.author,
            "sha": snap.commit,
            "lastModified": self.last_modified,
            "gated": self.gated,
            "disabled": False,
            "cardData": self.card_data,
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(f.size for f in snap.files.values()),
        }
        if self.gguf is not None:
            info["gguf"] = self.gguf
        return {k: v for k, v in info.items() if v is not None or k in ("library_name", "pipeline_tag")}

    def refs_json(self) -> dict:
        with self._lock:
            branches = [
                {"name": n, "ref": f"refs/heads/{n}", "targetCommit": s.commit} for n, s in self._branches.items()
            ]
            tags = [
                {"name": t, "ref": f"refs/tags/{t}", "targetCommit": self._branches[b].commit}
                for t, b in self.git_tags.items()
                if b in self._branches
            ]
        return {"branches": branches, "converts": [], "tags": tags, "pullRequests": []}


# ---- builders for the repos later tests need ----


def _gguf_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_with_data(size: int, data: bytes) -> bytes:
    """A valid GGUF of exactly `size` bytes whose one U8 tensor holds `data`'s bytes (a big download that
    is still a file the library accepts as a model)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    head += _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama")
    info = _gguf_string("token_embd.weight") + struct.pack("<I", 1)
    header_len = len(head) + len(info) + 8 + 4 + 8
    pad = -header_len % 32
    n = size - header_len - pad
    info += struct.pack("<Q", n) + struct.pack("<I", 24) + struct.pack("<Q", 0)  # I8, at the data's start
    return head + info + b"\0" * pad + (data * (n // max(1, len(data)) + 1))[:n]


def default_gguf(quant: str, split_no: int = 0, split_count: int = 0) -> bytes:
    """A tiny valid GGUF v3: magic, version, counts, a few metadata keys and one 32-float tensor (a file
    with no tensor at all is no model, and the library refuses it)."""
    kvs = [
        _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama"),
        _gguf_string("general.name") + struct.pack("<I", 8) + _gguf_string(f"fake-{quant}"),
    ]
    if split_count:
        kvs.append(_gguf_string("split.no") + struct.pack("<I", 2) + struct.pack("<H", split_no))
        kvs.append(_gguf_string("split.count") + struct.pack("<I", 2) + struct.pack("<H", split_count))
    n = 32
    tensor = _gguf_string("token_embd.weight") + struct.pack("<I", 1) + struct.pack("<Q", n)
    tensor += struct.pack("<I", 0) + struct.pack("<Q", 0)  # F32, at the start of the data
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    pad = -len(head) % 32  # the default alignment
    return head + b"\0" * pad + struct.pack(f"<{n}f", *([0.0] * n))


def gguf_repo(
    repo_id: str = "fake-org/Tiny-GGUF",
    quants: Iterable[str] = ("Q4_K_M", "Q8_0"),
    split: tuple[str, int] | None = ("Q8_0", 3),
    make_gguf: Callable[[str], bytes] | None = None,
    **meta,
) -> FakeRepo:
    """GGUF quants `<Base>-<QUANT>.gguf`; the `split` quant as `<QUANT>/<Base>-<QUANT>-0000i-of-0000n.gguf`."""
    base = repo_id.split("/")[-1].removesuffix("-GGUF")
    files: dict[str, Source] = {}
    for quant in quants:
        if split and quant == split[0]:
            n = split[1]
            for i in range(1, n + 1):
                data = make_gguf(quant) if make_gguf else default_gguf(quant, i - 1, n)
                files[f"{quant}/{base}-{quant}-{i:05d}-of-{n:05d}.gguf"] = data
        else:
            files[f"{base}-{quant}.gguf"] = make_gguf(quant) if make_gguf else default_gguf(quant)
    meta.setdefault("tags", ["gguf", "llama", "text-generation"])
    meta.setdefault("card", f"---\nlicense: apache-2.0\ntags:\n- gguf\n---\n# {base} GGUF\n")
    meta.setdefault("card_data", {"license": "apache-2.0", "tags": ["gguf"]})
    meta.setdefault("gguf", {"total": 1_000_000, "architecture": "llama", "context_length": 4096})
    return FakeRepo(repo_id, files=files, **meta)


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]] | None = None, fmt: str = "pt") -> bytes:
    """A valid safetensors file: 8-byte header length, JSON header padded to 8, zeroed tensor data."""
    tensors = tensors or {"model.embed_tokens.weight": ("F16", [4, 4])}
    itemsize = {"F16": 2, "BF16": 2, "F32": 4, "U32": 4, "I8": 1, "U8": 1}
    header: dict = {"__metadata__": {"format": fmt}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = itemsize[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def mlx_repo(repo_id: str = "mlx-community/Tiny-4bit", *, vision: dict | None = None, **meta) -> FakeRepo:
    """A 4-bit MLX repo; `vision`: the text model as a vision-language checkpoint's text_config beside this
    vision_config (LLaVA's layout)."""
    config: dict = {
        "model_type": "llama",
        "hidden_size": 4,
        "num_hidden_layers": 1,
        "vocab_size": 4,
        "quantization": {"bits": 4, "group_size": 64},
    }
    if vision is not None:
        quantization = config.pop("quantization")
        config = {"model_type": "llava", "text_config": config, "vision_config": vision, "quantization": quantization}
    tensors = {"model.embed_tokens.weight": ("U32", [4, 1]), "model.embed_tokens.scales": ("F16", [4, 1])}
    files: dict[str, Source] = {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": safetensors_bytes(tensors, fmt="mlx"),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}).encode(),
        "tokenizer_config.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}).encode(),
        "special_tokens_map.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}).encode(),
    }
    meta.setdefault("tags", ["mlx", "safetensors", "llama", "text-generation"])
    meta.setdefault("library_name", "mlx")
    meta.setdefault("card", "---\nlibrary_name: mlx\n---\n# Tiny 4-bit MLX\n")
    return FakeRepo(repo_id, files=files, **meta)


def exl2_repo(repo_id: str = "fake-org/Tiny-exl2", bpws: Iterable[str] = ("4.0bpw", "6.5bpw"), **meta) -> FakeRepo:
    """EXL2 layout: `main` holds README + measurement.json; each bpw branch a config and weights."""
    branches: dict[str, dict[str, Source]] = {}
    for bpw in bpws:
        config = {"model_type": "llama", "quantization_config": {"quant_method": "exl2", "bits": float(bpw[:-3])}}
        branches[bpw] = {"config.json": json.dumps(config).encode(), "output.safetensors": safetensors_bytes()}
    meta.setdefault("tags", ["exl2", "llama", "text-generation"])
    meta.setdefault("card", "# Tiny EXL2\nQuants are on branches.\n")
    return FakeRepo(repo_id, files={"measurement.json": b'{"measurement": {}}'}, branches=branches, **meta)


def gated_repo(repo_id: str = "fake-org/Gated-GGUF", gated: str = "auto", **kw) -> FakeRepo:
    return gguf_repo(repo_id, quants=("Q4_K_M",), split=None, gated=gated, **kw)


def pickle_repo(repo_id: str = "fake-org/Pickle-Only", **meta) -> FakeRepo:
    # Protocol-2 pickle of a small dict: enough to look like torch.save output to a name/magic check.
    files: dict[str, Source] = {
        "pytorch_model.bin": b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.",
        "config.json": b'{"model_type": "llama"}',
    }
    meta.setdefault("tags", ["pytorch", "transformers", "text-generation"])
    meta.setdefault("library_name", "transformers")
    return FakeRepo(repo_id, files=files, **meta)


HOSTILE_NAMES = ("../../x.gguf", "/etc/x.gguf", "C:\\x.gguf", "D:x.gguf", "\\\\host\\s\\x.gguf", "a\\..\\..\\x.gguf")


def hostile_repo(repo_id: str = "fake-org/Hostile-GGUF", **meta) -> FakeRepo:
    files: dict[str, Source] = {name: default_gguf("Q4_K_M") for name in HOSTILE_NAMES}
    files["README.md"] = b"# nothing to see\n"
    meta.setdefault("tags", ["gguf", "text-generation"])
    return FakeRepo(repo_id, files=files, **meta)
