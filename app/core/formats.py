"""The model formats Hearth knows, named once: what the library stores, what the Hub offers and what the
engine registry keys its engines by. Every other module compares against these members, never a literal
(the UI's labels aside), so a new format is added here and in the registry, nowhere else."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class ModelFormat(StrEnum):
    """A StrEnum: a member is its value wherever a str is (the library's rows, JSON, f-strings)."""

    GGUF = "gguf"  # one file (the first shard of a split): llama.cpp
    MLX = "mlx"  # a folder of safetensors and configs: mlx-lm on Apple Silicon
    EXL2 = "exl2"  # a folder ExLlamaV2 runs; listed and sized, not run here
    REMOTE = "remote"  # a model another server runs (engines/remote)

    @property
    def is_file(self) -> bool:
        """Whether a model of this format is one file (else a folder)."""
        return self is ModelFormat.GGUF


GGUF: Final = ModelFormat.GGUF
MLX: Final = ModelFormat.MLX
EXL2: Final = ModelFormat.EXL2
REMOTE: Final = ModelFormat.REMOTE
