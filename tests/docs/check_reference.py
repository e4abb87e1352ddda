#!/usr/bin/env python3
"""Checks that keep the reference pages true (meson test 'doc_reference').

usage: check_reference.py ROOT

1. Length: no reference page (docs/*.md; lab notes live in docs/notes/ and
   are not counted) is longer than MAX_LINES lines. A longer page is split
   by topic, or its measurement logs move to docs/notes/.
2. "Where is X" (docs/architecture.md): every `path`: `text` pair in that
   section names a file that exists and holds the text, and every other
   backticked path there exists. So a moved file, a renamed function or a
   dropped registration fails here, not in a reader's grep.

Each problem is printed as FILE:LINE: message; the exit status is 1 if
there is any. Python 3 standard library only. tests/docs/
test_check_reference.py shows that both checks can fail.
"""
import os
import re
import sys

MAX_LINES = 500
INDEX_PAGE = "docs/architecture.md"
INDEX_HEADING = "## Where is X"

# `path`: `text`, or a lone `path`; a path has a folder and a file suffix.
PATH = r"(?:[\w.-]+/)+[\w.-]+\.(?:hpp|cpp|cu|cuh|def|h|py|sh|md|build)"
PAIR = re.compile(r"`(" + PATH + r")`(?::\s*`([^`]+)`((?:,\s*`[^`]+`)*))?")
SYMBOL = re.compile(r"`([^`]+)`")


def page_lengths(root):
    problems = []
    docs = os.path.join(root, "docs")
    for name in sorted(os.listdir(docs)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(docs, name), encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            problems.append(f"docs/{name}:{n}: {n} lines, over the {MAX_LINES} a reference page may have; "
                            "split it by topic or move measurement logs to docs/notes/")
    return problems


def index_section(root):
    """(first line number, lines) of the "Where is X" section."""
    with open(os.path.join(root, INDEX_PAGE), encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == INDEX_HEADING)
    except StopIteration:
        return None, []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start + 1, lines[start:end]


def where_is(root):
    first, lines = index_section(root)
    if first is None:
        return [f"{INDEX_PAGE}:1: no '{INDEX_HEADING}' section"]
    problems, pairs = [], 0
    cache = {}
    for n, line in enumerate(lines, first):
        for m in PAIR.finditer(line):
            path = m.group(1)
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                problems.append(f"{INDEX_PAGE}:{n}: {path} does not exist")
                continue
            texts = [m.group(2)] + SYMBOL.findall(m.group(3) or "") if m.group(2) else []
            if path not in cache:
                with open(full, encoding="utf-8", errors="replace") as f:
                    cache[path] = f.read()
            for text in texts:
                pairs += 1
                if text not in cache[path]:
                    problems.append(f"{INDEX_PAGE}:{n}: {path} does not contain '{text}'")
    if pairs == 0:
        problems.append(f"{INDEX_PAGE}:{first}: the '{INDEX_HEADING}' section names no `path`: `text` pair")
    return problems


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    root = argv[1]
    problems = page_lengths(root) + where_is(root)
    for p in problems:
        print(p)
    print(f"reference pages: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
