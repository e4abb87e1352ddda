#!/usr/bin/env python3
"""Writes the first N images and labels of a Fashion-MNIST (IDX, gzip) set.

    idx_subset.py SRC_DIR DEST_DIR --train 10000 --test 2000

The files keep their names and format, so anything that reads the full set
reads the subset (scripts/gpu-pack.sh packs one for the GPU machine).
"""
import argparse
import gzip
import os
import struct

SETS = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def write_first(src, dest, count):
    with gzip.open(src, "rb") as f:
        magic, total = struct.unpack(">II", f.read(8))
        ndim = magic & 0xFF
        dims = struct.unpack(">" + "I" * (ndim - 1), f.read(4 * (ndim - 1)))
        if count > total:
            raise SystemExit(f"idx_subset.py: {src} holds {total} items, fewer than {count}")
        item = 1
        for d in dims:
            item *= d
        body = f.read(count * item)
    # mtime=0: the same subset gives the same bytes.
    with open(dest, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g:
        g.write(struct.pack(">II", magic, count))
        g.write(struct.pack(">" + "I" * len(dims), *dims))
        g.write(body)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dest")
    p.add_argument("--train", type=int, default=10000)
    p.add_argument("--test", type=int, default=2000)
    a = p.parse_args()
    os.makedirs(a.dest, exist_ok=True)
    for name, count in (("train", a.train), ("test", a.test)):
        for file in SETS[name]:
            write_first(os.path.join(a.src, file), os.path.join(a.dest, file), count)


if __name__ == "__main__":
    main()
