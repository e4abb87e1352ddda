#!/bin/bash
# ZeRO against plain data parallel on 2 ranks, side by side with PyTorch
# (see bench_zero.cpp and bench_zero_torch.py). Not a test.
#
#   tests/perf/bench_zero.sh [BUILD_DIR] [STEPS] [extra bench_zero arguments]
#
# Runs bench_zero's three modes, each its own mpirun job, then PyTorch's DDP
# and ZeroRedundancyOptimizer when python3 has torch, and prints the largest
# difference of the ZeRO runs' per-step losses from plain data parallel's.
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
for mode in plain zero1 zero2; do
  "${mpi[@]}" "$build/tests/perf/bench_zero" --mode "$mode" --steps "$steps" --losses "$out/$mode.txt" "$@"
done
python3 - "$out" <<'PY'
import sys
d = sys.argv[1]
read = lambda m: [float(v) for v in open(f"{d}/{m}.txt")]
plain = read("plain")
for m in ("zero1", "zero2"):
    z = read(m)
    worst = max(abs(a - b) / (1e-12 + abs(b)) for a, b in zip(z, plain))
    print(f"{m}: {len(z)} losses, first {z[0]:.6f} last {z[-1]:.6f}; largest relative difference "
          f"from plain data parallel {worst:.2e}")
print(f"plain: first {plain[0]:.6f} last {plain[-1]:.6f}")
PY
if python3 -c "import torch" 2>/dev/null; then
  for mode in ddp zero1; do
    python3 "$here/bench_zero_torch.py" --mode "$mode" --steps "$steps" "$@" 2>&1 | grep -v -i warn
  done
fi
