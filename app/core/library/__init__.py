"""The local model library: downloaded and imported models, their files, hashes and status."""

from app.core.library.importers import (
    ImportResult,
    import_hf_cache,
    import_lmstudio,
    import_ollama,
    import_path,
)
from app.core.library.store import MISSING, QUARANTINED, READY, Library, LocalModel, ModelFile, open_library

__all__ = [
    "MISSING",
    "QUARANTINED",
    "READY",
    "ImportResult",
    "Library",
    "LocalModel",
    "ModelFile",
    "import_hf_cache",
    "import_lmstudio",
    "import_ollama",
    "import_path",
    "open_library",
]
