#!/usr/bin/env python3
"""Compile every ```cpp block of README.md and docs/*.md (meson test 'doc_snippets').

    check_snippets.py --root SOURCE_ROOT --build BUILD_ROOT --out DIR [--jobs N]
                      [--verbose] [FILE.md ...] -- COMPILER [FLAGS...]

The documentation's examples must compile against the public headers, so an
API change that leaves a doc behind fails a test instead of a user. Each block
is compiled with -fsyntax-only (nothing is linked or run). A block that
defines `int main` is a whole program and is compiled alone, as written. Any
other block is a fragment: it goes into one translation unit per Markdown
file, after a standard preamble (<mixgrad/mixgrad.hpp>, common std headers,
`namespace mg = mixgrad; namespace F = mixgrad::F;`), inside a namespace and a
function of its own; its type and function definitions move out of the
function to that namespace. `#line` directives make every diagnostic name
the Markdown file and line.

An HTML comment right before a block (blank lines between are allowed) gives
it context, and one anywhere in a file sets defaults for the blocks after it:

    <!-- snippet: given="mg::Tensor x, y; mg::nn::Sequential net;" -->
    <!-- snippet: skip reason="why this block cannot compile" -->
    <!-- snippet-defaults: given="mg::autodiff::GradManager gm;" -->

docs/testing.md ("Documentation examples") lists every key.
"""
import argparse
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

PREAMBLE = """\
#include <mixgrad/mixgrad.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mg = mixgrad;
namespace F = mixgrad::F;
"""

# Warnings are errors, as they are what a user copying a block would see
# first (a deprecated call, a discarded [[nodiscard]] result), except the
# unused names a fragment and its context leave behind by design.
WARNING_FLAGS = ["-Werror", "-Wno-unused-variable", "-Wno-unused-parameter", "-Wno-unused-but-set-variable",
                 "-Wno-unused-local-typedefs"]

KEYS = {"skip", "reason", "given", "scope", "namespace", "include", "internal"}
SCOPES = {"auto", "function", "namespace", "file"}
DIRECTIVE = re.compile(r"<!--\s*snippet(-defaults)?\s*:(.*?)-->$", re.S)
ATTR = re.compile(r"""\s*([A-Za-z_]+)(?:\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s"']+)))?""", re.S)
FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+#-]*)")
STATEMENT_KEYWORDS = {"if", "for", "while", "switch", "return", "do", "else", "try", "catch", "case", "default",
                      "break", "continue", "goto", "throw", "delete", "new", "co_await", "co_return", "co_yield"}


class DocError(Exception):
    """A malformed directive or fence: reported like a compile failure."""


@dataclass
class Block:
    path: str            # relative to the source root, as diagnostics name it
    fence_line: int      # 1-based line of the opening fence
    lines: list          # the code, one string per line (first is fence_line + 1)
    attrs: dict = field(default_factory=dict)
    attrs_line: int = 0  # line of the directive comment (0: none)
    defaults: dict = field(default_factory=dict)
    defaults_line: int = 0
    defaults_end: int = 0

    @property
    def first_line(self):
        return self.fence_line + 1

    @property
    def last_line(self):
        return self.fence_line + len(self.lines) + 1  # the closing fence

    @property
    def where(self):
        return f"{self.path}:{self.fence_line}"

    def get(self, key, default=None):
        return self.attrs.get(key, self.defaults.get(key, default))


def parse_attrs(text, where):
    attrs = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = ATTR.match(text, pos)
        if not m or m.end() == pos:
            raise DocError(f"{where}: cannot read snippet directive at '{text[pos:pos + 30]}'")
        key = m.group(1)
        if key not in KEYS:
            raise DocError(f"{where}: unknown snippet key '{key}' (known: {', '.join(sorted(KEYS))})")
        value = next((g for g in m.group(2, 3, 4) if g is not None), True)
        if isinstance(value, str):
            value = value.replace('\\"', '"').replace("\\'", "'")
        attrs[key] = value
        pos = m.end()
    scope = attrs.get("scope", "auto")
    if scope not in SCOPES:
        raise DocError(f"{where}: scope={scope}: expected one of {', '.join(sorted(SCOPES))}")
    if "skip" in attrs and not (isinstance(attrs.get("reason"), str) and attrs["reason"].strip()):
        raise DocError(f'{where}: a skipped block needs a reason: <!-- snippet: skip reason="..." -->')
    return attrs


