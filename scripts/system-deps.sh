#!/usr/bin/env bash
# Qt needs a few shared libraries a bare Debian lacks (offscreen: EGL/fontconfig; a real window: xcb).
# Installs only what is missing, and only as root; otherwise says what to install.
set -euo pipefail
declare -A pkg=(
  [libEGL.so.1]=libegl1 [libGL.so.1]=libgl1 [libfontconfig.so.1]=libfontconfig1
  [libxkbcommon.so.0]=libxkbcommon0 [libdbus-1.so.3]=libdbus-1-3
  [libxcb-cursor.so.0]=libxcb-cursor0 [libxcb-icccm.so.4]=libxcb-icccm4
  [libxcb-keysyms.so.1]=libxcb-keysyms1 [libxkbcommon-x11.so.0]=libxkbcommon-x11-0
  [libxcb-shape.so.0]=libxcb-shape0 [libxcb-render-util.so.0]=libxcb-render-util0
  [libxcb-image.so.0]=libxcb-image0
)
command -v ldconfig >/dev/null || exit 0
need=()
for lib in "${!pkg[@]}"; do
  ldconfig -p | grep -q "$lib" || need+=("${pkg[$lib]}")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "Qt may need these system packages: ${need[*]}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
