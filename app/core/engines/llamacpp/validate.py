"""The pure-Python check every GGUF passes right before llama.cpp opens it (security.md T33, issue 31).

The engine's load (and the draft model's) is the one door to native loading, so the check sits here and
relies on no caller's earlier one (preflight, the library import): a file that fails it never reaches
llama.cpp, whose own checks on hostile values can abort the whole process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.core.engines.errors import EngineError
from app.core.models.errors import ModelFileError

if TYPE_CHECKING:
    from app.core.models.gguf import GGUFHeader


def validated_gguf(path: Path) -> GGUFHeader:
    """Validate a GGUF (header, tensors, hyper-parameters), every shard of a split one; the first shard's
    header, or EngineError with the validator's sentence."""
    from app.core.models.gguf import validate_gguf
    from app.core.models.gguf_split import split_shard_names

    try:
        header = validate_gguf(path)
        # llama.cpp opens the other shards itself (named after the first one): they are checked too.
        for name in split_shard_names(path.name)[1:]:
            validate_gguf(path.with_name(name))
    except ModelFileError as exc:
        raise EngineError(str(exc)) from exc
    except OSError as exc:
        raise EngineError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    return header
