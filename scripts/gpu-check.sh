#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU. It builds
# mixgrad with its CUDA backend, runs the device suites and writes a report.
#
#   scripts/gpu-check.sh [--build-dir DIR] [--data-dir DIR] [REPORT_DIR]
#
# REPORT_DIR defaults to $OUT when set (the device tool's folder that comes
# back), else ./gpu-check-report. It receives report.md (the summary, with
# every step's exit status) and one log per step: build.log, device.log,
# registry.log, amp.log, bench.log.
#
# What it needs there: nvcc (PATH or /usr/local/cuda/bin), a C++20 host
# compiler, Python's meson and ninja. oneDNN is turned off (the CPU side then
# runs its built-in kernels). Boost.Test, Boost.Program_options, zlib's
# header and nlohmann/json come from the system when present, else from
# the folder scripts/gpu-deps.sh packs on a Debian machine (.gpu-deps/ in the
# repository root, or $MIXGRAD_GPU_DEPS), carried with the working tree.
# Without Boost only test_cuda_device is built (-Dtests=false), on a
# stand-in for the Boost.Test macros it uses (tests/cuda/shim); the op
# registry and test_cuda_host need Boost, and the report says they were skipped.
#
# Steps:
#  1. the machine: nvidia-smi, nvcc, compiler, meson, torch
#  2. configure (fresh build dir: -Donednn=disabled -Dcuda=enabled,
#     -Dgpu_arch from nvidia-smi's compute capability) and build the suites
#  3. test_cuda_host and test_cuda_device (allocator, streams, copies, the
#     elementwise / reduction / matmul checks, the no-host-sync step)
#  4. the op registry's CPU-vs-CUDA axis (test_ops, every op and dtype)
#  5. the AMP Fashion-MNIST run, when the data is there and the example takes
#     --device; the GPU benchmark, when bench_vs_libtorch takes --device
# A step that cannot run is reported as skipped with the reason; the script
# exits non-zero when a step that ran failed. Each step has its own time
# limit (MIXGRAD_STEP_TIMEOUT seconds, default 300; the build's
# MIXGRAD_BUILD_TIMEOUT, default 540), a "started" line in the report before
# it runs, and a line-buffered log, so a step killed on its limit still says
# how far it got. When nvidia-smi sees a GPU, a suite that exits 77 ("no
# device") has failed: CUDA could not use a GPU that is there.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build-gpu"
data_dir=""
report_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --data-dir) data_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option $1" >&2; exit 2 ;;
    *) report_dir=$1; shift ;;
  esac
done
report_dir=${report_dir:-${OUT:-$PWD/gpu-check-report}}
mkdir -p "$report_dir"
report="$report_dir/report.md"
failed=0

say() { echo "$*" | tee -a "$report"; }
step_timeout=${MIXGRAD_STEP_TIMEOUT:-300}
# Line-buffered output for a program (stdbuf, where there is one), so a
# step killed on its limit leaves every line it printed in its log.
linebuf() {
  if command -v stdbuf >/dev/null; then stdbuf -oL -eL "$@"; else "$@"; fi
}
# run_step NAME LOG COMMAND...: says the step started, runs the command (a
# program or one of the functions below) with its output in LOG under the
# step's time limit (step_timeout seconds: then it and its children are
# killed, exit status 124), then records its exit status in the report: 77
# is a skip, unless nvidia-smi saw a GPU (gpu_seen=1), where it is a failure.
run_step() {
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  say "- $name: started $(date -u '+%H:%M:%S'), limit ${step_timeout} s"
  # A process group of its own (job control on for the launch), so the limit
  # ends the step's children too (a build's compilers, a suite's helpers).
  set -m
  if [ "$(type -t "$1")" = file ]; then
    linebuf "$@" >"$log" 2>&1 &
  else
    "$@" >"$log" 2>&1 &
  fi
  local pid=$! rc=0
  set +m
  while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - start)) -lt "$step_timeout" ]; do
    sleep 1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null
    sleep 5
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=124
  else
    wait "$pid"
    rc=$?
  fi
  local secs=$((SECONDS - start))
  if [ $rc -eq 77 ] && [ "${gpu_seen:-0}" = 1 ]; then
    say "- $name: FAILED: exit status 77 (no usable CUDA device) although nvidia-smi sees a GPU; the end of $(basename "$log"):"
    tail -n 25 "$log" | sed 's/^/      /' | tee -a "$report" >/dev/null
    failed=1
    return $rc
  fi
  case $rc in
    0) say "- $name: passed (${secs} s)" ;;
    77) say "- $name: skipped: $(tail -n 1 "$log")" ;;
    124) say "- $name: FAILED: killed at its ${step_timeout} s limit; the end of $(basename "$log"):"
       tail -n 25 "$log" | sed 's/^/      /' | tee -a "$report" >/dev/null
       failed=1 ;;
    *) say "- $name: FAILED, exit status $rc (${secs} s); the end of $(basename "$log"):"
       tail -n 25 "$log" | sed 's/^/      /' | tee -a "$report" >/dev/null
       failed=1 ;;
  esac
  return $rc
}

