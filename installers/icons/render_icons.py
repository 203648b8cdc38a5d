"""Render installers/icons/hearth.svg to the PNG sizes desktop environments use (hicolor theme sizes).

    QT_QPA_PLATFORM=offscreen python installers/icons/render_icons.py [--out build/icons]

Writes OUT/hicolor/NxN/apps/hearth.png for each size, and OUT/hearth.ico (Windows) from the 256 px render.
macOS's .icns is made from these by iconutil (installers/macos/build_app.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SVG = HERE / "hearth.svg"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def render(svg: Path, out: Path, sizes: tuple[int, ...] = SIZES) -> list[Path]:
    """One PNG per size under out/hicolor/NxN/apps/, plus out/hearth.ico; returns the PNGs written."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = out / "hicolor" / f"{size}x{size}" / "apps" / "hearth.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        written.append(path)
    largest = out / "hicolor" / f"{min(max(sizes), 256)}x{min(max(sizes), 256)}" / "apps" / "hearth.png"
    if largest.is_file():  # Windows' installer and exe icon; Qt's ICO writer takes one image up to 256 px
        QImage(str(largest)).save(str(out / "hearth.ico"), "ICO")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE.parents[1] / "build" / "icons")
    ap.add_argument("--sizes", help="comma-separated pixel sizes (default 16,32,48,64,128,256,512)")
    args = ap.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    if any(s < 1 or s > 4096 for s in sizes):
        ap.error("--sizes: each size must be 1..4096 pixels")
    for path in render(SVG, args.out, sizes):
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
