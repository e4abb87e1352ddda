#!/usr/bin/env bash
# The example's validation loss against LibTorch's: runs train_char_gpt's
# default run, then its LibTorch twin (train_char_gpt_libtorch, see
# gpt_twin_libtorch.cpp: the same text, batches, model, schedule and bf16
# autocast), one after the other, and prints both validation losses, their
# difference and PASS / FAIL against 0.03 nats. Exit 0 on PASS, 1 on FAIL or
# when the two runs do not train the same thing (corpus, shapes, parameter
# count, lr schedule), 77 where the twin was not built (no LibTorch).
#
#   tests/perf/gpt_parity.sh [BUILD_DIR]              # BUILD_DIR: build-cpu by default
#   tests/perf/gpt_parity.sh build-cpu -- --seed 7    # options after -- go to both programs
#
# The example runs with --sample 0 (the sample comes after the last
# validation and changes nothing before it). The example takes about 3
# to 5 minutes on 2 idle cores, the twin about twice as long (LibTorch's
# bf16 step is the slower one on an AVX-512 CPU).
set -euo pipefail

tolerance=0.03
build=${1:-build-cpu}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
opts=("$@")
example="$build/examples/train_char_gpt"
twin="$build/tests/perf/train_char_gpt_libtorch"
[ -x "$example" ] || { echo "gpt_parity.sh: no $example (ninja -C $build first)" >&2; exit 2; }
[ -x "$twin" ] || { echo "gpt_parity.sh: no $twin (built only where meson finds a LibTorch)" >&2; exit 77; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores; $(date -u +%Y-%m-%d)"
echo "command: $0 $build${opts[*]:+ -- ${opts[*]}}"
echo "mixgrad:  $example${opts[*]:+ ${opts[*]}} --sample 0"
"$example" "${opts[@]}" --sample 0 | tee "$log/mixgrad" | sed -u 's/^/  mixgrad  | /'
echo "LibTorch: $twin${opts[*]:+ ${opts[*]}}"
"$twin" "${opts[@]}" | tee "$log/libtorch" | sed -u 's/^/  LibTorch | /'

# The same thing trained: corpus line, shapes and parameter count, and the lr of every log line.
same() { diff <(eval "$1" < "$log/mixgrad") <(eval "$1" < "$log/libtorch") > /dev/null || { echo "MISMATCH: $2"; mismatch=1; }; }
mismatch=0
same "grep '^train_char_gpt:'" "corpus"
same "grep '^model:' | cut -d';' -f1" "model shapes or parameter count"
same "grep '^step' | sed 's/.* lr \([^ ]*\) .*/\1/'" "learning-rate schedule"

# The validation losses per evaluation, side by side.
vals() { sed -n 's|^step *\([0-9]*\)/.* val \([0-9.]*\) .*|\1 \2|p' "$1"; }
echo
echo "step   mixgrad  LibTorch"
paste <(vals "$log/mixgrad") <(vals "$log/libtorch") | awk '{ printf "%5d   %.4f   %.4f\n", $1, $2, $4 }'

final() { sed -n 's/^done: .*validation loss \([0-9.]*\) .*/\1/p' "$1"; }
m=$(final "$log/mixgrad")
t=$(final "$log/libtorch")
verdict=$(awk -v m="$m" -v t="$t" -v tol="$tolerance" -v bad="$mismatch" 'BEGIN {
  d = m - t; a = d < 0 ? -d : d
  printf "validation loss: mixgrad %.4f, LibTorch %.4f, difference %+.4f nats (tolerance %.2f): %s\n",
         m, t, d, tol, (a <= tol && !bad) ? "PASS" : "FAIL" }')
echo "$verdict"
[[ $verdict == *PASS ]]
