#!/bin/bash
# meson test 'readme_example': the C++ listing under "## Usage" in README.md
# must compile against the public headers (declarations only: -fsyntax-only),
# so the README shows no API that does not exist.
#   check_readme.sh SOURCE_ROOT
set -euo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^## Usage/ { in_section = 1 } in_section && /^```cpp/ { code = 1; next }
     code && /^```/ { exit } code { print }' "$root/README.md" >"$tmp/example.cpp"
[ -s "$tmp/example.cpp" ] || { echo "no C++ listing under '## Usage' in README.md"; exit 1; }
"${CXX:-c++}" -std=c++20 -fsyntax-only -Wall -Wextra -I"$root/include" "$tmp/example.cpp"
echo "README usage example: $(wc -l <"$tmp/example.cpp") lines compile"
