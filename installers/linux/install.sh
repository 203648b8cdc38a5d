#!/bin/sh
# Install the unpacked Hearth bundle for this user (or system-wide with PREFIX=/usr/local as root):
# the program under $PREFIX/lib/hearth, a `hearth` link in $PREFIX/bin, the menu entry and the icons.
#   ./install.sh            # into ~/.local
#   ./install.sh --uninstall
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-$HOME/.local}
if [ "${1:-}" = "--uninstall" ]; then
  rm -rf "$PREFIX/lib/hearth" "$PREFIX/bin/hearth" "$PREFIX/share/applications/hearth.desktop"
  find "$PREFIX/share/icons/hicolor" \( -name hearth.png -o -name hearth.svg \) -path '*/apps/*' -delete 2>/dev/null || true
  echo "Hearth removed from $PREFIX (your models, chats and settings are kept)."
  exit 0
fi
mkdir -p "$PREFIX/lib" "$PREFIX/bin" "$PREFIX/share/applications" "$PREFIX/share/icons"
rm -rf "$PREFIX/lib/hearth"
cp -a "$HERE" "$PREFIX/lib/hearth"
ln -sf "$PREFIX/lib/hearth/hearth" "$PREFIX/bin/hearth"
sed "s|^Exec=hearth|Exec=$PREFIX/bin/hearth|; s|^TryExec=hearth|TryExec=$PREFIX/bin/hearth|" \
  "$HERE/share/applications/hearth.desktop" > "$PREFIX/share/applications/hearth.desktop"
cp -r "$HERE/share/icons/hicolor" "$PREFIX/share/icons/"
command -v update-desktop-database >/dev/null && update-desktop-database "$PREFIX/share/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$PREFIX/share/icons/hicolor" || true
echo "Hearth installed: run \`hearth\` (make sure $PREFIX/bin is on PATH) or find it in your applications menu."
