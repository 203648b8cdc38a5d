"""What goes into Hearth's PyInstaller bundle, kept apart from the spec so tests can read it without PyInstaller.

The spec (`hearth.spec`) imports this module; `tests/installers/test_spec.py` checks it against `resources/` and
against what the app loads at run time.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "hearth"

# Loaded by name at run time (app.core.native.import_native, string imports), so the bytecode scan misses them.
HIDDEN_IMPORTS = [
    "llama_cpp",
    "llama_cpp._internals",
    "llama_cpp.llama_grammar",
    "numpy",
    # The Benchmark page draws with Qt Charts; icons are SVG.
    "PySide6.QtCharts",
    "PySide6.QtSvg",
]

# macOS bundles MLX (Apple Silicon); mlx_lm picks a model's architecture module by name at load time.
MLX_HIDDEN_IMPORTS = [
    "mlx",
    "mlx.core",
    "mlx_lm",
    "mlx_lm.generate",
    "mlx_lm.sample_utils",
    "mlx_lm.tokenizer_utils",
    "mlx_lm.models.cache",
]

# Never needed by the app: the web engine and the Qt modules it does not use, test and dev tooling, and
# llama-cpp-python's own server (Hearth serves through app.server).
EXCLUDES = [
    "tkinter",
    "PySide6.QtWebEngineCore",
    "PySide6.QtWebEngineWidgets",
    "PySide6.QtWebEngineQuick",
    "PySide6.QtWebChannel",
    "PySide6.QtWebSockets",
    "PySide6.QtWebView",
    "PySide6.QtQml",
    "PySide6.QtQuick",
    "PySide6.QtQuickWidgets",
    "PySide6.QtQuick3D",
    "PySide6.QtQuickControls2",
    "PySide6.Qt3DCore",
    "PySide6.Qt3DRender",
    "PySide6.Qt3DExtras",
    "PySide6.Qt3DInput",
    "PySide6.Qt3DLogic",
    "PySide6.Qt3DAnimation",
    "PySide6.QtMultimedia",
    "PySide6.QtMultimediaWidgets",
    "PySide6.QtPdf",
    "PySide6.QtPdfWidgets",
    "PySide6.QtDesigner",
    "PySide6.QtUiTools",
    "PySide6.QtHelp",
    "PySide6.QtLocation",
    "PySide6.QtPositioning",
    "PySide6.QtBluetooth",
    "PySide6.QtNfc",
    "PySide6.QtSensors",
    "PySide6.QtSerialPort",
    "PySide6.QtSerialBus",
    "PySide6.QtTextToSpeech",
    "PySide6.QtSpatialAudio",
    "PySide6.QtRemoteObjects",
    "PySide6.QtScxml",
    "PySide6.QtSql",
    "PySide6.QtTest",
    "PySide6.QtDataVisualization",
    "PySide6.QtGraphs",
    "PySide6.QtGraphsWidgets",
    "PySide6.QtHttpServer",
    "PySide6.QtNetworkAuth",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "llama_cpp.server",
    "pytest",
    "_pytest",
    "hypothesis",
    "schemathesis",
    "IPython",
    "matplotlib",
    "torch",
    "tensorflow",
    # Pulled in by pydantic's mypy plugin and huggingface_hub's optional upload/torch paths; Hearth reads
    # safetensors headers itself and downloads with its own client.
    "mypy",
    "pydantic.mypy",
    "ast_serialize",
    "librt",
    "safetensors",
    "hf_xet",
]
MLX_EXCLUDES = ["mlx", "mlx_lm", "transformers"]  # everywhere but macOS arm64

# Qt plugins kept, by plugin folder: what a desktop session and headless runs need. Folders not listed go.
QT_PLUGINS = {
    "platforms": {"xcb", "wayland", "wayland-egl", "offscreen", "minimal", "cocoa", "windows"},
    "imageformats": {"svg", "ico", "jpeg", "gif"},
    "iconengines": {"svgicon"},
    "styles": None,  # every style (None: keep the whole folder)
    "platformthemes": None,  # GTK/xdg-desktop-portal file dialogs and colours
    # Compose keys and IBus input methods; not Qt's virtual keyboard (it needs Qt Quick).
    "platforminputcontexts": {"composeplatforminputcontextplugin", "ibusplatforminputcontextplugin"},
    "xcbglintegrations": None,
    "wayland-decoration-client": None,
    "wayland-graphics-integration-client": None,
    "wayland-shell-integration": None,
    "tls": None,
    "generic": None,
}


# Qt libraries only the dropped plugins link (the PDF image format, the virtual keyboard's Qt Quick, the eglfs
# platform) and the web engine: dropped from the bundle by name, however the platform spells them.
DROPPED_QT_MODULES = ("Pdf", "Qml", "Quick", "VirtualKeyboard", "EglFS", "EglFs", "WebEngine", "WebChannel")


def is_mac_arm() -> bool:
    import platform

    return sys.platform == "darwin" and platform.machine() == "arm64"


def resource_datas(root: Path = ROOT) -> list[tuple[str, str]]:
    """(source file, folder in the bundle) for every file under resources/, kept at the same relative path:
    app.core.resources finds them at the bundle root's `resources/` exactly as in a checkout."""
    out = []
    for path in sorted((root / "resources").rglob("*")):
        if path.is_file():
            out.append((str(path), str(path.parent.relative_to(root))))
    return out


def kept_in_bundle(dest: str) -> bool:
    """Whether a collected file stays in the bundle (`dest`: its path there, e.g.
    PySide6/Qt/plugins/platforms/libqxcb.so): not a dropped Qt library, and under Qt's plugins folder only the
    plugins QT_PLUGINS keeps. Everything else stays."""
    parts = Path(dest).parts
    if any(_dropped_qt_library(part) for part in parts):
        return False
    if "plugins" not in parts or "PySide6" not in parts:
        return True
    i = parts.index("plugins")
    if len(parts) < i + 3:
        return True
    folder, name = parts[i + 1], parts[i + 2]
    if folder not in QT_PLUGINS:
        return False
    wanted = QT_PLUGINS[folder]
    if wanted is None:
        return True
    stem = name.split(".")[0].removeprefix("lib").removeprefix("q")
    return stem in wanted


def _dropped_qt_library(name: str) -> bool:
    """libQt6Pdf.so.6 (Linux), Qt6Pdf.dll (Windows), QtPdf.framework (macOS) and the like."""
    for prefix in ("libQt6", "Qt6", "Qt"):
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return any(rest.startswith(module) for module in DROPPED_QT_MODULES)
    return False


def excludes() -> list[str]:
    return EXCLUDES + ([] if is_mac_arm() else MLX_EXCLUDES)


def hidden_imports() -> list[str]:
    return HIDDEN_IMPORTS + (MLX_HIDDEN_IMPORTS if is_mac_arm() else [])


def version(root: Path = ROOT) -> str:
    """app.__version__, read from the source (the spec must not import the app)."""
    import re

    text = (root / "app" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise ValueError("app/__init__.py has no __version__")
    return match.group(1)
