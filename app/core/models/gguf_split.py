"""Names of split GGUFs: `model-00001-of-00003.gguf` (llama.cpp `gguf-split` naming)."""

from __future__ import annotations

import re

_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<ext>\.gguf)$", re.IGNORECASE)


def parse_split_name(name: str) -> tuple[str, int, int] | None:
    """`dir/model-00002-of-00003.gguf` -> ("dir/model", 2, 3); None if not a valid shard name."""
    match = _SPLIT_RE.match(name)
    if match is None:
        return None
    index, count = int(match["index"]), int(match["count"])
    if not 1 <= index <= count:
        return None
    return match["stem"], index, count


def split_shard_names(first_name: str) -> list[str]:
    """All shard names of a split GGUF in order, from any one of them; [name] if not split."""
    parsed = parse_split_name(first_name)
    if parsed is None:
        return [first_name]
    stem, _, count = parsed
    ext = first_name[-len(".gguf") :]
    return [f"{stem}-{i:05d}-of-{count:05d}{ext}" for i in range(1, count + 1)]
