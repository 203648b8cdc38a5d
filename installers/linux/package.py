"""Finish the Linux bundle and pack it: desktop entry, icons and install script into dist/hearth/, then
dist/hearth-<version>-linux-<arch>.tar.gz. Run by `make bundle` after PyInstaller.

    python installers/linux/package.py [--dist dist] [--icons build/icons]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import bundle_layout  # noqa: E402


def finish(bundle: Path, icons: Path) -> None:
    """Lay the desktop integration files into the bundle, where install.sh looks for them."""
    apps = bundle / "share" / "applications"
    apps.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "hearth.desktop", apps / "hearth.desktop")
    hicolor = icons / "hicolor"
    if not hicolor.is_dir():
        raise FileNotFoundError(f"no rendered icons in {hicolor}: run installers/icons/render_icons.py first")
    shutil.copytree(hicolor, bundle / "share" / "icons" / "hicolor", dirs_exist_ok=True)
    scalable = bundle / "share" / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE.parent / "icons" / "hearth.svg", scalable / "hearth.svg")
    shutil.copy2(HERE / "install.sh", bundle / "install.sh")
    (bundle / "install.sh").chmod(0o755)


def tarball(bundle: Path, dist: Path) -> Path:
    stem = f"{bundle_layout.NAME}-{bundle_layout.version()}-linux-{platform.machine()}"
    out = dist / f"{stem}.tar.gz"
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=stem)
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dist", type=Path, default=ROOT / "dist")
    ap.add_argument("--icons", type=Path, default=ROOT / "build" / "icons")
    args = ap.parse_args(argv)
    bundle = args.dist / bundle_layout.NAME
    if not (bundle / bundle_layout.NAME).is_file():
        sys.stderr.write(f"no bundle in {bundle}: run PyInstaller first (make bundle)\n")
        return 2
    finish(bundle, args.icons)
    out = tarball(bundle, args.dist)
    sys.stdout.write(f"{out} ({out.stat().st_size / 2**20:.0f} MiB)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
