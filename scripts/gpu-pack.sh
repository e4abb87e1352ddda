#!/usr/bin/env bash
# Builds, on this machine (it has nvcc; it need not have a GPU), what the GPU
# check runs, and packs it into one compressed file that travels with the
# working tree to a GPU machine, where scripts/gpu-check.sh only runs it:
#
#   scripts/gpu-pack.sh [--arch 90] [--build-dir DIR] [--out DIR]
#
#   --arch       CUDA architecture of the device code (default 90: H100/H200)
#   --build-dir  build directory (default build-gpu-pack). A new one is
#                configured with -Dcuda=enabled -Dgpu_arch=ARCH
#                -Ddistributed=disabled -Dlibtorch=disabled -Dbenchmarks=false;
#                an existing one is reused as it is configured (CI packs the
#                build its tests ran in) and must have the CUDA backend on.
#   --out        where the pack goes (default .gpu-pack/, ignored by git)
#
# The pack, OUT/mixgrad-gpu.tar.xz (at most 40 MiB, or the script fails):
#   bin/      test_cuda_host, test_cuda_device, test_ops, train_fashion_mnist,
#             train_char_gpt
#   lib/      libmixgrad.so.0 and every library these need that a GPU machine
#             may lack (oneDNN, OpenCL's loader, Boost.Test and
#             Program_options, zlib, libgomp). NVIDIA's libraries (CUDA runtime,
#             cuBLAS, cuDNN) are not packed: gpu-check.sh finds them there, in
#             the toolkit or in PyTorch's pip wheels.
#   include/  mixgrad_config.h, for building the benchmark there against lib/
#   data/     a Fashion-MNIST subset (10,000 training and 2,000 test images)
#             and the fortunes corpus (plain-text files) for the GPT run
#   MANIFEST  commit, architecture, build options, each file's size and SHA-256
# Everything is stripped. Carry it with the device tool's `carry: [".gpu-pack"]`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=90
build="$root/build-gpu-pack"
out="$root/.gpu-pack"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch=$2; shift 2 ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "gpu-pack.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
max_bytes=$((40 * 1024 * 1024))
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "gpu-pack.sh: nvcc not found (PATH, /usr/local/cuda/bin): the pack needs the CUDA toolkit" >&2; exit 1; }

# ---- build ---------------------------------------------------------------------
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" --buildtype=release -Dcuda=enabled "-Dgpu_arch=$arch" \
    -Ddistributed=disabled -Dlibtorch=disabled -Dbenchmarks=false -Dfuzzing=false \
    -Dtests=true -Dexamples=true
fi
option() {
  meson introspect "$build" --buildoptions |
    python3 -c 'import json, sys; print(next(str(o["value"]) for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}
grep -q 'backend_cuda_' "$build/build.ninja" ||
  { echo "gpu-pack.sh: $build has no CUDA backend (cuda=$(option cuda)); pack from a CUDA build" >&2; exit 1; }
built_arch=$(option gpu_arch)
targets=(test_cuda_host test_cuda_device test_ops train_fashion_mnist train_char_gpt)
meson compile -C "$build" "${targets[@]}"

# ---- stage -----------------------------------------------------------------------
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pack="$stage/mixgrad-gpu"
mkdir -p "$pack/bin" "$pack/lib" "$pack/include" "$pack/data/fashion-mnist"
for t in test_cuda_host test_cuda_device test_ops; do
  strip -o "$pack/bin/$t" "$build/tests/$t"
done
for t in train_fashion_mnist train_char_gpt; do
  strip -o "$pack/bin/$t" "$build/examples/$t"
done
strip -o "$pack/lib/libmixgrad.so.0" "$(readlink -f "$build/libmixgrad.so.0")"
ln -s libmixgrad.so.0 "$pack/lib/libmixgrad.so"
cp "$build/mixgrad_config.h" "$pack/include/"

# The libraries the binaries need, but for glibc's and the compiler's own
# (a GPU machine has newer ones) and NVIDIA's (found there, matching its driver).
# The build's own libraries (a build with the distributed library links the
# example to it) are found in the build tree: the stripped copies' RUNPATHs
# point there relative to where they were.
provided_there='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.so'
build_libdirs=$(find "$build" -maxdepth 3 -name 'lib*.so*' \( -type f -o -type l \) -not -path '*/tests/*' -printf '%h\n' | sort -u | paste -sd:)
LD_LIBRARY_PATH="$pack/lib:$build_libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$pack"/bin/* "$pack/lib/libmixgrad.so.0" |
  awk '/=>/ {print $1, $3}' | sort -u | while read -r name path; do
    [[ $name =~ $provided_there ]] && continue
    [ -e "$pack/lib/$name" ] && continue
    if [ "$path" = "not" ] || [ ! -f "$path" ]; then
      echo "gpu-pack.sh: $name, which the binaries need, is not found here" >&2
      exit 1
    fi
    strip -o "$pack/lib/$name" "$(readlink -f "$path")"
  done

# A Fashion-MNIST subset for the AMP run (the whole set is 30 MB compressed).
data=${MIXGRAD_DATA_DIR:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  python3 "$root/scripts/idx_subset.py" "$data" "$pack/data/fashion-mnist" --train 10000 --test 2000
else
  echo "gpu-pack.sh: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist): the pack has no data and the AMP run will be skipped" >&2
  rmdir "$pack/data/fashion-mnist"
fi
# The fortunes corpus for the GPT run (its plain-text files, 2.8 MB).
corpus=${MIXGRAD_CORPUS_DIR:-/usr/share/games/fortunes}
if [ -d "$corpus" ]; then
  mkdir -p "$pack/data/fortunes"
  find "$corpus" -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$pack/data/fortunes/" \;
else
  echo "gpu-pack.sh: no fortunes corpus in $corpus (apt-get install fortunes): the GPT run will be skipped" >&2
fi

{
  echo "mixgrad GPU pack"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "made: $(date -u '+%Y-%m-%d %H:%M UTC') on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "gpu_arch: $built_arch; onednn: $(option onednn); buildtype: $(option buildtype)"
  echo "nvcc: $(nvcc --version | grep -o 'release [0-9.]*'); compiler: $(c++ --version | head -n 1)"
  echo "files:"
  (cd "$pack" && find . -type f | sort | while read -r f; do
    printf '  %-50s %10d  %s\n' "${f#./}" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)"
  done)
} >"$pack/MANIFEST"

mkdir -p "$out"
rm -f "$out/mixgrad-gpu.tar.xz"
tar -C "$stage" -cf - mixgrad-gpu | xz -T0 -6 >"$out/mixgrad-gpu.tar.xz.part"
mv "$out/mixgrad-gpu.tar.xz.part" "$out/mixgrad-gpu.tar.xz"
bytes=$(stat -c %s "$out/mixgrad-gpu.tar.xz")
echo "gpu-pack.sh: $out/mixgrad-gpu.tar.xz, $((bytes / 1024 / 1024)) MiB ($bytes bytes; $(du -sh "$pack" | cut -f1) unpacked), gpu_arch $built_arch"
if [ "$bytes" -gt "$max_bytes" ]; then
  echo "gpu-pack.sh: the pack is over its 40 MiB limit" >&2
  exit 1
fi