def extract(root, path):
    """The ```cpp blocks of one Markdown file, with their directives.

    A directive is an HTML comment that starts a line outside code blocks;
    one in a code block or in running text is an example, not a directive.
    """
    with open(os.path.join(root, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, defaults, defaults_line, defaults_end = [], {}, 0, 0
    pending = None  # (first line, last line, attrs) of a directive waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"\s*<!--\s*snippet", line):
            j = i
            while "-->" not in lines[j]:
                j += 1
                if j == len(lines):
                    raise DocError(f"{path}:{i + 1}: snippet directive never closed (-->)")
            text = "\n".join(lines[i:j + 1])
            m = DIRECTIVE.match(text.strip())
            if not m:
                raise DocError(f"{path}:{i + 1}: cannot read snippet directive (<!-- snippet: ... --> or "
                               f"<!-- snippet-defaults: ... -->)")
            attrs = parse_attrs(m.group(2), f"{path}:{i + 1}")
            if m.group(1):
                if "skip" in attrs or "reason" in attrs:
                    raise DocError(f"{path}:{i + 1}: skip is for one block: <!-- snippet: skip reason=... -->")
                defaults, defaults_line, defaults_end = attrs, i + 1, j + 1
            else:
                if pending:
                    raise DocError(f"{path}:{pending[0]}: snippet directive is not right above a ```cpp block")
                pending = (i + 1, j + 1, attrs)
            i = j + 1
            continue
        m = FENCE_OPEN.match(line)
        if m and line.lstrip().startswith(m.group(2)):
            indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*" + re.escape(fence) + r"\s*$", lines[j]):
                j += 1
            if j == len(lines):
                raise DocError(f"{path}:{i + 1}: code block never closed")
            if lang in ("cpp", "c++"):
                block = Block(path, i + 1, [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]],
                              defaults=defaults, defaults_line=defaults_line, defaults_end=defaults_end)
                if pending:
                    block.attrs_line, _, block.attrs = pending
                    pending = None
                blocks.append(block)
            i = j + 1
            continue
        if pending and line.strip():
            raise DocError(f"{path}:{pending[0]}: snippet directive is not right above a ```cpp block")
        i += 1
    if pending:
        raise DocError(f"{path}:{pending[0]}: snippet directive is not right above a ```cpp block")
    return blocks


def strip_code(line, state):
    """`line` with comments and literals blanked; state carries an open /* comment."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["comment"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["comment"] = False
            i = end + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["comment"] = True
            i += 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


FUNCTION_DEF = re.compile(r"^(?:(?:inline|static|constexpr|consteval|virtual|explicit|friend)\s+)*"
                          r"[\w:<>,*&\s]*[\w>*&]\s+[*&]*~?[\w:]+\s*\(")


def is_namespace_scope(code):
    """True when a chunk (its code, comments and literals blanked) is a definition to hoist out of the function."""
    code = code.strip()
    if re.match(r"(template\s*<|struct\s|class\s|union\s|enum\s|namespace\s+[\w:]*\s*\{|namespace\s*\{)", code):
        return True
    m = FUNCTION_DEF.match(code)
    if not m or code.split()[0] in STATEMENT_KEYWORDS or "=" in code[:m.end()]:
        return False
    # `Type name(args) ... {`: a definition; `Type name(args);` is a variable.
    depth, k = 1, m.end()
    while k < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[k], 0)
        k += 1
    rest = code[k:].strip()
    return rest == "" or rest.startswith("{") or re.match(r"(const|noexcept|override|final|->)", rest) is not None


def split_chunks(lines):
    """Top-level chunks of a fragment: (first index, last index, namespace scope?)."""
    state = {"comment": False}
    chunks, start, depth, code_so_far = [], None, 0, []
    for idx, line in enumerate(lines):
        code = strip_code(line, state)
        stripped = code.strip()
        if start is None:
            if not stripped or stripped.startswith("#"):
                continue
            start, code_so_far = idx, []
        code_so_far.append(stripped)
        for c in code:
            depth += {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}.get(c, 0)
        if depth <= 0 and stripped and stripped[-1] in ";}":
            chunks.append((start, idx, is_namespace_scope(" ".join(code_so_far))))
            start, depth = None, 0
    if start is not None:
        chunks.append((start, len(lines) - 1, is_namespace_scope(" ".join(code_so_far))))
    return chunks


def is_program(block):
    state = {"comment": False}
    return any(re.match(r"\s*int\s+main\s*\(", strip_code(l, state)) for l in block.lines)


class Source:
    """A generated translation unit whose #line directives map back to the docs."""

    def __init__(self, name):
        self.name = name
        self.lines = []

    def at(self, path, line):
        self.lines.append(f'#line {line} "{path}"')

    def generated(self):
        self.lines.append(f'#line {len(self.lines) + 2} "{self.name}"')

    def add(self, text):
        self.lines.extend(text.split("\n"))


def includes_of(block):
    extra = block.get("include")
    return [h for h in re.split(r"[\s,]+", extra) if h] if isinstance(extra, str) else []


def given_of(block):
    """(text, line) of the block's context: the file's defaults, then its own directive."""
    parts = []
    if isinstance(block.defaults.get("given"), str):
        parts.append((block.defaults["given"], block.defaults_line))
    if isinstance(block.attrs.get("given"), str):
        parts.append((block.attrs["given"], block.attrs_line))
    return parts


def fragment_source(path, blocks, out_name):
    src = Source(out_name)
    src.add(f"// Generated from {path} by tests/docs/check_snippets.py; do not edit.")
    src.add(PREAMBLE)
    for b in blocks:
        for h in includes_of(b):
            src.add(f"#include <{h}>" if not h.startswith('"') else f"#include {h}")
        for idx, line in enumerate(b.lines):
            if line.strip().startswith("#include"):
                src.at(path, b.first_line + idx)
                src.add(line)
                src.generated()
    for b in blocks:
        scope = b.get("scope", "auto")
        lines = [("" if l.strip().startswith("#include") else l) for l in b.lines]
        outer = b.get("namespace")
        name = f"doc_snippet_L{b.fence_line}"
        src.add(f"namespace {outer + '::' if isinstance(outer, str) else ''}{name} {{")
        if scope == "namespace":
            for text, line in given_of(b):
                src.at(path, line)
                src.add(text)
            src.at(path, b.first_line)
            src.add("\n".join(lines))
            src.generated()
            src.add("}")
            continue
        chunks = split_chunks(lines) if scope == "auto" else []
        body = list(lines)
        for first, last, hoist in chunks:
            if hoist:
                src.at(path, b.first_line + first)
                src.add("\n".join(lines[first:last + 1]))
                for k in range(first, last + 1):
                    body[k] = ""
        src.generated()
        # The defaults, the block's own context and the block each open a
        # scope, so each may redeclare (shadow) a name of the one before.
        src.add("[[maybe_unused]] void snippet() {")
        givens = given_of(b)
        for text, line in givens:
            src.add("{")
            src.at(path, line)
            src.add(text)
            src.generated()
        src.add("{")
        src.at(path, b.first_line)
        src.add("\n".join(body))
        src.generated()
        src.add("}" * (len(givens) + 1))
        src.add("}")
        src.add("}")
    return src


def program_source(block, out_name):
    src = Source(out_name)
    for h in includes_of(block):
        src.add(f"#include <{h}>")
    src.at(block.path, block.first_line)
    src.add("\n".join(block.lines))
    return src


@dataclass
class Unit:
    name: str
    blocks: list
    source: Source
    internal: bool


def plan(root, paths, out_dir):
    units, skipped = [], []
    for path in paths:
        stem = path.replace("/", "_").replace(".md", "")
        groups = {}
        for b in extract(root, path):
            if "skip" in b.attrs:
                skipped.append(b)
                continue
            if b.get("given") is not None and not isinstance(b.get("given"), str):
                raise DocError(f"{b.where}: given needs a value")
            internal = "internal" in b.attrs or "internal" in b.defaults
            if b.get("scope", "auto") == "file" or (b.get("scope", "auto") == "auto" and is_program(b)):
                if b.attrs.get("given"):
                    raise DocError(f"{b.where}: a whole program (it defines main) takes no given context")
                name = os.path.join(out_dir, f"{stem}_L{b.fence_line}.cpp")
                units.append(Unit(name, [b], program_source(b, name), internal))
            else:
                groups.setdefault(internal, []).append(b)
        for internal, blocks in groups.items():
            name = os.path.join(out_dir, f"{stem}{'_internal' if internal else ''}.cpp")
            units.append(Unit(name, blocks, fragment_source(path, blocks, name), internal))
    return units, skipped


def compile_unit(unit, compiler, root, build):
    with open(unit.name, "w", encoding="utf-8") as f:
        f.write("\n".join(unit.source.lines) + "\n")
    cmd = list(compiler) + WARNING_FLAGS + ["-fsyntax-only", "-I", os.path.join(root, "include")]
    if unit.internal:
        cmd += ["-I", os.path.join(root, "src"), "-I", build, "-include", "mixgrad_config.h"]
    cmd.append(unit.name)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return unit, cmd, proc.returncode, proc.stdout, time.monotonic() - t0


def blame(unit, output):
    """The blocks a compiler output points at (by the Markdown line numbers)."""
    hit = []
    for b in unit.blocks:
        pattern = re.compile(re.escape(b.path) + r":(\d+)")
        for m in pattern.finditer(output):
            n = int(m.group(1))
            if (b.attrs_line or b.fence_line) <= n <= b.last_line or b.defaults_line <= n <= b.defaults_end:
                hit.append(b)
                break
    return hit


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: check_snippets.py --root DIR --build DIR --out DIR [FILE.md ...] -- COMPILER [FLAGS...]")
    sep = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args(argv[:sep])
    compiler = argv[sep + 1:]
    root, build = os.path.abspath(args.root), os.path.abspath(args.build)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    paths = args.files or ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    try:
        units, skipped = plan(root, paths, out)
    except DocError as e:
        print(f"{e}", file=sys.stderr)
        return 1
    total = sum(len(u.blocks) for u in units)
    print(f"compiling {total} ```cpp blocks of {len(paths)} files in {len(units)} translation units "
          f"({args.jobs} at a time): {shlex.join(compiler + WARNING_FLAGS)} -fsyntax-only")
    failed, t0 = [], time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(compile_unit, u, compiler, root, build) for u in units]
        for fut in concurrent.futures.as_completed(futures):
            unit, cmd, rc, output, secs = fut.result()
            rel = os.path.relpath(unit.name, root) if unit.name.startswith(root) else unit.name
            if rc == 0:
                print(f"ok    {unit.blocks[0].path} ({len(unit.blocks)} blocks, {secs:.1f} s)")
                if output.strip() and args.verbose:
                    print(output)
                continue
            culprits = blame(unit, output) or unit.blocks
            for b in culprits:
                print(f"{b.where}: error: the ```cpp block at line {b.fence_line} does not compile "
                      f"(lines {b.first_line}-{b.last_line - 1})")
                failed.append(b)
            print(f"  generated: {rel}\n  command: {shlex.join(cmd)}")
            print(output)
    for b in skipped:
        print(f"skip  {b.where}: {b.attrs['reason']}")
    print(f"doc snippets: {total - len(failed)} compiled, {len(failed)} failed, {len(skipped)} skipped "
          f"({time.monotonic() - t0:.1f} s)")
    if failed:
        print("failed: " + ", ".join(sorted(b.where for b in failed)))
        print("Fix the doc to match the API (include/mixgrad), or give the block its context: "
              "docs/testing.md, 'Documentation examples'.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
