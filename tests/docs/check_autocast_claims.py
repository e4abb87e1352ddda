#!/usr/bin/env python3
"""Every autocast claim in an op header agrees with the op table
(meson test 'autocast_claims').

usage: check_autocast_claims.py ROOT

The op table (src/core/op_table.def and src/core/unary_ops.def) gives each op
an autocast policy per device type: low, high (float32), promote (the widest
floating input) or keep (the input's dtype). A comment in
include/mixgrad/ops/*.hpp that says how autocast runs an op repeats that
policy, and this check reads it back:

- a claim is a sentence of a comment that mentions autocast and, in one of
  its clauses (split at ',' and ';'), a precision: "low precision" (low),
  "float32" / "high precision" (high), "wider" / "promoted" (promote),
  "the input's dtype" / "unchanged" / "leave them alone" (keep). A clause
  naming "CPU" or "CUDA" speaks of that device; one naming neither, of
  both. Clauses about what the kernel computes inside ("statistics",
  "accumulated") or outside autocast ("otherwise") are not claims;
- the ops a claim is about: the functions the comment documents (the
  `Tensor name(` declarations right after it; for a comment not followed by
  one, every op the header declares), by their op-table name (ALIASES maps
  the few public names that differ); where none is in the op table, the ops
  the sentence names.

A claim that disagrees with the table, or whose ops cannot be found, is
printed as FILE:LINE with the table's policies; the exit status is then 1.
Fix the comment, or drop it: docs/amp.md's policy table is the full list
(tests/autocast/test_op_table.cpp checks it). Python 3 standard library only;
tests/docs/test_check_autocast_claims.py shows the check failing.
"""
import os
import re
import sys

# Public names whose op-table rows have other names (interpolate runs the
# upsample_* op of its mode).
ALIASES = {
    "upsample_bicubic2d": ["upsample_bicubic"],
    "interpolate": ["upsample_nearest", "upsample_bilinear", "upsample_bicubic"],
}

POLICIES = [
    ("low", re.compile(r"low[- ]precision", re.I)),
    ("high", re.compile(r"float32|high precision", re.I)),
    ("promote", re.compile(r"wider|promot", re.I)),
    ("keep", re.compile(r"input'?s'? dtype|inputs' dtype|unchanged|leaves? (?:them|it) alone", re.I)),
]
NOT_A_CLAIM = re.compile(r"statistic|accumulat|otherwise", re.I)
DECL = re.compile(r"^\s*(?:\[\[nodiscard\]\]\s*)?(?:inline\s+)?Tensor\s+(\w+)\s*\(")
ROW = re.compile(r"^MIXGRAD_(?:UNARY_)?OP\(\s*(\w+)\s*,\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")


def op_table(root):
    table = {}
    for name in ("op_table.def", "unary_ops.def"):
        with open(os.path.join(root, "src/core", name), encoding="utf-8") as f:
            for line in f:
                m = ROW.match(line.strip())
                if m:
                    table[m.group(1)] = {"cpu": m.group(2), "cuda": m.group(3)}
    return table


def comment_blocks(lines):
    """(first line, text, documented names or None) of each comment block."""
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("//"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].lstrip().startswith("//"):
            j += 1
        text = " ".join(l.strip().lstrip("/").strip() for l in lines[i:j])
        names = []
        k = j
        while k < len(lines) and lines[k].strip() and not lines[k].lstrip().startswith("//"):
            m = DECL.match(lines[k])
            if m:
                names.append(m.group(1))
            k += 1
        yield i + 1, text, (names or None)
        i = j


def claims(sentence):
    """[(policy, devices)] stated by one sentence."""
    out = []
    for clause in re.split(r"[,;]", sentence):
        if NOT_A_CLAIM.search(clause):
            continue
        kinds = [p for p, rx in POLICIES if rx.search(clause)]
        if not kinds:
            continue
        devices = [d for d, w in (("cpu", "CPU"), ("cuda", "CUDA")) if w in clause] or ["cpu", "cuda"]
        out.append((kinds, devices, clause.strip()))
    return out


def check_file(root, path, table):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    declared = [m.group(1) for l in lines for m in [DECL.match(l)] if m]
    problems, count = [], 0
    for line, text, names in comment_blocks(lines):
        for sentence in re.split(r"(?<=\.)\s+", text):
            if "autocast" not in sentence.lower():
                continue
            stated = claims(sentence)
            if not stated:
                continue
            ops = [o for n in (names or declared) for o in ALIASES.get(n, [n])]
            ops = [o for o in dict.fromkeys(ops) if o in table]
            if not ops:
                ops = [o for o in table if re.search(r"\b" + re.escape(o) + r"\b", sentence)]
            if not ops:
                problems.append(f"{path}:{line}: an autocast claim about no op of the op table: '{sentence}'")
                continue
            for kinds, devices, clause in stated:
                count += 1
                if len(kinds) > 1:
                    problems.append(f"{path}:{line}: '{clause}' states {' and '.join(kinds)} at once")
                    continue
                for op in ops:
                    for d in devices:
                        if table[op][d] != kinds[0]:
                            problems.append(
                                f"{path}:{line}: says {op} is '{kinds[0]}' on {d.upper()} under autocast "
                                f"('{clause}'), the op table says '{table[op][d]}' "
                                f"(CPU {table[op]['cpu']}, CUDA {table[op]['cuda']})")
    return problems, count


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: check_autocast_claims.py ROOT")
    root = argv[1]
    table = op_table(root)
    if not table:
        sys.exit("check_autocast_claims: no rows read from src/core/op_table.def")
    problems, count = [], 0
    ops_dir = os.path.join(root, "include/mixgrad/ops")
    for name in sorted(os.listdir(ops_dir)):
        if name.endswith(".hpp"):
            p, c = check_file(root, "include/mixgrad/ops/" + name, table)
            problems += p
            count += c
    for p in problems:
        print(p)
    print(f"autocast claims: {count} checked against {len(table)} op-table rows, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
