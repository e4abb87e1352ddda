#!/bin/bash
# meson test 'install_cmake': installs the built tree into a temporary
# DESTDIR and builds tests/consumer/main.cpp with CMake through
# find_package(mixgrad CONFIG) and the imported target mixgrad::mixgrad (and
# mixgrad::distributed where it is installed), then runs it. Skipped (77)
# without cmake.
#   run_cmake.sh BUILD_ROOT CONSUMER_DIR
set -euo pipefail
build_root=$1 consumer_dir=$2
command -v cmake >/dev/null || { echo "no cmake: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build_root" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
config=$(find "$tmp/root" -name mixgradConfig.cmake)
[ -n "$config" ] || { echo "no mixgradConfig.cmake installed"; exit 1; }
[ -n "$(find "$tmp/root" -name mixgradConfigVersion.cmake)" ] || { echo "no version file installed"; exit 1; }
prefix=$(cd "$(dirname "$config")/../../.." && pwd)
[ -d "$prefix/include/mixgrad" ] || prefix=$(cd "$prefix/.." && pwd)  # lib/<multiarch>/cmake/mixgrad
# A sanitized library needs its sanitizer runtime in the program (tests/meson.build sets these).
cmake -S "$consumer_dir/cmake" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="${CXX:-c++}" -DCMAKE_CXX_FLAGS="${MIXGRAD_CONSUMER_FLAGS:-}" \
  -DCMAKE_BUILD_RPATH="$(dirname "$(dirname "$(dirname "$config")")")" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/build/consumer"
if [ -x "$tmp/build/consumer_distributed" ]; then "$tmp/build/consumer_distributed"; fi
echo "find_package(mixgrad CONFIG) from $prefix: built and ran"
