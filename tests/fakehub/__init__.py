"""A fake Hugging Face Hub for tests: real HTTP on 127.0.0.1, a request log and fault injection."""

from tests.fakehub.faults import Fault, FaultQueue
from tests.fakehub.repos import (
    HOSTILE_NAMES,
    FakeFile,
    FakeRepo,
    default_gguf,
    exl2_repo,
    gated_repo,
    gguf_repo,
    git_blob_sha1,
    hostile_repo,
    mlx_repo,
    pickle_repo,
    safetensors_bytes,
)
from tests.fakehub.server import GOOD_TOKEN, FakeHub, RequestRecord

__all__ = [
    "GOOD_TOKEN",
    "HOSTILE_NAMES",
    "FakeFile",
    "FakeHub",
    "FakeRepo",
    "Fault",
    "FaultQueue",
    "RequestRecord",
    "default_gguf",
    "exl2_repo",
    "gated_repo",
    "gguf_repo",
    "git_blob_sha1",
    "hostile_repo",
    "mlx_repo",
    "pickle_repo",
    "safetensors_bytes",
]
