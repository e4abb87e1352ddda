#!/usr/bin/env python3
"""Interop with Hugging Face's safetensors package, both ways.

  read_with_safetensors.py WRITER

WRITER is the write_safetensors test program. It writes files that this
script reads with `safetensors` (names, shapes, dtypes and values must be
what the formulas below give), and it reads a file written here. Exits 77
(skipped) when safetensors or numpy is not importable.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"skipped: {e} (pip install safetensors numpy)")
    sys.exit(77)

# The same specs and formulas as write_safetensors.cpp.
SPECS = [
    ("float32", "F32", np.float32, (2, 3)),
    ("float16", "F16", np.float16, (5,)),
    ("bfloat16", "BF16", None, (2, 2)),
    ("float64", "F64", np.float64, (3, 1, 2)),
    ("int32", "I32", np.int32, (4,)),
    ("int64", "I64", np.int64, (2, 3)),
    ("bool", "BOOL", np.bool_, (7,)),
    ("scalar", "F32", np.float32, ()),
    ("int8", "I8", np.int8, (3, 3)),
    ("uint8", "U8", np.uint8, (2, 5)),
]


def expected(name, np_dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    sign = np.where(i % 2 == 1, -1, 1)
    if name == "bool":
        v = i % 3 == 0
    elif name == "int32":
        v = sign * i * 7
    elif name == "int64":
        v = sign * i * i * 1000003
    elif name == "int8":
        v = (i * 37) % 256 - 128
    elif name == "uint8":
        v = (i * 53) % 256
    else:
        v = (i - 3) / 4.0
    return np.asarray(v, dtype=np_dtype if np_dtype is not None else np.float32).reshape(shape)


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def main():
    writer = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([writer, "write", d], check=True)
        path = os.path.join(d, "tensors.safetensors")

        # numpy has no bfloat16: read everything else through load_file ...
        with safetensors.safe_open(path, framework="numpy") as f:
            check(f.metadata().get("writer") == "mixgrad", "metadata 'writer'")
            check(sorted(f.keys()) == sorted(s[0] for s in SPECS), f"keys {sorted(f.keys())}")
            for name, _, np_dtype, shape in SPECS:
                if np_dtype is None:
                    continue
                t = f.get_tensor(name)
                want = expected(name, np_dtype, shape)
                check(t.dtype == want.dtype, f"{name}: dtype {t.dtype}, expected {want.dtype}")
                check(t.shape == want.shape, f"{name}: shape {t.shape}, expected {want.shape}")
                check(np.array_equal(t, want), f"{name}: values {t.ravel()} expected {want.ravel()}")

        # ... and the BF16 tensor from the raw bytes safetensors hands out.
        with open(path, "rb") as fh:
            raw = dict(safetensors.deserialize(fh.read()))
        bf = raw["bfloat16"]
        check(bf["dtype"].lower() == "bfloat16" or bf["dtype"] == "BF16", f"bfloat16: dtype {bf['dtype']}")
        check(list(bf["shape"]) == [2, 2], f"bfloat16: shape {bf['shape']}")
        as_f32 = (np.frombuffer(bytes(bf["data"]), dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        check(np.array_equal(as_f32.reshape(2, 2), expected("bfloat16", None, (2, 2))), f"bfloat16: values {as_f32}")

        # A whole checkpoint: namespaced keys, the parameters as written.
        ckpt = load_file(os.path.join(d, "checkpoint.safetensors"))
        for prefix in ("model.", "optimizer.", "scaler."):
            check(any(k.startswith(prefix) for k in ckpt), f"checkpoint has no '{prefix}*' tensors")
        check(ckpt["scaler.scale_factor"].dtype == np.float64 and ckpt["scaler.scale_factor"].shape == (),
              "scaler.scale_factor is a 0-d float64")
        with open(os.path.join(d, "checkpoint_expected.txt")) as fh:
            for line in fh:
                name, *values = line.split()
                t = ckpt.get(name)
                check(t is not None and t.dtype == np.float32, f"{name}: missing or not float32")
                if t is not None:
                    check(np.array_equal(t.astype(np.float64).ravel(), np.array([float(v) for v in values])),
                          f"{name}: values differ")

        # The other way: Python writes, mixgrad reads and checks.
        theirs = {name: expected(name, np_dtype, shape) for name, _, np_dtype, shape in SPECS if np_dtype is not None}
        py_path = os.path.join(d, "from_python.safetensors")
        save_file(theirs, py_path, metadata={"writer": "python"})
        r = subprocess.run([writer, "check", py_path])
        check(r.returncode == 0, "mixgrad could not read the file Python wrote")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok: safetensors", safetensors.__version__, "reads mixgrad's files and mixgrad reads its files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
