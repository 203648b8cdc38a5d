"""The PyInstaller bundle ships what the app loads at run time, and only the Qt it uses; the desktop entry is
valid. (Building and running the bundle is `make bundle` / `make bundle-check`, outside `make test`.)"""

from __future__ import annotations

import ast
import configparser
import sys
from pathlib import Path

import pytest

from tests.installers.helpers import INSTALLERS, ROOT, load

layout = load("bundle_layout.py")
SPEC = (INSTALLERS / "hearth.spec").read_text(encoding="utf-8")
BUNDLE = ROOT / "dist" / layout.NAME


def shipped(datas: list[tuple[str, str]]) -> set[str]:
    """Paths (relative to the bundle's root) that PyInstaller's datas put in the bundle."""
    return {str(Path(dest) / Path(src).name) for src, dest in datas}


def resource_files() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "resources").rglob("*") if p.is_file()}


def test_the_spec_ships_every_file_under_resources_at_the_same_path():
    datas = layout.resource_datas(ROOT)
    assert shipped(datas) == resource_files()
    assert {"resources/catalog.json", "resources/styles/hearth.qss", "resources/icons/chat.svg"} <= shipped(datas)
    # The spec hands exactly these to PyInstaller, and keeps llama.cpp's libraries where llama_cpp looks.
    assert "datas = layout.resource_datas(ROOT)" in SPEC and "datas=datas," in SPEC
    assert '"llama_cpp/lib"' in SPEC and 'collect_dynamic_libs("llama_cpp")' in SPEC
    assert "kept_in_bundle(entry[0])" in SPEC


def test_a_new_resource_file_is_shipped_without_editing_the_spec(tmp_path):
    (tmp_path / "resources" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "resources" / "deep" / "er" / "new.json").write_text("{}")
    (tmp_path / "resources" / "top.txt").write_text("x")
    assert shipped(layout.resource_datas(tmp_path)) == {"resources/deep/er/new.json", "resources/top.txt"}


def _resource_calls() -> list[tuple[str, list[str | None]]]:
    """Every resource_path(...) / load_json(...) of app.core.resources in app/: (where, literal args or None)."""
    found = []
    for path in (ROOT / "app").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "app.core.resources"
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                args = [
                    a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args
                ]
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.append((where, ["resources", *args]))  # both take a path under resources/
    return found


def test_every_resource_the_app_loads_is_in_the_bundle():
    calls = _resource_calls()
    assert len(calls) >= 5  # catalog, quants, palette, style sheet, icons: the scan does see them
    files = shipped(layout.resource_datas(ROOT))
    folders = {str(p) for f in files for p in Path(f).parents if str(p) != "."}
    for where, parts in calls:
        literal = []
        for part in parts:
            if part is None:
                break
            literal.append(part)
        target = str(Path(*literal))
        if len(literal) == len(parts):  # a whole literal path: that file, or that folder (styles/controls), is shipped
            assert target in files or target in folders, f"{where} loads {target}, which the bundle lacks"
        else:  # a name built at run time (icons/<page>.svg): its folder is shipped
            assert target in folders, f"{where} loads from {target}/, which the bundle lacks"
    # The bandwidth table is read by path, not through resource_path.
    from app.core.hardware import bandwidth

    assert str(bandwidth.TABLE_PATH.relative_to(ROOT)) in files


def test_resources_are_found_at_the_bundle_root_as_in_a_checkout():
    """PyInstaller keeps app/core/resources.py's path relative to the bundle root, so RESOURCES (two levels above
    its folder) lands where the datas put resources/."""
    from app.core import resources

    assert resources.RESOURCES == ROOT / "resources"
    assert Path(resources.__file__).resolve().relative_to(ROOT).parts[:2] == ("app", "core")
    assert {dest.split("/")[0] for _src, dest in layout.resource_datas(ROOT)} == {"resources"}


