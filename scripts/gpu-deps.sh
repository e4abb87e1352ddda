#!/usr/bin/env bash
# Packs what a GPU machine without Debian's packages needs to build mixgrad's
# tests and examples into one folder (default .gpu-deps/ in the repository
# root, ignored by git), from this Debian 12 machine:
#   include/  nlohmann/json.hpp, zlib.h / zconf.h, and the Boost headers that
#             Boost.Test and Boost.Program_options include (their closure, ~4 MB)
#   lib/      libboost_unit_test_framework, libboost_program_options (1.74, built
#             for glibc 2.36: they run on any later glibc), libz
#   share/    nlohmann_json's CMake package (relocatable; gpu-check.sh writes
#             a pkg-config file for the folder's place on that machine)
# scripts/gpu-check.sh puts the folder on the compiler's and Meson's search
# paths when it finds it. Carry it with the working tree (the device tool's
# `carry`), together with the Fashion-MNIST data if the AMP run should happen.
#
#   scripts/gpu-deps.sh [DIR]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.gpu-deps}
libdir=/usr/lib/x86_64-linux-gnu
for f in /usr/include/nlohmann/json.hpp /usr/include/zlib.h /usr/include/boost/version.hpp \
         "$libdir/libboost_unit_test_framework.so.1.74.0" "$libdir/libboost_program_options.so.1.74.0"; do
  [ -e "$f" ] || { echo "gpu-deps.sh: $f is missing (apt-get install nlohmann-json3-dev zlib1g-dev libboost-test-dev libboost-program-options-dev)" >&2; exit 1; }
done

rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib" "$dest/share/cmake"
cp -r /usr/include/nlohmann "$dest/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$dest/include/"

# The Boost headers the tests and the example include, found by the compiler.
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
printf '#include <boost/test/unit_test.hpp>\n#include <boost/program_options.hpp>\n#include <boost/version.hpp>\n' >"$probe"
for macros in "" "-DBOOST_TEST_DYN_LINK"; do
  # shellcheck disable=SC2086
  ${CXX:-c++} -std=c++20 $macros -M "$probe" | tr ' \\' '\n\n' | grep '^/usr/include/boost/'
done | sort -u | while read -r h; do
  mkdir -p "$dest/include/$(dirname "${h#/usr/include/}")"
  cp "$h" "$dest/include/${h#/usr/include/}"
done

for lib in boost_unit_test_framework boost_program_options; do
  cp "$libdir/lib$lib.so.1.74.0" "$dest/lib/"
  ln -s "lib$lib.so.1.74.0" "$dest/lib/lib$lib.so"
done
cp "$(readlink -f "$libdir/libz.so")" "$dest/lib/libz.so.1"
ln -s libz.so.1 "$dest/lib/libz.so"

cp -r /usr/share/cmake/nlohmann_json "$dest/share/cmake/"
echo "gpu-deps.sh: $(du -sh "$dest" | cut -f1) in $dest"
