# Shared by scripts/test.sh and scripts/train.sh (sourced, not run): the
# Debian packages mixgrad needs, and configure + build in ./build.
#
#   MIXGRAD_BUILD_DIR   build directory (default: build)
#   MIXGRAD_SKIP_APT=1  do not run apt-get (the packages are already there)

set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
build_dir=${MIXGRAD_BUILD_DIR:-build}

# The CUDA toolkit, when present, is picked up by the build (-Dcuda=auto).
if [ -d /usr/local/cuda/bin ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# Everything the build, the tests and the example use, from Debian 12.
debian_packages=(
  meson ninja-build pkg-config cmake g++
  libboost-test-dev libboost-program-options-dev
  libdnnl-dev zlib1g-dev nlohmann-json3-dev
  python3-pip
  dataset-fashion-mnist fortunes
  libopenmpi-dev openmpi-bin
)
# The sanitizer and fuzzing stage of scripts/test.sh: clang with its
# sanitizer and libFuzzer runtimes, LLVM's OpenMP (clang's -fopenmp), and
# llvm-symbolizer for readable reports.
sanitizer_packages=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
# The API reference stage of scripts/test.sh (docs/Doxyfile.in); not in the
# list above, as train.sh has no use for it (it pulls in LLVM's libraries).
doc_packages=(doxygen)

install_packages() {
  if [ "${MIXGRAD_SKIP_APT:-0}" = 1 ]; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    local missing=()
    for p in "${debian_packages[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
      echo "missing Debian packages: ${missing[*]}" >&2
      echo "run as root, or: sudo apt-get install ${missing[*]}" >&2
      exit 1
    fi
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q </dev/null
  apt-get install -y -q --no-install-recommends "${debian_packages[@]}" </dev/null
  install_python_packages
}

# Python's safetensors and numpy, for the test that reads our checkpoints
# with them (it is skipped without them, so a failure here only warns).
# torch and torchvision, for the torchvision logit test (models_torchvision),
# are left out on purpose: 5.3 GB installed, most of it CUDA libraries; the
# test is skipped without them (docs/training.md, "The logit test").
install_python_packages() {
  python3 -c 'import safetensors, numpy' 2>/dev/null || pip_install safetensors numpy ||
    echo "warning: could not pip-install safetensors and numpy; the safetensors interop test will be skipped" >&2
  # The header-only cuDNN frontend (fused attention on CUDA), where the CUDA
  # toolkit is: without it, attention on CUDA runs the composed math.
  if [ -d /usr/local/cuda/include ] && ! python3 -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(sysconfig.get_paths()["purelib"] + "/include/cudnn_frontend.h"))' 2>/dev/null; then
    pip_install nvidia-cudnn-frontend ||
      echo "warning: could not pip-install nvidia-cudnn-frontend; attention on CUDA will run the composed math" >&2
  fi
}

# pip install --no-deps of the packages not importable yet (Debian's pip
# wants --break-system-packages outside a virtual environment).
pip_install() {
  python3 -m pip install -q --no-deps "$@" 2>/dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages "$@" 2>/dev/null
}

# MIXGRAD_GPU_ARCH overrides the CUDA architectures (-Dgpu_arch); CI sets one,
# as no device code runs there and each architecture is a full nvcc pass.
# Arguments: extra meson options, then optionally `--` and the targets to
# build (default: everything).
configure_and_build() {
  local options=() targets=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    options+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift && targets=("$@")
  if [ -n "${MIXGRAD_GPU_ARCH:-}" ]; then
    options+=("-Dgpu_arch=$MIXGRAD_GPU_ARCH")
  fi
  if [ -f "$build_dir/build.ninja" ]; then
    meson setup --reconfigure "${options[@]}" "$build_dir"
  else
    meson setup "${options[@]}" "$build_dir"
  fi
  meson compile -C "$build_dir" "${targets[@]}"
}

# The CUDA architectures of the GPUs nvidia-smi reports ("90", "80;90"), or
# nothing when it reports none.
local_gpu_archs() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' | sort -u | paste -sd';'
}
