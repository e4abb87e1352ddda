#!/usr/bin/env python3
"""check_layers.py finds an upward include and passes a downward one."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layers.py")


def tree(files):
    root = tempfile.mkdtemp()
    for rel, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    return root


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)


down = run(tree({"src/ops/add.cpp": '#include "backend/copy.hpp"\n#include "mixgrad/tensor.hpp"\n',
                 "src/backend/copy.hpp": "", "include/mixgrad/tensor.hpp": ""}))
assert down.returncode == 0, down.stdout
assert "0 upward" in down.stdout, down.stdout

up = run(tree({"src/kernels/loops.hpp": '#include "ops/op_support.hpp"\n', "src/ops/op_support.hpp": "",
               "src/nn/linear.cpp": '#include "mixgrad/optim/sgd.hpp"\n', "include/mixgrad/optim/sgd.hpp": ""}))
assert up.returncode == 1, up.stdout
assert 'src/kernels/loops.hpp:1: kernels includes "ops/op_support.hpp" of ops' in up.stdout, up.stdout
assert "1 upward" in up.stdout, up.stdout  # nn and optim share a level

# apex's front end lives in amp/ but sits above nn and optim, and amp below them.
front = run(tree({"include/mixgrad/amp/initialize.hpp": '#include "mixgrad/nn/module.hpp"\n',
                  "include/mixgrad/amp/autocast.hpp": '#include "mixgrad/nn/module.hpp"\n',
                  "include/mixgrad/nn/module.hpp": ""}))
assert front.returncode == 1, front.stdout
assert "include/mixgrad/amp/autocast.hpp:1: amp includes" in front.stdout, front.stdout
assert "1 upward" in front.stdout, front.stdout

unknown = run(tree({"src/plugins/x.cpp": '#include "mixgrad/tensor.hpp"\n', "include/mixgrad/tensor.hpp": ""}))
assert unknown.returncode == 1 and "plugins" in unknown.stdout, unknown.stdout
print("check_layers selftest: 4 trees checked")
