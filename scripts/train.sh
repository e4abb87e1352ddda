#!/bin/bash
# Installs what mixgrad needs (Debian 12, as root), builds it in ./build and
# trains the Fashion-MNIST example (data from Debian's dataset-fashion-mnist).
# Arguments are passed to the example; --help lists them. Without arguments
# it trains the CNN for 3 epochs with automatic mixed precision (--amp:
# bfloat16 autocast and a GradScaler). `--example gpt` first trains the
# character-level GPT on Debian's fortunes instead (bf16 autocast), then
# writes a sample.
#
#   scripts/train.sh
#   scripts/train.sh --example gpt [--steps 500 ...]
source "$(dirname "$0")/common.sh"

install_packages
# Only what the main job needs: the library and the example (no test suites,
# benchmarks or fuzz targets), and CUDA device code only for the GPUs this
# machine has.
cuda_options=(-Dcuda=auto)
archs=$(local_gpu_archs)
if [ -n "$archs" ]; then
  cuda_options+=("-Dgpu_arch=$archs")
elif [ -z "${MIXGRAD_GPU_ARCH:-}" ]; then
  echo "train.sh: no GPU found by nvidia-smi: building for the CPU only (MIXGRAD_GPU_ARCH=90 scripts/train.sh builds the CUDA backend anyway)"
  cuda_options=(-Dcuda=disabled)
fi
name=train_fashion_mnist
if [ "${1:-}" = --example ]; then
  case "${2:-}" in
    gpt) name=train_char_gpt ;;
    fashion-mnist) ;;
    *) echo "train.sh: --example takes gpt or fashion-mnist, got '${2:-}'" >&2; exit 2 ;;
  esac
  shift 2
  [ $name = train_char_gpt ] && [ $# -eq 0 ] && set -- --precision auto
fi
configure_and_build "${cuda_options[@]}" -- "examples/$name"

example="$build_dir/examples/$name"
if [ ! -x "$example" ]; then
  echo "$example was not built: the example is not in this tree yet" >&2
  exit 1
fi
if [ $# -eq 0 ]; then
  set -- --amp
fi
exec "$example" "$@"
