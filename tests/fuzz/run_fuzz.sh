#!/bin/bash
# meson test 'fuzz_<name>' (suite 'fuzz'): runs a libFuzzer target for
# MIXGRAD_FUZZ_SECONDS (default 60) from its seed corpus. New inputs go to
# WORK_DIR/corpus (the source tree is left alone), a crashing input to
# WORK_DIR/crash-<sha1>; the exit status is non-zero on any finding.
#   run_fuzz.sh FUZZ_EXE SEED_CORPUS WORK_DIR
set -euo pipefail
exe=$1 seeds=$2 work=$3
seconds=${MIXGRAD_FUZZ_SECONDS:-60}
mkdir -p "$work/corpus"
status=0
"$exe" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" "$seeds" || status=$?
if [ "$status" != 0 ]; then
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] || continue
    echo "finding: $f"
    echo "  reproduce: $exe $f"
    echo "  keep it:   cp $f $seeds/ and add a test for the bug (docs/testing.md)"
  done
fi
exit "$status"
