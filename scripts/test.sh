#!/bin/bash
# Installs what mixgrad needs (Debian 12, as root), builds it in ./build and
# runs every test suite; then builds it again with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in ./build-asan, runs every suite there and runs
# each libFuzzer target for a bounded time. Re-running reuses both build
# directories. Exits non-zero when any test, sanitizer report or fuzz finding
# fails. docs/testing.md describes the stages.
#
#   scripts/test.sh
#   MIXGRAD_SANITIZE=0 scripts/test.sh     # skip the sanitizer stage (not in CI)
#   MIXGRAD_FUZZ_SECONDS=10 scripts/test.sh
source "$(dirname "$0")/common.sh"

sanitize=${MIXGRAD_SANITIZE:-1}
if [ "${CI:-}" = true ]; then
  sanitize=1
  # CI has no GPU: the CUDA code is compiled, not run, so one architecture
  # (Hopper) is the same check in half of nvcc's time.
  export MIXGRAD_GPU_ARCH=${MIXGRAD_GPU_ARCH:-90}
fi
asan_dir=${MIXGRAD_ASAN_BUILD_DIR:-build-asan}

debian_packages+=("${doc_packages[@]}")
if [ "$sanitize" != 0 ]; then
  debian_packages+=("${sanitizer_packages[@]}")
fi
install_packages

log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
status=0
runs=0
stage_times=()

# Runs `meson test` with the given arguments and keeps its log for the count.
run_tests() {
  local dir=$1
  shift
  meson test -C "$dir" --print-errorlogs "$@" || status=1
  runs=$((runs + 1))
  cp "$dir/meson-logs/testlog.json" "$log_dir/$runs.json" 2>/dev/null || true
}

# Times a stage: `timed NAME COMMAND...`.
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  stage_times+=("$name $((SECONDS - start))s")
  return $rc
}

# CI builds with warnings as errors (GCC, clang and nvcc); a user's run
# does not, so a newer compiler's new warning never stops a build.
werror=-Dwerror=false
[ "${CI:-}" = true ] && werror=-Dwerror=true
# -Dcuda=auto explicitly: a build/ that train.sh configured for the CPU only
# gets the CUDA backend back wherever the toolkit is. nodownload: the
# dependencies come from the Debian packages, never from a wrap of
# subprojects/, and a missing one fails here rather than being downloaded.
timed build configure_and_build -Dcuda=auto -Dwrap_mode=nodownload "$werror"
timed tests run_tests "$build_dir"
# The API reference (the apidoc target, docs/Doxyfile.in): a Doxygen warning
# in include/mixgrad/ fails it.
timed apidoc meson compile -C "$build_dir" apidoc || { echo "the API reference has Doxygen warnings"; status=1; }

# The GPU check's whole path without a GPU: pack what this build made (the
# device suites, the registry, the example, their libraries) and run
# scripts/gpu-check.sh --dry-run on the pack, so the first GPU machine does
# not find a broken script. Only where the build has the CUDA backend.
gpu_dry_run() {
  bash scripts/gpu-pack.sh --build-dir "$build_dir" --out "$log_dir/gpu-pack" &&
    bash scripts/gpu-check.sh --dry-run --pack "$log_dir/gpu-pack/mixgrad-gpu.tar.xz" "$log_dir/gpu-check" &&
    bash scripts/gpu-check.sh --bench --dry-run --pack "$log_dir/gpu-pack/mixgrad-gpu.tar.xz" "$log_dir/gpu-check"
}
if grep -q 'backend_cuda_' "$build_dir/build.ninja"; then
  timed gpu-dry-run gpu_dry_run || { echo "the GPU check's dry run failed"; status=1; }
else
  echo "no CUDA backend in $build_dir (no toolkit): the GPU check's dry run is skipped"
fi

if [ "$sanitize" != 0 ]; then
  # clang, for libFuzzer; -O1 keeps the instrumented tests fast enough while
  # the stacks stay readable. ccache when there is one.
  asan_cxx=clang++-14
  if command -v ccache >/dev/null; then
    asan_cxx="ccache clang++-14"
  fi
  asan_options=(-Dbuildtype=debugoptimized -Doptimization=1 -Ddebug=false
    "-Dcpp_args=-fno-sanitize-recover=undefined -gline-tables-only"
    -Db_sanitize=address,undefined -Db_lundef=false -Dfuzzing=true
    -Dexamples=false -Dbenchmarks=false -Dcuda=disabled -Dwrap_mode=nodownload
    # Open MPI's own allocations outlive MPI_Finalize and would fail every
    # distributed test as leaks; the first build runs that suite.
    -Ddistributed=disabled "$werror")
  asan_build() {
    if [ -f "$asan_dir/build.ninja" ]; then
      meson setup --reconfigure "${asan_options[@]}" "$asan_dir"
    else
      CXX=$asan_cxx meson setup "${asan_options[@]}" "$asan_dir"
    fi
    meson compile -C "$asan_dir"
  }
  timed sanitizer-build asan_build

  # Leaks are errors, as are UB reports (also compiled in: no recovery). An
  # allocation too big for ASan returns null, as malloc does, so the tests of
  # OutOfMemoryError see the failure the library handles.
  export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  if [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
  fi
  # The subproject test builds a third, uninstrumented copy of the library
  # with the system compiler: the first build already ran it. The soak suite
  # is long by design; the first build runs it.
  timed sanitizer-tests run_tests "$asan_dir" --no-suite fuzz --no-suite subproject --no-suite soak
  timed fuzz run_tests "$asan_dir" --suite fuzz
else
  echo "MIXGRAD_SANITIZE=0: skipping the sanitizer and fuzzing stage"
fi

echo "stage times: ${stage_times[*]}"
# One closing line that counts suites of every run whatever the runner's own format.
python3 - "$log_dir"/*.json <<'PY' || status=1
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line).get("result")
            key = {"OK": "passed", "EXPECTEDFAIL": "passed", "SKIP": "skipped"}.get(r, "failed")
            counts[key] += 1
print(f"suites: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit "$status"
