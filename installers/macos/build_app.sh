#!/bin/bash
# Hearth.app and Hearth-<version>-arm64.dmg on an Apple Silicon Mac: llama.cpp with Metal, and MLX.
# NOT RUN in this project's CI (Linux); written against PyInstaller's BUNDLE, iconutil, codesign and hdiutil.
#   bash installers/macos/build_app.sh                         # unsigned .app and .dmg in dist/
#   CODESIGN_IDENTITY="Developer ID Application: …" NOTARY_PROFILE=hearth bash installers/macos/build_app.sh
set -euo pipefail
if [ "$(uname -s)" != Darwin ] || [ "$(uname -m)" != arm64 ]; then
  echo "build_app.sh builds the Apple Silicon app: run it on macOS arm64" >&2
  exit 1
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PY=$VENV/bin/python
VERSION=$($PYTHON -c "import re,sys; print(re.search(r'__version__ = \"(.+)\"', open('app/__init__.py').read()).group(1))")

# 1. A venv with Hearth, PyInstaller, MLX (a dependency on arm64 macOS) and llama-cpp-python built with Metal.
[ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
CMAKE_ARGS="-DGGML_METAL=on -DLLAVA_BUILD=ON" "$PY" -m pip install -e '.[bundle]'

# 2. The icon: the PNG renders, laid out as an .iconset, made into .icns by iconutil.
ICONS=build/icons
QT_QPA_PLATFORM=offscreen "$PY" installers/icons/render_icons.py --out "$ICONS" --sizes 16,32,64,128,256,512,1024
SET=$ICONS/hearth.iconset
rm -rf "$SET" && mkdir -p "$SET"
for s in 16 32 128 256 512; do
  cp "$ICONS/hicolor/${s}x${s}/apps/hearth.png" "$SET/icon_${s}x${s}.png"
  d=$((s * 2))
  cp "$ICONS/hicolor/${d}x${d}/apps/hearth.png" "$SET/icon_${s}x${s}@2x.png"
done
iconutil -c icns "$SET" -o "$ICONS/hearth.icns"

# 3. The bundle: dist/hearth/ (one folder) and dist/Hearth.app (the spec's BUNDLE step on macOS).
"$PY" -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller installers/hearth.spec
APP=dist/Hearth.app

# 4. Signing (optional): hardened runtime, with the two exceptions a PyInstaller app needs (entitlements.plist).
if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  codesign --force --deep --options runtime --timestamp \
    --entitlements installers/macos/entitlements.plist --sign "$CODESIGN_IDENTITY" "$APP"
  codesign --verify --deep --strict --verbose=2 "$APP"
fi

# 5. The disk image: the app and a link to /Applications to drag it onto, compressed (UDZO).
STAGE=build/dmg
rm -rf "$STAGE" && mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
DMG=dist/Hearth-$VERSION-arm64.dmg
rm -f "$DMG"
hdiutil create -volname "Hearth $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"

# 6. Notarization (optional; needs a signed app and `xcrun notarytool store-credentials $NOTARY_PROFILE`).
if [ -n "${CODESIGN_IDENTITY:-}" ] && [ -n "${NOTARY_PROFILE:-}" ]; then
  codesign --sign "$CODESIGN_IDENTITY" --timestamp "$DMG"
  xcrun notarytool submit "$DMG" --keychain-profile "$NOTARY_PROFILE" --wait
  xcrun stapler staple "$DMG"
fi

# 7. A smoke test of what was built: the same checks as `make bundle-check`, against the .app's program.
"$PY" installers/bundle_check.py --bundle "$APP/Contents/MacOS"
echo "built $APP and $DMG"
