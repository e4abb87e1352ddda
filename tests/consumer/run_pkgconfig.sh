#!/bin/bash
# meson test 'install_pkgconfig': installs the built tree into a temporary
# DESTDIR, checks what landed there, and compiles and runs main.cpp with the
# flags pkg-config gives for the installed mixgrad.pc, nothing else.
#   run_pkgconfig.sh BUILD_ROOT CONSUMER_DIR
set -euo pipefail
build_root=$1 consumer_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build_root" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }

pc=$(find "$tmp/root" -name mixgrad.pc)
[ -n "$pc" ] || { echo "no mixgrad.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
define=(--define-variable=prefix="$tmp/root$prefix")
libdir=$(pkg-config "${define[@]}" --variable=libdir mixgrad)
includedir=$(pkg-config "${define[@]}" --variable=includedir mixgrad)
for f in "$includedir/mixgrad/mixgrad.hpp" "$includedir/mixgrad/ops/elementwise.hpp" "$libdir/libmixgrad.so"; do
  [ -e "$f" ] || { echo "missing after install: $f"; exit 1; }
done
if grep -rq mixgrad_config "$includedir/mixgrad"; then
  echo "installed headers depend on the build-tree mixgrad_config.h"; exit 1
fi

read -r -a flags <<<"$(pkg-config "${define[@]}" --cflags --libs mixgrad)"
# A sanitized library needs its sanitizer runtime in the program (tests/meson.build sets these).
read -r -a extra <<<"${MIXGRAD_CONSUMER_FLAGS:-}"
"${CXX:-c++}" -std=c++20 "$consumer_dir/main.cpp" "${flags[@]}" "${extra[@]}" -Wl,-rpath,"$libdir" -o "$tmp/consumer"
"$tmp/consumer"
