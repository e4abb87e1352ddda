#!/usr/bin/env python3
"""Self-test of check_reference.py (meson test 'doc_reference_selftest').

Builds small trees in a temporary directory and runs the checker on them: a
clean tree passes; a reference page over the limit, a path that does not
exist and a text that a file does not hold each fail, named with file and
line; a long page under docs/notes/ does not count.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_reference.py")

INDEX = """# Architecture

## Where is X

| op | declaration | CPU kernel |
|---|---|---|
| `F::tanh` | `include/ops.hpp`: `Tensor tanh(` | `src/cpu.cpp`: `KERNEL(unary,`, `KERNEL(binary,` |
{extra}
## Next section

`src/not_in_the_index.cpp`: `ignored(` is outside the section.
"""


def tree(root, extra="", page_lines=10, notes_lines=10):
    for d in ("docs/notes", "include", "src"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "docs/architecture.md"), "w") as f:
        f.write(INDEX.format(extra=extra))
    with open(os.path.join(root, "docs/page.md"), "w") as f:
        f.write("line\n" * page_lines)
    with open(os.path.join(root, "docs/notes/log.md"), "w") as f:
        f.write("line\n" * notes_lines)
    with open(os.path.join(root, "include/ops.hpp"), "w") as f:
        f.write("Tensor tanh(const Tensor& x);\n")
    with open(os.path.join(root, "src/cpu.cpp"), "w") as f:
        f.write("KERNEL(unary, cpu::unary);\nKERNEL(binary, cpu::binary);\n")


def run(root):
    r = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def expect(name, root, rc, needles=(), absent=()):
    code, out = run(root)
    ok = code == rc and all(n in out for n in needles) and not any(a in out for a in absent)
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        print(f"  exit {code}, expected {rc}; output:\n" + out)
    return ok


def main():
    results = []
    with tempfile.TemporaryDirectory() as t:
        root = os.path.join(t, "clean")
        tree(root, page_lines=500, notes_lines=900)
        results.append(expect("a clean tree passes (a 500-line page, a long note)", root, 0,
                              ["0 problem(s)"], ["notes/log.md"]))

        root = os.path.join(t, "long")
        tree(root, page_lines=501)
        results.append(expect("a 501-line reference page fails", root, 1, ["docs/page.md:501:", "over the 500"]))

        root = os.path.join(t, "missing_file")
        tree(root, extra="| `F::exp` | `include/gone.hpp`: `Tensor exp(` | |\n")
        results.append(expect("a path that does not exist fails", root, 1,
                              ["docs/architecture.md:8: include/gone.hpp does not exist"]))

        root = os.path.join(t, "missing_text")
        tree(root, extra="| `F::exp` | `include/ops.hpp`: `Tensor exp(` | `src/cpu.cpp`: `KERNEL(unary,`, `KERNEL(exp,` |\n")
        results.append(expect("a text the file does not hold fails, each one named", root, 1,
                              ["include/ops.hpp does not contain 'Tensor exp('",
                               "src/cpu.cpp does not contain 'KERNEL(exp,'"], ["'KERNEL(unary,'"]))

        root = os.path.join(t, "no_section")
        tree(root)
        with open(os.path.join(root, "docs/architecture.md"), "w") as f:
            f.write("# Architecture\n")
        results.append(expect("a page without the section fails", root, 1, ["no '## Where is X' section"]))
    print(f"check_reference self-test: {sum(results)} of {len(results)} passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
