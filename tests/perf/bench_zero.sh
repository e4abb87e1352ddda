#!/bin/bash
# ZeRO against plain data parallel on 2 ranks, side by side with PyTorch
# (see bench_zero.cpp and bench_zero_torch.py). Not a test.
#
#   tests/perf/bench_zero.sh [BUILD_DIR] [STEPS] [extra bench_zero arguments]
#
# Runs bench_zero's modes (MODES, default "plain zero1 zero2"; zero1-step and
# zero2-step reduce in the step instead of during backward), each its own
# mpirun job, ROUNDS times alternating (default 1), then PyTorch's DDP and
# ZeroRedundancyOptimizer when python3 has torch (TORCH=0 skips them), and
# prints the largest difference of the ZeRO runs' per-step losses from plain
# data parallel's (the last round's).
set -euo pipefail
build=${1:-build}
steps=${2:-500}
shift $(($# < 2 ? $# : 2))
here=$(dirname "$0")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
modes=${MODES:-plain zero1 zero2}
for round in $(seq "${ROUNDS:-1}"); do
  for mode in $modes; do
    "${mpi[@]}" "$build/tests/perf/bench_zero" --mode "$mode" --steps "$steps" --losses "$out/$mode.txt" "$@"
  done
done
python3 - "$out" $modes <<'PY'
import sys
d = sys.argv[1]
read = lambda m: [float(v) for v in open(f"{d}/{m}.txt")]
plain = read("plain")
for m in [m for m in sys.argv[2:] if m != "plain"]:
    z = read(m)
    worst = max(abs(a - b) / (1e-12 + abs(b)) for a, b in zip(z, plain))
    print(f"{m}: {len(z)} losses, first {z[0]:.6f} last {z[-1]:.6f}; largest relative difference "
          f"from plain data parallel {worst:.2e}")
print(f"plain: first {plain[0]:.6f} last {plain[-1]:.6f}")
PY
if [ "${TORCH:-1}" != 0 ] && python3 -c "import torch" 2>/dev/null; then
  for mode in ddp zero1; do
    python3 "$here/bench_zero_torch.py" --mode "$mode" --steps "$steps" "$@" 2>&1 | grep -v -i warn
  done
fi
