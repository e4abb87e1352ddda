#!/usr/bin/env python3
"""check_wraps.py passes the project's wraps and fails each kind of broken one.

Copies subprojects/ and the meson.build files that ask for the dependencies
into a temporary tree, checks it as it is, then breaks one thing at a time.

    python3 tests/wraps/test_check_wraps.py ROOT [--meson MESON]
"""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_wraps.py")
args = sys.argv[1:]
root = os.path.abspath(args[0])
extra = args[1:]


def copy_tree():
    tree = tempfile.mkdtemp()
    shutil.copytree(os.path.join(root, "subprojects"), os.path.join(tree, "subprojects"),
                    ignore=lambda folder, names: [n for n in names if folder.endswith("subprojects")
                                                  and os.path.isdir(os.path.join(folder, n))
                                                  and n != "packagefiles"])
    shutil.copy(os.path.join(root, "meson.build"), tree)
    return tree


def run(tree):
    return subprocess.run([sys.executable, SCRIPT, tree] + extra, capture_output=True, text=True)


def edit(tree, rel, old, new):
    path = os.path.join(tree, rel)
    with open(path) as f:
        text = f.read()
    assert old in text, (rel, old)
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


tree = copy_tree()
good = run(tree)
assert good.returncode == 0, good.stdout + good.stderr
assert ", 0 faults" in good.stdout, good.stdout
shutil.rmtree(tree)

# (what to break, the fault it must report)
cases = [
    (("zlib.wrap", "[wrap-file]", "[wrap-fil]"), "meson subprojects foreach: ERROR: Unknown wrap type 'fil'"),
    (("zlib.wrap", "zlib = zlib_dep", "zlib"), "zlib.wrap: does not parse"),
    (("zlib.wrap", "source_hash = ", "source_sha = "), "zlib.wrap: [wrap-file] has no source_hash"),
    (("nlohmann_json.wrap", "source_hash = e5c7", "source_hash = e5c"), "nlohmann_json.wrap: source_hash is not a SHA-256"),
    (("zlib.wrap", "source_url = ", "#source_url = "), "zlib.wrap: [wrap-file] has no source_url"),
    (("zlib.wrap", "patch_directory = zlib", "patch_directory = zlib2"), "zlib.wrap: patch_directory zlib2 has no meson.build"),
    (("zlib.wrap", "zlib = zlib_dep", "zlib = zlib_dependency"), "zlib.wrap: [provide] zlib = zlib_dependency, which"),
    (("nlohmann_json.wrap", "[provide]", "[provides]"), "nlohmann_json.wrap: no [provide] section"),
    (("nlohmann_json.wrap", "nlohmann_json = nlohmann_json_dep", "json = nlohmann_json_dep"),
     "nlohmann_json.wrap: provides json, which no meson.build asks for"),
]
for (wrap, old, new), fault in cases:
    tree = copy_tree()
    edit(tree, os.path.join("subprojects", wrap), old, new)
    bad = run(tree)
    assert bad.returncode == 1, (wrap, new, bad.stdout + bad.stderr)
    assert fault in bad.stdout, (fault, bad.stdout + bad.stderr)
    shutil.rmtree(tree)

tree = copy_tree()
for wrap in os.listdir(os.path.join(tree, "subprojects")):
    if wrap.endswith(".wrap"):
        os.remove(os.path.join(tree, "subprojects", wrap))
none = run(tree)
assert none.returncode == 1 and "no wraps in" in none.stdout, none.stdout
shutil.rmtree(tree)
print(f"check_wraps selftest: the project's wraps pass, {len(cases) + 1} broken trees fail")
