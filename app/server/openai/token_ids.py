"""Token-id input on /v1/embeddings, read as OpenAI's own tokens.

The OpenAI API takes `input` as arrays of token ids, and LangChain's `OpenAIEmbeddings` sends exactly that
by default: it cuts long texts with tiktoken's `cl100k_base` (its fallback for any model name it does not
know) and posts the ids. Those ids mean nothing in a local model's vocabulary, so reading them as the
model's own would embed the wrong text without a word. Hearth turns them back into text with the
cl100k_base table instead and embeds that. The table is OpenAI's file, which tiktoken downloads into its
cache the first time a client uses it (on a local setup, the same machine); Hearth reads it from there,
checks its published SHA-256, and never downloads it. Without it, token ids are a clear 400 that says how
to send text instead (security.md T47).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# The special tokens cl100k_base adds after its byte-pair ranks (tiktoken's published numbering).
CL100K_SPECIAL = {
    100257: "<|endoftext|>",
    100258: "<|fim_prefix|>",
    100259: "<|fim_middle|>",
    100260: "<|fim_suffix|>",
    100276: "<|endofprompt|>",
}
CL100K_SIZE = 100277  # one past the largest id
MAX_TABLE_BYTES = 16 << 20  # the real file is ~1.7 MB; a bigger one is not it


class TokenIdsUnreadable(Exception):
    """Token ids arrived but cannot be turned back into text; the message says what to do."""


@dataclass(frozen=True)
class TokenTable:
    """cl100k_base's id → bytes, read from a verified copy of OpenAI's file."""

    ranks: dict[int, bytes]
    source: Path

    def text(self, ids: list[int]) -> str:
        """The text `ids` stand for. A chunk boundary can split a multi-byte character (LangChain cuts
        every 8,191 tokens); the broken halves become U+FFFD rather than an error."""
        out = bytearray()
        for token in ids:
            piece = self.ranks.get(token)
            if piece is None:
                special = CL100K_SPECIAL.get(token)
                if special is None:
                    raise TokenIdsUnreadable(f"token id {token} is not in OpenAI's cl100k_base (0–{CL100K_SIZE - 1})")
                piece = special.encode()
            out += piece
        return out.decode("utf-8", errors="replace")


def cache_dirs() -> list[Path]:
    """Where tiktoken keeps what it downloaded, in the order it looks (its environment variables first)."""
    dirs = [os.environ.get(name) for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")]
    found = [Path(d) for d in dirs if d]
    found.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    return found


def cache_file_name() -> str:
    """tiktoken names a cached download by the SHA-1 of its URL."""
    return hashlib.sha1(CL100K_URL.encode()).hexdigest()


def parse_table(data: bytes, source: Path) -> TokenTable:
    """A `.tiktoken` file: one `base64-bytes rank` pair a line."""
    ranks: dict[int, bytes] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            encoded, rank = line.split()
            ranks[int(rank)] = base64.b64decode(encoded, validate=True)
        except (ValueError, binascii.Error) as exc:
            raise TokenIdsUnreadable(f"{source} is not a tiktoken file (line {number})") from exc
    return TokenTable(ranks, source)


class TokenTables:
    """Finds, verifies and keeps the cl100k_base table; safe from any thread (asyncio.to_thread calls it).
    A file that appears later (a client ran tiktoken meanwhile) is found on the next request."""

    def __init__(self, dirs: list[Path] | None = None, expected_sha256: str = CL100K_SHA256) -> None:
        self._dirs = dirs
        self._expected = expected_sha256
        self._lock = threading.Lock()
        self._table: TokenTable | None = None

    def cl100k(self) -> TokenTable:
        with self._lock:
            if self._table is None:
                self._table = self._load()
            return self._table

    def _load(self) -> TokenTable:
        dirs = self._dirs if self._dirs is not None else cache_dirs()
        name = cache_file_name()
        for folder in dirs:
            path = folder / name
            try:
                if not path.is_file() or path.stat().st_size > MAX_TABLE_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() != self._expected:
                logger.warning("ignoring %s: its SHA-256 is not cl100k_base's", path)
                continue
            logger.info("reading OpenAI token ids with cl100k_base from %s", path)
            return parse_table(data, path)
        looked = ", ".join(str(d) for d in dirs)
        raise TokenIdsUnreadable(
            "input holds token ids, which Hearth reads as OpenAI's cl100k_base tokens, but that tokenizer's "
            f"file is not on this machine (looked in {looked}). Send the text instead (LangChain: "
            "OpenAIEmbeddings(..., check_embedding_ctx_length=False)), or fetch the file once with "
            "python -c \"import tiktoken; tiktoken.get_encoding('cl100k_base')\""
        )


def texts_of(tables: TokenTables, ids: list[list[int]]) -> list[str]:
    """Each array of ids as the text it encodes (raises TokenIdsUnreadable with the reason)."""
    table = tables.cl100k()
    return [table.text(one) for one in ids]
