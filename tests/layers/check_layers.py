#!/usr/bin/env python3
"""The include graph follows the layer order of docs/architecture.md.

Every file under src/ and include/mixgrad/ belongs to one layer (its folder;
the public headers at include/mixgrad/ top level, and the few files whose
layer is not their folder's, are assigned below). An
#include of a file in a higher layer is an upward edge and fails the check,
with the file, the line and both layers named. Layers on one level (autodiff
and amp; nn, optim and data) may include each other.

    python3 tests/layers/check_layers.py [ROOT]        # exit 0, or 1 with the edges
    python3 tests/layers/check_layers.py ROOT --graph  # every folder-to-folder edge
"""
import collections
import os
import re
import sys

# Lowest first. A file may include files of its own level and the levels before it.
LEVELS = [
    ["core"],
    ["kernels"],
    ["backend"],
    ["hooks"],
    ["ops"],
    ["autodiff", "amp"],
    ["nn", "optim", "data"],
    ["amp_frontend"],
    ["io"],
    ["models"],
    ["train"],
    ["distributed"],
    ["umbrella"],
]

# include/mixgrad/<name>.hpp at top level: the layer each belongs to.
PUBLIC_TOP = {
    "allocator": "core", "amp_step": "core", "device": "core", "dtype": "core",
    "error": "core", "half": "core", "runtime": "core", "shape": "core",
    "state_dict": "core", "storage": "core", "tensor": "core",
    "cpu": "backend", "cuda": "backend",
    "functional": "ops",
    "nn": "nn", "optim": "optim", "data": "data", "distributed": "distributed",
    "mixgrad": "umbrella",
}

# Files in a folder whose layer they are not: apex's front end (amp::initialize,
# amp::scale_loss) and MegEngine's amp::convert_module_format sit in amp/,
# where their users look for them, but are built on nn and optim.
FILE_LAYER = {
    "include/mixgrad/amp/convert_format.hpp": "amp_frontend",
    "include/mixgrad/amp/initialize.hpp": "amp_frontend",
    "include/mixgrad/amp/scale_loss.hpp": "amp_frontend",
    "src/amp/frontend_state.hpp": "amp_frontend",
    "src/amp/initialize.cpp": "amp_frontend",
    "src/amp/scale_loss.cpp": "amp_frontend",
}

SOURCE_SUFFIXES = (".hpp", ".cpp", ".cu", ".cuh", ".h", ".def", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
LEVEL_OF = {layer: i for i, level in enumerate(LEVELS) for layer in level}


def layer_of(rel):
    """The layer of a path relative to the root, or None outside the library."""
    if rel in FILE_LAYER:
        return FILE_LAYER[rel]
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "mixgrad"]:
        if len(parts) > 3:
            return parts[2]
        name = parts[2].rsplit(".", 1)[0]
        if name not in PUBLIC_TOP:
            raise SystemExit(f"check_layers: {rel} has no layer; add it to PUBLIC_TOP")
        return PUBLIC_TOP[name]
    return None


def target_of(root, included):
    """The path (relative to root) an include names, when it is the library's."""
    if included.startswith("mixgrad/"):
        return "include/" + included
    if os.path.exists(os.path.join(root, "src", included)):
        return "src/" + included
    return None


def edges(root):
    for top in ("src", "include/mixgrad"):
        for directory, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(directory, name), root)
                source = layer_of(rel)
                if source is None:
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        target = m and target_of(root, m.group(1))
                        if target and layer_of(target) != source:
                            yield rel, number, source, layer_of(target), m.group(1)


def main(argv):
    root = argv[1] if len(argv) > 1 and not argv[1].startswith("--") else os.path.join(os.path.dirname(__file__), "..", "..")
    all_edges = list(edges(root))
    unknown = sorted({layer for e in all_edges for layer in e[2:4] if layer not in LEVEL_OF})
    if unknown:
        print("check_layers: folders with no level: " + ", ".join(unknown) + " (add them to LEVELS)")
        return 1
    if "--graph" in argv:
        counts = collections.Counter((e[2], e[3]) for e in all_edges)
        for (a, b), n in sorted(counts.items()):
            print(f"{a:12s} -> {b:12s} {n}")
    upward = [e for e in all_edges if LEVEL_OF[e[3]] > LEVEL_OF[e[2]]]
    for rel, number, source, target, included in upward:
        print(f"{rel}:{number}: {source} includes \"{included}\" of {target}, a higher layer")
    folders = len({(e[2], e[3]) for e in all_edges})
    print(f"check_layers: {len(all_edges)} includes across layers ({folders} folder pairs), {len(upward)} upward")
    return 1 if upward else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
