#!/usr/bin/env python3
"""The wraps of subprojects/ parse and hold what a fallback download needs.

Each subprojects/*.wrap is a copy of a WrapDB release (subprojects/README.md).
Meson reads them only when a dependency is missing from the system, so a wrap
broken by an edit would go unnoticed until then. This check needs no network:

- Meson's own parser reads every wrap (`meson subprojects foreach`);
- each is a [wrap-file] with directory, source_url, source_filename and a
  SHA-256 source_hash; a patch_url comes with patch_filename and patch_hash;
- a patch_directory exists under subprojects/packagefiles/ with a meson.build
  that declares the variables the [provide] section names;
- [provide] names at least one dependency, and each is one that a meson.build
  of the project asks for with dependency().

The archives themselves are not downloaded, so their hashes are not checked
here: they are WrapDB's, copied with the wrap.

    python3 tests/wraps/check_wraps.py ROOT [--meson MESON]   # exit 0, or 1 with the faults
"""
import configparser
import os
import re
import subprocess
import sys

HASH = re.compile(r"[0-9a-f]{64}")
DEPENDENCY = re.compile(r"""\bdependency\(\s*'([^']+)'""")


def requested_dependencies(root):
    """The names the project's meson.build files pass to dependency()."""
    names = set()
    for folder, dirs, files in os.walk(root):
        # Not the wraps' own projects, build directories or hidden folders.
        dirs[:] = [d for d in dirs if not d.startswith(".")
                   and not (folder == root and (d == "subprojects" or d.startswith("build")))]
        if "meson.build" in files:
            with open(os.path.join(folder, "meson.build")) as f:
                names.update(DEPENDENCY.findall(f.read()))
    return names


def check_wrap(root, path, requested):
    name = os.path.basename(path)
    faults = []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error as e:
        return [f"{name}: does not parse: {e}"]
    if parser.sections()[:1] != ["wrap-file"]:
        faults.append(f"{name}: the first section is {parser.sections()[:1]}, not [wrap-file]")
        return faults
    wrap = parser["wrap-file"]
    for key in ("directory", "source_url", "source_filename", "source_hash"):
        if not wrap.get(key, "").strip():
            faults.append(f"{name}: [wrap-file] has no {key}")
    if wrap.get("source_hash") and not HASH.fullmatch(wrap["source_hash"].strip()):
        faults.append(f"{name}: source_hash is not a SHA-256 (64 lowercase hex digits)")
    if "patch_url" in wrap:
        for key in ("patch_filename", "patch_hash"):
            if key not in wrap:
                faults.append(f"{name}: patch_url without {key}")
        if "patch_hash" in wrap and not HASH.fullmatch(wrap["patch_hash"].strip()):
            faults.append(f"{name}: patch_hash is not a SHA-256 (64 lowercase hex digits)")
    patch_build = None
    if "patch_directory" in wrap:
        patch_build = os.path.join(root, "subprojects", "packagefiles", wrap["patch_directory"], "meson.build")
        if not os.path.isfile(patch_build):
            faults.append(f"{name}: patch_directory {wrap['patch_directory']} has no meson.build "
                          "under subprojects/packagefiles/")
            patch_build = None

    if not parser.has_section("provide"):
        faults.append(f"{name}: no [provide] section (dependency() would not fall back to it)")
        return faults
    provided = {}
    for key, value in parser["provide"].items():
        if key == "dependency_names":
            provided.update({n.strip(): None for n in value.split(",") if n.strip()})
        else:
            provided[key] = value.strip()
    if not provided:
        faults.append(f"{name}: [provide] names no dependency")
    for dep, variable in sorted(provided.items()):
        if dep not in requested:
            faults.append(f"{name}: provides {dep}, which no meson.build asks for with dependency()")
        if variable and patch_build:
            with open(patch_build) as f:
                if not re.search(rf"^\s*{re.escape(variable)}\s*=", f.read(), re.M):
                    faults.append(f"{name}: [provide] {dep} = {variable}, which "
                                  f"{os.path.relpath(patch_build, root)} does not declare")
    return faults


def main():
    args = sys.argv[1:]
    meson = "meson"
    if "--meson" in args:
        i = args.index("--meson")
        meson = args[i + 1]
        del args[i:i + 2]
    root = os.path.abspath(args[0] if args else ".")
    folder = os.path.join(root, "subprojects")
    wraps = sorted(f for f in os.listdir(folder) if f.endswith(".wrap")) if os.path.isdir(folder) else []
    if not wraps:
        print(f"no wraps in {folder}")
        return 1

    faults = []
    # Meson's parser: the same one that reads a wrap at a fallback. A wrap not
    # downloaded yet is listed, not fetched.
    meson_cmd = meson.split() + ["subprojects", "foreach", "--sourcedir", root, "true"]
    parsed = subprocess.run(meson_cmd, capture_output=True, text=True)
    if parsed.returncode != 0:
        faults.append("meson subprojects foreach: " + (parsed.stdout + parsed.stderr).strip().splitlines()[-1])

    requested = requested_dependencies(root)
    for wrap in wraps:
        faults += check_wrap(root, os.path.join(folder, wrap), requested)
    for fault in faults:
        print(fault)
    print(f"wraps: {len(wraps)} checked ({', '.join(wraps)}), {len(faults)} faults")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
