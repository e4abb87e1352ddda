#!/bin/bash
# Installs what mixgrad needs (Debian 12, as root), builds it in ./build and
# runs every test suite. Re-running reuses the build directory.
#
#   scripts/test.sh
source "$(dirname "$0")/common.sh"

install_packages
configure_and_build

status=0
meson test -C "$build_dir" --print-errorlogs || status=$?

# One closing line that counts suites whatever the runner's own format.
python3 - "$build_dir/meson-logs/testlog.json" <<'PY' || true
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
with open(sys.argv[1]) as f:
    for line in f:
        r = json.loads(line).get("result")
        key = {"OK": "passed", "EXPECTEDFAIL": "passed", "SKIP": "skipped"}.get(r, "failed")
        counts[key] += 1
print(f"suites: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit "$status"
