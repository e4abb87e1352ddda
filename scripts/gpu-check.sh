#!/usr/bin/env bash
# The GPU check: runs, on a machine with an NVIDIA GPU, what
# scripts/gpu-pack.sh built on a machine with nvcc. Nothing is compiled there
# but the benchmark (the second call, --bench).
#
#   scripts/gpu-check.sh [--pack FILE] [--data-dir DIR] [--dry-run] [REPORT_DIR]
#   scripts/gpu-check.sh --bench [--pack FILE] [--dry-run] [REPORT_DIR]
#   scripts/gpu-check.sh --profile [--pack FILE] [REPORT_DIR]
#
# --pack      the pack (default .gpu-pack/mixgrad-gpu.tar.xz in the repository)
# --data-dir  Fashion-MNIST for the AMP run (default: the pack's subset)
# --dry-run   the whole path on a machine without a GPU (CI runs it): the
#             pack is unpacked, its libraries located and loaded, every binary
#             started; the steps that need the GPU are reported as skipped, and
#             what can run without one runs (test_cuda_host, the registry's
#             case list, a short AMP run on the CPU from the packed data, the
#             benchmark's build where python3 has torch).
# --bench     the benchmark against LibTorch CUDA: compiles tests/perf's
#             sources against the pack's library and that machine's torch
#             (python3's), then runs `bench_vs_libtorch --device cuda --sections train`
#             and bench_fp8 (FP8 against bf16 autocast: an MLP and a transformer layer).
# --profile   the benchmark's build, then instead of the benchmark: each
#             kernel's GPU time (Nsight Compute, one metric,
#             `--clock-control none`) over one mixgrad fp16 step of MLP-4096
#             and of the ResNet, and the device suite under
#             `compute-sanitizer --tool memcheck`; each step under its own
#             limit. Needs ncu and compute-sanitizer on PATH (the device
#             machines have both; on a gVisor machine they cannot read the GPU).
#
# REPORT_DIR defaults to $OUT when set (the device tool's folder that comes
# back), else ./gpu-check-report. It receives report.md (the summary, with
# every step's exit status; bench-report.md for --bench) and one log per
# step. NVIDIA's libraries (CUDA runtime, cuBLAS, cuDNN) are taken from the
# toolkit or from PyTorch's pip wheels (nvidia/*/lib), and the report names
# each file used.
#
# Steps of the check: the machine; unpack; libraries; test_cuda_host;
# test_cuda_device; the op registry's CUDA cases (values, gradients, second
# derivatives of every op and dtype); the AMP Fashion-MNIST run; the GPT
# example's default run (fp16 + GradScaler, fused attention). The script
# exits non-zero when a step that ran failed. Each step has its own time
# limit (MIXGRAD_STEP_TIMEOUT seconds, default 240), a "started" line in the
# report before it runs, and a line-buffered log, so a step killed on its
# limit still says how far it got. When nvidia-smi sees a GPU, a suite that
# exits 77 ("no device") has failed: CUDA could not use a GPU that is there.
# No suite runs twice.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pack_file="$root/.gpu-pack/mixgrad-gpu.tar.xz"
data_dir=""
report_dir=""
dry_run=0
bench=0
profile=0
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack_file=$(realpath -m "$2"); shift 2 ;;
    --data-dir) data_dir=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --bench) bench=1; shift ;;
    --profile) profile=1; bench=1; shift ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option $1" >&2; exit 2 ;;
    *) report_dir=$1; shift ;;
  esac
done
report_dir=${report_dir:-${OUT:-$PWD/gpu-check-report}}
mkdir -p "$report_dir"
report_dir=$(cd "$report_dir" && pwd)
report="$report_dir/$([ $bench = 1 ] && echo bench-report.md || echo report.md)"
failed=0

say() { echo "$*" | tee -a "$report"; }
step_timeout=${MIXGRAD_STEP_TIMEOUT:-240}
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

