#!/usr/bin/env python3
"""same_tensors.py A B: exit 0 when the safetensors files A and B hold the same
tensors bit for bit (names, dtypes, shapes, bytes), whatever their metadata;
1 naming the first difference. Standard library only."""
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        print(f"same_tensors: '{k}' differs between {sys.argv[1]} and {sys.argv[2]}", file=sys.stderr)
        sys.exit(1)