@pytest.mark.parametrize(
    ("dest", "kept"),
    [
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
        ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
        ("PySide6/Qt/plugins/platforms/libqwayland.so", True),
        ("PySide6/Qt/plugins/platforms/qwindows.dll", True),
        ("PySide6/Qt/plugins/platforms/libqcocoa.dylib", True),
        ("PySide6/Qt/plugins/imageformats/libqsvg.so", True),
        ("PySide6/Qt/plugins/iconengines/libqsvgicon.so", True),
        ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", True),
        ("PySide6/Qt/lib/libQt6Charts.so.6", True),
        ("PySide6/Qt/lib/libQt6Svg.so.6", True),
        ("PySide6/QtCharts.abi3.so", True),
        ("llama_cpp/lib/libllama.so", True),
        ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
        ("PySide6/Qt/plugins/platforms/libqvnc.so", False),
        ("PySide6/Qt/plugins/imageformats/libqpdf.so", False),
        ("PySide6/Qt/plugins/multimedia/libffmpegmediaplugin.so", False),
        ("PySide6/Qt/plugins/platforminputcontexts/libqtvirtualkeyboardplugin.so", False),
        ("PySide6/Qt/lib/libQt6WebEngineCore.so.6", False),
        ("PySide6/Qt/lib/libQt6Quick.so.6", False),
        ("PySide6/Qt/lib/libQt6Pdf.so.6", False),
        ("PySide6/Qt6WebEngineCore.dll", False),
        ("PySide6/Qt/lib/QtWebEngineCore.framework/Versions/A/QtWebEngineCore", False),
    ],
)
def test_only_the_qt_hearth_uses_is_kept(dest, kept):
    assert layout.kept_in_bundle(dest) is kept