: >"$report"
say "# mixgrad GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"

# ---- 1. the machine --------------------------------------------------------------
# Python's meson and ninja live beside its interpreter (a virtual
# environment's bin/, which need not be on PATH).
py_bin=$(python3 -c 'import os, sys; print(os.path.dirname(sys.executable))' 2>/dev/null || true)
export PATH="$PATH:/usr/local/cuda/bin${py_bin:+:$py_bin}"
say ""
say "## Machine"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
say "- GPU: ${gpu:-none found by nvidia-smi}"
gpu_seen=0
[ -n "$gpu" ] && gpu_seen=1
say "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
say "- C++ compiler: $(${CXX:-c++} --version 2>/dev/null | head -n 1 || echo 'not found')"
meson_cmd=(meson)
command -v meson >/dev/null || meson_cmd=(python3 -m mesonbuild.mesonmain)
say "- meson: $("${meson_cmd[@]}" --version 2>/dev/null || echo 'not found'), ninja: $(ninja --version 2>/dev/null || python3 -m ninja --version 2>/dev/null || echo 'not found')"
say "- torch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not found')"

# ---- dependencies carried from a Debian machine ------------------------------------
deps=${MIXGRAD_GPU_DEPS:-$root/.gpu-deps}
if [ -d "$deps" ]; then
  deps=$(cd "$deps" && pwd)
  export CPATH="$deps/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$deps/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$deps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  if [ ! -d /usr/include/boost ]; then
    export BOOST_INCLUDEDIR="$deps/include" BOOST_LIBRARYDIR="$deps/lib"
  fi
  mkdir -p "$deps/pkgconfig"
  printf 'prefix=%s\nincludedir=${prefix}/include\n\nName: nlohmann_json\nDescription: JSON for Modern C++\nVersion: 3.11.2\nCflags: -I${includedir}\n' \
    "$deps" >"$deps/pkgconfig/nlohmann_json.pc"
  export PKG_CONFIG_PATH="$deps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  say "- carried dependencies: $deps"
fi
have_boost=0
if [ -f /usr/include/boost/test/unit_test.hpp ] || [ -f "${BOOST_INCLUDEDIR:-/nonexistent}/boost/test/unit_test.hpp" ]; then
  have_boost=1
fi

# ---- 2. configure and build ----------------------------------------------------------
say ""
say "## Steps"
if ! command -v nvcc >/dev/null; then
  say "- build: skipped: no nvcc on PATH or in /usr/local/cuda/bin"
  exit 1
fi
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')}
arch=${arch:-90}
tests_opt=true
[ "$have_boost" = 1 ] || tests_opt=false
configure() {
  if [ -f "$build/build.ninja" ]; then
    echo "reusing $build with its options"
    return 0
  fi
  "${meson_cmd[@]}" setup "$build" "$root" --buildtype=release -Donednn=disabled -Dcuda=enabled \
    "-Dgpu_arch=$arch" "-Dtests=$tests_opt" -Dexamples="$tests_opt" -Dbenchmarks="$tests_opt"
}
build_all() {
  configure || return 1
  local jobs targets=()
  jobs=$(nproc 2>/dev/null || echo 4)
  # The suites and the example where this build has them; the benchmark
  # only where LibTorch was found.
  for t in test_cuda_host test_cuda_device test_ops train_fashion_mnist bench_vs_libtorch; do
    grep -q "$t" "$build/build.ninja" && targets+=("$t")
  done
  "${meson_cmd[@]}" compile -C "$build" -j "$jobs" "${targets[@]}"
}
say "- gpu_arch: $arch; Boost: $([ "$have_boost" = 1 ] && echo found || echo 'missing: only the device suite, on a stand-in for Boost.Test')"
build_step_timeout=${MIXGRAD_BUILD_TIMEOUT:-540}
if ! step_timeout=$build_step_timeout run_step "build (library$([ "$tests_opt" = true ] && echo ', device suites, example'))" "$report_dir/build.log" build_all; then
  say ""
  say "Result: the build failed; nothing ran."
  exit 1
fi