# skip NAME REASON: a step that did not run.
skip() { say "- $1: skipped: $2"; }
# expect_no_device COMMAND...: a dry run's check that a program which needs a
# GPU starts and says it found none (exit 77).
# A usage error (exit 2) with `want` in its message, e.g. --cuda-graph on the CPU.
expect_usage_error() {
  local want=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  echo "$out"
  [ $rc = 2 ] && grep -q -- "$want" <<<"$out" && { echo "exit 2 naming '$want', as expected"; return 0; }
  echo "expected exit 2 naming '$want', got $rc"
  return 1
}

expect_no_device() {
  "$@"
  local rc=$?
  [ $rc = 77 ] && { echo "exit 77 without a GPU, as expected"; return 0; }
  echo "expected exit 77 without a GPU, got $rc"
  return 1
}

: >"$report"
say "# mixgrad GPU $([ $bench = 1 ] && echo benchmark || echo check)$([ $dry_run = 1 ] && echo ' (dry run)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say "tree: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"

# ---- the machine -------------------------------------------------------------------
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
if [ $gpu_seen = 0 ] && [ $dry_run = 0 ]; then
  say "- no GPU: this is a check for a GPU machine (run with --dry-run to test the path without one)"
  exit 1
fi
say "- CPU: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
say "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found'); C++ compiler: $(${CXX:-c++} --version 2>/dev/null | head -n 1 || echo 'not found')"
say "- torch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not found')"

# ---- the pack ----------------------------------------------------------------------
say ""
say "## Steps"
if [ ! -f "$pack_file" ]; then
  say "- unpack: FAILED: no pack at $pack_file. Make it on a machine with nvcc (scripts/gpu-pack.sh) and carry .gpu-pack/ with the working tree."
  exit 1
fi
run_dir=${MIXGRAD_GPU_RUN_DIR:-${TMPDIR:-/tmp}/mixgrad-gpu-run}
pack="$run_dir/mixgrad-gpu"
unpack() {
  rm -rf "$run_dir" && mkdir -p "$run_dir" && xz -dc "$pack_file" | tar -C "$run_dir" -xf - &&
    sed -n '1,4p' "$pack/MANIFEST"
}
run_step "unpack $(basename "$pack_file") ($(( $(stat -c %s "$pack_file") / 1024 / 1024 )) MiB)" "$report_dir/unpack.log" unpack || exit 1
sed -n '2,4p' "$pack/MANIFEST" | sed 's/^/  - /' | tee -a "$report" >/dev/null

# ---- NVIDIA's libraries: the toolkit's, else the pip wheels' -------------------------
# The folders to look in, in order: the loader's own path, the toolkit, then
# each nvidia/*/lib of python3's site-packages (PyTorch's wheels).
nvidia_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && nvidia_dirs+=("$d")
done
while read -r d; do
  [ -n "$d" ] && nvidia_dirs+=("$d")
