#!/bin/bash
# meson test 'subproject': builds tests/consumer with mixgrad as a Meson
# subproject (the source tree itself, linked into subprojects/) and runs it.
# The build directory is kept, so a re-run only rebuilds what changed. The
# subproject is the CPU-only library (no CUDA, MPI, tests, examples or
# benchmarks): the consumer's view, in a fraction of a full build's time.
#   run_subproject.sh SOURCE_ROOT WORK_DIR
set -euo pipefail
source_root=$1 work=$2
project="$work/project"
mkdir -p "$project/subprojects"
cp "$source_root/tests/consumer/meson.build" "$source_root/tests/consumer/main.cpp" "$project/"
ln -sfn "$source_root" "$project/subprojects/mixgrad"
options=(--buildtype=plain --force-fallback-for=mixgrad -Dmixgrad:tests=false -Dmixgrad:examples=false
         -Dmixgrad:benchmarks=false -Dmixgrad:cuda=disabled -Dmixgrad:distributed=disabled)
if [ -f "$work/build/build.ninja" ]; then
  meson setup --reconfigure "${options[@]}" "$work/build" "$project" >"$work/setup.log" 2>&1 ||
    { cat "$work/setup.log"; exit 1; }
else
  meson setup "${options[@]}" "$work/build" "$project" >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
fi
ninja -C "$work/build" >"$work/build.log" 2>&1 || { tail -n 50 "$work/build.log"; exit 1; }
"$work/build/consumer"
