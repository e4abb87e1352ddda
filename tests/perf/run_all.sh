#!/usr/bin/env bash
# Builds the benchmarks under tests/perf and runs them, printing their tables:
# bench_vs_libtorch (mixgrad and LibTorch side by side) where a LibTorch is
# found, bench_train (mixgrad alone) otherwise, then unscale_bandwidth and
# bench_amp (the MLP step per AMP mode: O1 / O2 / O3, fused unscale).
#
#   tests/perf/run_all.sh [--install-libtorch] [--build-dir DIR] [-- bench options]
#   tests/perf/run_all.sh -- --rounds 9 --sections train
#   tests/perf/run_all.sh -- --device cuda     # the GPU benchmark (docs/cuda.md); 77 without a GPU
#
# --install-libtorch  pip-installs the torch wheel (without its CUDA
#                     dependencies: the benchmark links only libtorch_cpu and
#                     libc10) when python3 has no torch package.
# LIBTORCH_DIR=...    a LibTorch root (include/, lib/) instead of python's.
# Builds run under nice; the benchmark itself does not, so it competes on
# equal terms with whatever else runs.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build-perf"
install_torch=0
while [ $# -gt 0 ]; do
  case "$1" in
    --install-libtorch) install_torch=1; shift ;;
    --build-dir) build=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown option $1 (bench options go after --)" >&2; exit 2 ;;
  esac
done

if [ "$install_torch" = 1 ] && [ -z "${LIBTORCH_DIR:-}" ] &&
   ! python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null; then
  python3 -m pip install --no-deps torch
fi

torch_args=()
if [ -n "${LIBTORCH_DIR:-}" ]; then torch_args+=("-Dlibtorch_dir=$LIBTORCH_DIR"); fi
if [ -f "$build/build.ninja" ]; then
  # An existing build directory keeps its options (it must have tests and
  # benchmarks on); only a LibTorch given now is passed on.
  if [ ${#torch_args[@]} -gt 0 ]; then meson configure "$build" "${torch_args[@]}" >/dev/null; fi
else
  nice meson setup "$build" "$root" -Dbuildtype=release -Dtests=true -Dbenchmarks=true -Dexamples=false \
    "${torch_args[@]}" >/dev/null
fi

targets=(tests/perf/bench_train tests/unscale_bandwidth tests/perf/bench_amp)
have_torch=0
if ninja -C "$build" -t targets all 2>/dev/null | grep -q '^tests/perf/bench_vs_libtorch:'; then
  targets+=(tests/perf/bench_vs_libtorch)
  have_torch=1
fi
nice ninja -C "$build" "${targets[@]}"

echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$have_torch" = 1 ]; then
  "$build/tests/perf/bench_vs_libtorch" "$@"
else
  echo "(no LibTorch found: mixgrad alone; see docs/performance.md for how to add the comparison)"
  "$build/tests/perf/bench_train" "$@"
fi
echo
echo "## GradScaler::unscale vs memcpy"
echo
"$build/tests/unscale_bandwidth"
echo
echo "## AMP modes (bench_amp: CPU time, one thread)"
"$build/tests/perf/bench_amp"
