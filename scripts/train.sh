#!/bin/bash
# Installs what mixgrad needs (Debian 12, as root), builds it in ./build and
# trains the Fashion-MNIST example (data from Debian's dataset-fashion-mnist).
# Arguments are passed to the example; --help lists them. Without arguments
# it trains the CNN for 3 epochs with automatic mixed precision (--amp:
# bfloat16 autocast and a GradScaler).
#
#   scripts/train.sh
source "$(dirname "$0")/common.sh"

install_packages
configure_and_build

example="$build_dir/examples/train_fashion_mnist"
if [ ! -x "$example" ]; then
  echo "$example was not built: the example is not in this tree yet" >&2
  exit 1
fi
if [ $# -eq 0 ]; then
  set -- --amp
fi
exec "$example" "$@"
