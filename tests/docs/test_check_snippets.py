#!/usr/bin/env python3
"""The checker of the documentation's examples can fail (meson test 'doc_snippets_selftest').

    test_check_snippets.py --root SOURCE_ROOT --build BUILD_ROOT --out DIR -- COMPILER [FLAGS...]

Runs tests/docs/check_snippets.py on the Markdown files of tests/docs/fixtures/:
good.md (every kind of block and directive) must pass; broken.md (one block
calls an op that does not exist) must fail naming that block's file and
line, and only that block; orphan.md and noreason.md (malformed directives)
must fail naming the directive's line.
"""
import os
import subprocess
import sys

FIXTURES = "tests/docs/fixtures"


def run(args, rest, name):
    root = args[args.index("--root") + 1]
    cmd = [sys.executable, os.path.join(root, "tests/docs/check_snippets.py")] + args + [f"{FIXTURES}/{name}", "--"]
    proc = subprocess.run(cmd + rest, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def expect(cond, what, output):
    if not cond:
        print(f"FAILED: {what}\n--- checker output ---\n{output}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    args, rest = argv[:sep], argv[sep + 1:]

    rc, out = run(args, rest, "good.md")
    expect(rc == 0 and "doc snippets: 4 compiled, 0 failed, 1 skipped" in out,
           "good.md: 4 blocks compile (default and own context, hoisted definitions, namespace scope, "
           "a whole program), 1 skipped, directives inside code are ignored", out)

    rc, out = run(args, rest, "broken.md")
    broken = f"{FIXTURES}/broken.md"
    expect(rc == 1, "broken.md fails", out)
    expect(f"{broken}:9: error: the ```cpp block at line 9 does not compile" in out,
           "the failing block is named by file and line", out)
    expect(f"{broken}:11:" in out and "no_such_op" in out,
           "the compiler's message points at the Markdown line of the bad call", out)
    expect(f"{broken}:4: error" not in out and "failed: " + f"{broken}:9\n" in out,
           "the block that compiles is not blamed", out)

    rc, out = run(args, rest, "orphan.md")
    expect(rc == 1 and f"{FIXTURES}/orphan.md:3: snippet directive is not right above a ```cpp block" in out,
           "a directive away from its block fails, naming its line", out)

    rc, out = run(args, rest, "noreason.md")
    expect(rc == 1 and f"{FIXTURES}/noreason.md:3: a skipped block needs a reason" in out,
           "a skip without a reason fails, naming its line", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