def test_web_engine_and_unused_qt_modules_are_excluded_and_charts_and_svg_included():
    excludes = layout.excludes()
    assert {"PySide6.QtWebEngineCore", "PySide6.QtWebEngineWidgets", "PySide6.QtQuick", "PySide6.QtMultimedia"} <= set(
        excludes
    )
    hidden = layout.hidden_imports()
    assert {"PySide6.QtCharts", "PySide6.QtSvg", "llama_cpp", "llama_cpp._internals"} <= set(hidden)
    # Every module Hearth imports from PySide6 stays (an exclude would break the app at run time).
    used = set()
    for path in (ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("PySide6."):
                used.add(node.module)
    assert used and not used & set(excludes)
    assert not any(layout.kept_in_bundle(f"PySide6/Qt/lib/libQt6{m.split('.Qt')[1]}.so.6") is False for m in used)


def test_mlx_is_bundled_only_on_apple_silicon(monkeypatch):
    monkeypatch.setattr(layout, "is_mac_arm", lambda: True)
    assert "mlx_lm" in layout.hidden_imports() and "mlx" not in layout.excludes()
    monkeypatch.setattr(layout, "is_mac_arm", lambda: False)
    assert "mlx_lm" not in layout.hidden_imports() and "mlx" in layout.excludes()


def test_version_comes_from_the_app():
    from app import __version__

    assert layout.version(ROOT) == __version__


def read_desktop(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(path.read_text(encoding="utf-8"))
    assert parser.sections() == ["Desktop Entry"]
    return dict(parser["Desktop Entry"])


def test_the_desktop_entry_is_valid():
    entry = read_desktop(INSTALLERS / "linux" / "hearth.desktop")
    for key in ("Name", "Exec", "Icon", "Type", "Categories"):
        assert entry.get(key), f"{key} missing"
    assert entry["Type"] == "Application"
    assert entry["Exec"].split()[0] == layout.NAME and "%" not in entry["Exec"]  # hearth takes no files
    assert entry["Icon"] == "hearth" and (INSTALLERS / "icons" / "hearth.svg").is_file()
    categories = entry["Categories"]
    assert categories.endswith(";")
    main_categories = {"AudioVideo", "Audio", "Video", "Development", "Education", "Game", "Graphics", "Network"}
    main_categories |= {"Office", "Science", "Settings", "System", "Utility"}
    assert set(categories.rstrip(";").split(";")) & main_categories
    assert entry.get("Terminal") == "false"


def test_the_icon_renders_to_every_desktop_size(tmp_path, qapp):
    from PySide6.QtGui import QImage

    render = load("icons/render_icons.py")
    written = render.render(INSTALLERS / "icons" / "hearth.svg", tmp_path)
    assert [int(p.parent.parent.name.split("x")[0]) for p in written] == [16, 32, 48, 64, 128, 256, 512]
    for path in written:
        image = QImage(str(path))
        size = int(path.parent.parent.name.split("x")[0])
        assert (image.width(), image.height()) == (size, size)
        assert image.pixelColor(size // 2, size // 2).alpha() == 255  # drawn, not blank
        assert image.pixelColor(0, 0).alpha() == 0  # rounded corners stay transparent


def test_a_broken_svg_is_an_error(tmp_path, qapp):
    render = load("icons/render_icons.py")
    bad = tmp_path / "bad.svg"
    bad.write_text("not an svg")
    with pytest.raises(ValueError, match="not a valid SVG"):
        render.render(bad, tmp_path / "out")


def test_package_lays_out_the_desktop_files_and_packs_a_versioned_tarball(tmp_path, qapp):
    import tarfile

    package = load("linux/package.py")
    render = load("icons/render_icons.py")
    icons = tmp_path / "icons"
    render.render(INSTALLERS / "icons" / "hearth.svg", icons, sizes=(16, 48))
    bundle = tmp_path / "dist" / "hearth"
    bundle.mkdir(parents=True)
    (bundle / "hearth").write_text("#!/bin/sh\n")
    assert package.main(["--dist", str(tmp_path / "dist"), "--icons", str(icons)]) == 0
    assert (bundle / "share" / "applications" / "hearth.desktop").is_file()
    assert (bundle / "share" / "icons" / "hicolor" / "48x48" / "apps" / "hearth.png").is_file()
    assert (bundle / "share" / "icons" / "hicolor" / "scalable" / "apps" / "hearth.svg").is_file()
    assert (bundle / "install.sh").stat().st_mode & 0o111
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    assert archive.name.startswith(f"hearth-{layout.version()}-linux-")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    stem = archive.name.removesuffix(".tar.gz")
    assert f"{stem}/hearth" in names and f"{stem}/share/applications/hearth.desktop" in names


def test_package_without_rendered_icons_says_so(tmp_path):
    package = load("linux/package.py")
    bundle = tmp_path / "dist" / "hearth"
    bundle.mkdir(parents=True)
    (bundle / "hearth").write_text("")
    with pytest.raises(FileNotFoundError, match="render_icons"):
        package.main(["--dist", str(tmp_path / "dist"), "--icons", str(tmp_path / "none")])


@pytest.mark.skipif(not (BUNDLE / layout.NAME).is_file(), reason="no bundle built (make bundle)")
def test_a_built_bundle_holds_the_resources_and_llama_cpp_and_no_web_engine():
    internal = BUNDLE / "_internal"
    for rel in resource_files():
        assert (internal / rel).is_file(), f"{rel} missing from the built bundle (stale? run make bundle)"
    assert list((internal / "llama_cpp" / "lib").glob("libllama*"))
    assert not list(internal.rglob("*WebEngine*"))
    plugins = internal / "PySide6" / "Qt" / "plugins"
    if sys.platform.startswith("linux"):
        for plugin in ("platforms/libqoffscreen.so", "platforms/libqxcb.so", "imageformats/libqsvg.so"):
            assert (plugins / plugin).is_file(), plugin
        assert (plugins / "iconengines" / "libqsvgicon.so").is_file()


def test_the_windows_and_macos_scripts_package_what_the_spec_builds():
    """They cannot run here (see installers/README.md), so at least their paths agree with the spec's output."""
    iss = (INSTALLERS / "windows" / "hearth.iss").read_text(encoding="utf-8")
    assert 'Source: "{#Root}\\dist\\hearth\\*"' in iss and f'#define MyAppExe "{layout.NAME}.exe"' in iss
    for section in ("[Setup]", "[Files]", "[Icons]", "[Run]"):
        assert section in iss
    assert 'program(layout.NAME + "-cli", console=True)' in SPEC  # the console exe the PATH entry offers
    mac = (INSTALLERS / "macos" / "build_app.sh").read_text(encoding="utf-8")
    assert 'name="Hearth.app"' in SPEC and "APP=dist/Hearth.app" in mac
    assert "hdiutil create" in mac and "iconutil -c icns" in mac and "build/icons/hearth.icns" not in mac
    assert 'str(ROOT / "build" / "icons" / "hearth.icns")' in SPEC and "ICONS=build/icons" in mac