# ---- 3. and 4. the device suites ---------------------------------------------------
export OMP_WAIT_POLICY=PASSIVE MIXGRAD_SOURCE_ROOT="$root"
device_exe="$build/tests/test_cuda_device"
[ -x "$device_exe" ] || device_exe="$build/tests/cuda/test_cuda_device"  # the Boost-free build
if [ -x "$device_exe" ]; then
  device_suites() {
    local rc=0
    if [ -x "$build/tests/test_cuda_host" ]; then linebuf "$build/tests/test_cuda_host" --report_level=short --log_level=unit_scope || rc=1; fi
    linebuf "$device_exe" --report_level=short --log_level=unit_scope
    local d=$?
    [ $d -eq 77 ] && return 77
    [ $d -eq 0 ] || rc=1
    return $rc
  }
  run_step "test_cuda_host + test_cuda_device$([ "$tests_opt" = true ] || echo ' (on the Boost.Test stand-in; no test_cuda_host)')" \
    "$report_dir/device.log" device_suites
else
  say "- device suites: skipped: test_cuda_device was not built"
  failed=1
fi
if [ -x "$build/tests/test_ops" ]; then
  # Without a GPU the CUDA cases' precondition skips them (Boost.Test
  # then exits 0 with nothing checked): the step says so instead.
  registry() {
    if [ "$gpu_seen" != 1 ]; then
      echo "no GPU found by nvidia-smi: skipped"
      return 77
    fi
    linebuf "$build/tests/test_ops" --report_level=short --log_level=unit_scope \
      --run_test=op_registry/every_op_on_cuda_matches_the_cpu:op_registry/every_op_gradient_on_cuda_matches_the_cpu:op_registry/every_twice_differentiable_op_second_derivative_on_cuda_matches_the_cpu
  }
  run_step "op registry on CUDA vs the CPU (every op: values, gradients, second derivatives; float32 / bfloat16 / float16)" \
    "$report_dir/registry.log" registry
  # Ops whose family has no CUDA kernel yet fail by name (their DeviceError).
  missing=$(grep -o '([a-z0-9_]*) in [a-z0-9]* on CUDA: [a-z_0-9]*: no CUDA kernel' "$report_dir/registry.log" 2>/dev/null |
    sed 's/^(\([a-z0-9_]*\)).*/\1/' | sort -u | tr '\n' ' ')
  [ -n "$missing" ] && say "  - ops without a CUDA kernel yet (DeviceError): $missing"
else
  say "- op registry on CUDA: skipped: test_ops needs Boost.Test (run scripts/gpu-deps.sh on a Debian machine and carry .gpu-deps/)"
fi

# ---- 5. the AMP training run and the benchmark -----------------------------------------
example="$build/examples/train_fashion_mnist"
if [ -z "$data_dir" ]; then
  for d in "$root/.fashion-mnist" "$root/shared/fashion-mnist" /usr/share/datasets/fashion-mnist; do
    [ -f "$d/train-images-idx3-ubyte.gz" ] && { data_dir=$d; break; }
  done
fi
if [ ! -x "$example" ]; then
  say "- AMP Fashion-MNIST run: skipped: the example was not built"
elif ! "$example" --help 2>&1 | grep -q -- '--device'; then
  say "- AMP Fashion-MNIST run: skipped: train_fashion_mnist has no --device option in this tree"
elif [ -z "$data_dir" ]; then
  say "- AMP Fashion-MNIST run: skipped: no data (carry the four IDX .gz files in .fashion-mnist/ or pass --data-dir)"
else
  run_step "AMP Fashion-MNIST run (CNN, fp16 autocast, 1 epoch, cuda:0)" "$report_dir/amp.log" \
    "$example" --device cuda --amp --precision fp16 --epochs 1 --data-dir "$data_dir"
  grep -iE 'epoch|accuracy|loss' "$report_dir/amp.log" | tail -n 5 | sed 's/^/      /' | tee -a "$report" >/dev/null
fi
bench="$build/tests/perf/bench_vs_libtorch"
if [ ! -x "$bench" ]; then
  say "- GPU benchmark: skipped: bench_vs_libtorch was not built (no LibTorch found, or no Boost)"
elif ! "$bench" --help 2>&1 | grep -q -- '--device'; then
  say "- GPU benchmark: skipped: bench_vs_libtorch has no --device option in this tree"
else
  run_step "GPU benchmark against LibTorch" "$report_dir/bench.log" "$bench" --device cuda --sections train
  tail -n 20 "$report_dir/bench.log" | sed 's/^/      /' | tee -a "$report" >/dev/null
fi

say ""
if [ $failed = 0 ]; then say "Result: every step that ran passed."; else say "Result: FAILURES above."; fi
exit $failed
