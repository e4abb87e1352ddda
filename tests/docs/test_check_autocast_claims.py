#!/usr/bin/env python3
"""Self-test of check_autocast_claims.py (meson test 'autocast_claims_selftest').

Runs the checker on small trees: claims that agree with a small op table
pass, whatever their form (per device, for a whole header, naming the ops);
sentences that are not claims are ignored; a wrong claim, and a claim about
no op of the table, fail with their file and line.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_autocast_claims.py")

OP_TABLE = """// rows
MIXGRAD_OP(matmul, linalg, twice, low, low)
MIXGRAD_OP(div, elementwise, twice, high, promote)
MIXGRAD_OP(mse_loss, loss, twice, high, high)
MIXGRAD_OP(l1_loss, loss, twice, high, high)
MIXGRAD_OP(upsample_bicubic, resize, twice, high, keep)
"""
UNARY = "MIXGRAD_UNARY_OP(sqrt, Sqrt, generated, high, keep)\n"

LOSSES = """// Losses. Under autocast the losses run in float32; otherwise in the
// input's dtype. Sums are accumulated in float32.
#pragma once

Tensor mse_loss(const Tensor& a, const Tensor& b);
/// Under autocast on CUDA it is refused.
Tensor l1_loss(const Tensor& a, const Tensor& b);
"""

GOOD = """#pragma once

/// a @ b (autocast runs it in low precision).
Tensor matmul(const Tensor& a, const Tensor& b);
/// a / b. Under autocast float32 on the CPU, the wider input dtype on CUDA.
Tensor div(const Tensor& a, const Tensor& b);
/// Square root (under autocast float32 on the CPU, the input's dtype on CUDA).
Tensor sqrt(const Tensor& x);
/// Under autocast float32 on the CPU, the input's dtype on CUDA.
Tensor upsample_bicubic2d(const Tensor& x);
/// Autocast runs it as upsample_bicubic does: float32 on the CPU.
Tensor resample(const Tensor& x);
"""


def tree(root, header, losses=LOSSES):
    os.makedirs(os.path.join(root, "src/core"))
    os.makedirs(os.path.join(root, "include/mixgrad/ops"))
    with open(os.path.join(root, "src/core/op_table.def"), "w") as f:
        f.write(OP_TABLE)
    with open(os.path.join(root, "src/core/unary_ops.def"), "w") as f:
        f.write(UNARY)
    with open(os.path.join(root, "include/mixgrad/ops/ops.hpp"), "w") as f:
        f.write(header)
    with open(os.path.join(root, "include/mixgrad/ops/losses.hpp"), "w") as f:
        f.write(losses)


def expect(name, root, rc, needles=(), absent=()):
    r = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
    out = r.stdout + r.stderr
    ok = r.returncode == rc and all(n in out for n in needles) and not any(a in out for a in absent)
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        print(f"  exit {r.returncode}, expected {rc}; output:\n" + out)
    return ok


def main():
    results = []
    with tempfile.TemporaryDirectory() as t:
        root = os.path.join(t, "good")
        tree(root, GOOD)
        results.append(expect("claims that agree with the table pass", root, 0, ["0 problem(s)"]))

        root = os.path.join(t, "wrong")
        tree(root, GOOD.replace("/// Square root (under autocast float32 on the CPU, the input's dtype on CUDA).",
                                "/// Square root (runs in float32 under autocast)."))
        results.append(expect("a claim the table contradicts fails, with its line", root, 1,
                              ["ops.hpp:7: says sqrt is 'high' on CUDA", "the op table says 'keep'"], ["ops.hpp:3", "ops.hpp:5"]))

        root = os.path.join(t, "file_level")
        tree(root, GOOD, LOSSES.replace("the losses run in float32", "the losses run in low precision"))
        results.append(expect("a header-wide claim is checked against every op of the header", root, 1,
                              ["losses.hpp:1: says mse_loss is 'low' on CPU", "losses.hpp:1: says l1_loss is 'low' on CUDA"],
                              ["ops.hpp:"]))

        root = os.path.join(t, "no_op")
        tree(root, GOOD.replace("Autocast runs it as upsample_bicubic does", "Autocast runs it as bicubic does"))
        results.append(expect("a claim about no op of the table fails", root, 1,
                              ["ops.hpp:11: an autocast claim about no op of the op table"]))
    print(f"check_autocast_claims self-test: {sum(results)} of {len(results)} passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