done < <(python3 - 2>/dev/null <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for lib in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        lib = os.path.realpath(lib)
        if lib not in seen:
            seen.add(lib)
            print(lib)
PY
)
locate_libraries() {
  local ld_path="$pack/lib" name missing=0
  for name in $(readelf -d "$pack/lib/libmixgrad.so.0" | sed -n 's/.*(NEEDED).*\[\(lib\(cuda\|cublas\|cudnn\|nccl\)[^]]*\)\].*/\1/p'); do
    local found=""
    if ldconfig -p 2>/dev/null | grep -q " $name "; then
      found=$(ldconfig -p | grep " $name " | head -n 1 | sed 's/.* => //')
    else
      for d in "${nvidia_dirs[@]}"; do
        if [ -e "$d/$name" ]; then found="$d/$name"; ld_path="$ld_path:$d"; break; fi
      done
    fi
    if [ -n "$found" ]; then echo "$name: $(readlink -f "$found")"; else echo "$name: NOT FOUND"; missing=1; fi
  done
  # cuDNN loads its engine libraries (libcudnn_*.so.9) from its own folder.
  echo "LD_LIBRARY_PATH=$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" >"$run_dir/ld_path"
  local unresolved
  unresolved=$(LD_LIBRARY_PATH="$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$pack"/bin/* "$pack"/lib/*.so* 2>&1 | grep 'not found' | sort -u)
  if [ -n "$unresolved" ]; then echo "unresolved:"; echo "$unresolved"; return 1; fi
  return $missing
}
run_step "libraries (NVIDIA's from the toolkit or pip wheels; every binary's needs resolved)" "$report_dir/libraries.log" locate_libraries || exit 1
grep -v '^LD_LIBRARY_PATH' "$report_dir/libraries.log" | sed 's/^/  - /' | tee -a "$report" >/dev/null
export "$(cat "$run_dir/ld_path")"
export OMP_WAIT_POLICY=PASSIVE MIXGRAD_SOURCE_ROOT="$root"
bin="$pack/bin"
boost_args=(--report_level=short --log_level=unit_scope)

# ---- the benchmark (--bench): built here against the pack and python3's torch ----------
if [ $bench = 1 ]; then
  torch_root=$(python3 -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")' 2>/dev/null)
  if [ -z "$torch_root" ] || [ ! -f "$torch_root/include/torch/csrc/api/include/torch/torch.h" ]; then
    skip "benchmark build" "python3 has no torch with LibTorch's C++ headers"
    [ $dry_run = 1 ] && exit 0
    exit 1
  fi
  bench_exe="$run_dir/bench_vs_libtorch"
  build_bench() {
    local abi perf="$root/tests/perf" objs=() pids=() src
    # The C++ ABI: torch's own answer, else whether libc10 exports
    # std::__cxx11 names (python3 may lack torch's Python dependencies).
    abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null) ||
      abi=$( [ "$(nm -D --defined-only "$torch_root/lib/libc10.so" | grep -c '__cxx11')" -gt 0 ] && echo 1 || echo 0)
    echo "LibTorch C++ ABI: $abi"
    local common=(-std=c++20 -O2 -fopenmp -DNDEBUG -I"$root/include" -I"$perf" -I"$root/examples" -I"$pack/include")
    mkdir -p "$run_dir/bench-obj"
    # The same sources as tests/perf/meson.build's bench_vs_libtorch, one
    # compiler per file side by side; the LibTorch side alone sees its headers.
    for src in bench_train bench_gpu mixgrad_side onednn_gemm cpu_peak; do
      ${CXX:-c++} "${common[@]}" -DMIXGRAD_BENCH_VERSION='"gpu-pack"' -DMIXGRAD_BENCH_LIBTORCH=1 \
        -c "$perf/$src.cpp" -o "$run_dir/bench-obj/$src.o" & pids+=($!)
      objs+=("$run_dir/bench-obj/$src.o")
    done
    ${CXX:-c++} "${common[@]}" -D_GLIBCXX_USE_CXX11_ABI="$abi" -Wno-unused-parameter \
      -DMIXGRAD_BENCH_TORCH_LIBDIR="\"$torch_root/lib\"" -isystem "$torch_root/include" \
      -isystem "$torch_root/include/torch/csrc/api/include" \
      -c "$perf/libtorch_side.cpp" -o "$run_dir/bench-obj/libtorch_side.o" & pids+=($!)
    objs+=("$run_dir/bench-obj/libtorch_side.o")
    # bench_fp8 (FP8 against bf16 autocast) needs mixgrad only.
    ${CXX:-c++} "${common[@]}" "$perf/bench_fp8.cpp" -o "$run_dir/bench_fp8" -L"$pack/lib" -lmixgrad & pids+=($!)
    local rc=0 p
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || return 1
    ${CXX:-c++} -fopenmp "${objs[@]}" -o "$bench_exe" -L"$pack/lib" -lmixgrad \
      -L"$torch_root/lib" -ltorch_cpu -lc10 -ldl -Wl,-rpath,"$torch_root/lib"
  }
  step_timeout=${MIXGRAD_BUILD_TIMEOUT:-300} run_step "benchmark build (tests/perf against the pack and $torch_root)" "$report_dir/bench-build.log" build_bench || exit 1
  if [ $dry_run = 1 ]; then
    run_step "benchmark starts and finds no GPU (dry run)" "$report_dir/bench.log" \
      expect_no_device "$bench_exe" --device cuda --sections train
    run_step "bench_fp8 starts and finds no GPU (dry run)" "$report_dir/bench-fp8.log" \
      expect_no_device "$run_dir/bench_fp8" --device cuda
  elif [ $profile = 1 ]; then
    # One fp16 step after one warm-up (the model, the optimizer and the casts
    # of the first step are in the counts too: the summary says how many
    # times each kernel ran).
    for m in mlp-4096 resnet; do
      run_step "kernel times of mixgrad's fp16 $m step (ncu)" "$report_dir/ncu-$m.log" \
        ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
        "$bench_exe" --device cuda --side mixgrad --models "$m" --precisions fp16 --sections train \
        --rounds 1 --reps 1 --warmup 1
    done
    # The captured-step comparison runs 100 steps here, not 1,000 (memcheck
    # slows every kernel down; the plain check runs all of them).
    MIXGRAD_CAPTURED_STEPS=100 run_step "test_cuda_device under compute-sanitizer memcheck" "$report_dir/memcheck.log" \
      compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 30 "$bin/test_cuda_device" "${boost_args[@]}"
    grep -E 'ERROR SUMMARY' "$report_dir/memcheck.log" | tail -n 1 | sed 's/^/      /' | tee -a "$report" >/dev/null
  else
    run_step "GPU benchmark against LibTorch" "$report_dir/bench.log" "$bench_exe" --device cuda --sections train
    tail -n 20 "$report_dir/bench.log" | sed 's/^/      /' | tee -a "$report" >/dev/null
    # Issue 42's FP8 targets: step >= 1.3x bf16's, loss after 1,000 steps within 1 %.
    run_step "FP8 against bf16 autocast, MLP 4 x 4096, batch 4096 (bench_fp8)" "$report_dir/bench-fp8-mlp.log" \
      "$run_dir/bench_fp8" --device cuda --model mlp
    tail -n 6 "$report_dir/bench-fp8-mlp.log" | sed 's/^/      /' | tee -a "$report" >/dev/null
    run_step "FP8 against bf16 autocast, transformer layer of width 4096, 4 x 1024 tokens (bench_fp8)" \
      "$report_dir/bench-fp8-gpt.log" "$run_dir/bench_fp8" --device cuda --model gpt --width 4096 --batch 4 --context 1024
    tail -n 6 "$report_dir/bench-fp8-gpt.log" | sed 's/^/      /' | tee -a "$report" >/dev/null
  fi
  say ""
  if [ $failed = 0 ]; then say "Result: every step that ran passed."; else say "Result: FAILURES above."; fi
  exit $failed
fi

# ---- the suites ------------------------------------------------------------------------
run_step "test_cuda_host (host-side plans and checks)" "$report_dir/cuda-host.log" "$bin/test_cuda_host" "${boost_args[@]}"
if [ $gpu_seen = 1 ]; then
  run_step "test_cuda_device" "$report_dir/device.log" "$bin/test_cuda_device" "${boost_args[@]}"
else
  run_step "test_cuda_device starts and finds no GPU (dry run)" "$report_dir/device.log" \
    expect_no_device "$bin/test_cuda_device" "${boost_args[@]}"
fi

registry_cases=op_registry/every_op_on_cuda_matches_the_cpu:op_registry/every_op_gradient_on_cuda_matches_the_cpu:op_registry/every_twice_differentiable_op_second_derivative_on_cuda_matches_the_cpu
if [ $gpu_seen = 1 ]; then
  run_step "op registry on CUDA vs the CPU (every op: values, gradients, second derivatives; float32 / bfloat16 / float16)" \
    "$report_dir/registry.log" "$bin/test_ops" "${boost_args[@]}" "--run_test=$registry_cases"
  # Ops whose family has no CUDA kernel yet fail by name (their DeviceError).
  missing=$(grep -o '([a-z0-9_]*) in [a-z0-9]* on CUDA: [a-z_0-9]*: no CUDA kernel' "$report_dir/registry.log" 2>/dev/null |
    sed 's/^(\([a-z0-9_]*\)).*/\1/' | sort -u | tr '\n' ' ')
  [ -n "$missing" ] && say "  - ops without a CUDA kernel yet (DeviceError): $missing"
else
  # The filter must name cases that exist, or the GPU run would check nothing.
  list_cases() {
    local listed
    listed=$("$bin/test_ops" --list_content 2>&1) || { echo "$listed"; return 1; }
    local c rc=0
    for c in ${registry_cases//:/ }; do
      if grep -q "^ *${c#op_registry/}\*\?$" <<<"$listed"; then echo "found $c"; else echo "MISSING $c"; rc=1; fi
    done
    return $rc
  }
  run_step "op registry: its CUDA cases exist (dry run)" "$report_dir/registry.log" list_cases
fi

# ---- the AMP training run ------------------------------------------------------------------
if [ -z "$data_dir" ] && [ -f "$pack/data/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  data_dir="$pack/data/fashion-mnist"
fi
if [ -z "$data_dir" ]; then
  skip "AMP Fashion-MNIST run" "no data (the pack has none; pass --data-dir)"
elif [ $gpu_seen = 1 ]; then
  run_step "AMP Fashion-MNIST run (CNN, fp16 autocast + GradScaler, 2 epochs, cuda:0)" "$report_dir/amp.log" \
    "$bin/train_fashion_mnist" --device cuda --amp --precision fp16 --model cnn --epochs 2 --data-dir "$data_dir"
  grep -iE 'epoch|accuracy|img/s' "$report_dir/amp.log" | tail -n 5 | sed 's/^/      /' | tee -a "$report" >/dev/null
  run_step "AMP Fashion-MNIST with --cuda-graph (MLP, fp16 + GradScaler, the step replayed as one CUDA graph, 2 epochs)" \
    "$report_dir/cuda-graph.log" "$bin/train_fashion_mnist" --device cuda --amp --precision fp16 --model mlp \
    --optimizer adam --epochs 2 --cuda-graph --data-dir "$data_dir"
  grep -iE 'epoch|graph' "$report_dir/cuda-graph.log" | tail -n 4 | sed 's/^/      /' | tee -a "$report" >/dev/null
else
  run_step "AMP run on the CPU from the packed data (dry run: CNN, bf16, 1 epoch of 1,000 images)" "$report_dir/amp.log" \
    "$bin/train_fashion_mnist" --device cpu --amp --model cnn --epochs 1 --limit-train 1000 --data-dir "$data_dir"
  skip "AMP Fashion-MNIST run on cuda:0" "dry run"
  run_step "--cuda-graph on the CPU is a usage error (dry run)" "$report_dir/cuda-graph.log" \
    expect_usage_error "--cuda-graph needs a CUDA device" "$bin/train_fashion_mnist" --device cpu --cuda-graph \
    --data-dir "$data_dir"
  skip "AMP Fashion-MNIST with --cuda-graph on cuda:0" "dry run"
fi

# ---- the GPT run (the second main job) ---------------------------------------------------
corpus_dir="$pack/data/fortunes"
if [ ! -d "$corpus_dir" ]; then
  skip "GPT run" "no corpus (the pack has none)"
elif [ $gpu_seen = 1 ]; then
  run_step "GPT run (train_char_gpt's default run: fp16 autocast + GradScaler, fused attention, cuda:0)" "$report_dir/gpt.log" \
    "$bin/train_char_gpt" --device cuda --data-dir "$corpus_dir"
  grep -iE 'val|tokens/s|fused|sample' "$report_dir/gpt.log" | tail -n 8 | sed 's/^/      /' | tee -a "$report" >/dev/null
else
  run_step "GPT run on the CPU from the packed corpus (dry run: 3 steps, no sample)" "$report_dir/gpt.log" \
    "$bin/train_char_gpt" --device cpu --steps 3 --warmup 1 --eval-interval 3 --eval-batches 1 --sample 0 --data-dir "$corpus_dir"
  skip "GPT run on cuda:0" "dry run"
fi

say ""
if [ $gpu_seen = 1 ]; then
  say "Next: the benchmark, a second call: scripts/gpu-check.sh --bench"
fi
if [ $failed = 0 ]; then say "Result: every step that ran passed."; else say "Result: FAILURES above."; fi
exit $failed
