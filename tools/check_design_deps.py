#!/usr/bin/env python3
"""Checks docs/DESIGN.md's folder table against the includes.

Each row of the table under "## Folders" names one or more folders (first column) and the
folders whose headers they include (last column; names that are not folders of the tree, such
as protobuf or yaml-cpp, are ignored). A folder's units are its top-level folder, except under
transport/ and codec/, whose sub-folders are units of their own (transport/reading, codec/cuda).
`#include "hoist/..."` (include/hoist/, the public headers) is allowed everywhere and not listed.

Usage: check_design_deps.py [ROOT]   (default: the repository this script is in). Prints one
line per difference and exits 1 when there is one, 0 otherwise. python3 standard library only.
"""
import os
import re
import sys

SPLIT = ("transport", "codec")  # folders whose sub-folders are units
SKIP = {"tests", "bench", "build", ".git", "cmake", "docs"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CELL = re.compile(r"`([a-z_]+(?:/[a-z_]+)*)/`")


def unit_of(path):
    """The unit a repository path belongs to ('transport/reading', 'rank', 'include')."""
    parts = path.split("/")
    if parts[0] in SPLIT and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def table(design):
    """{unit: set of units} from DESIGN.md's folder table."""
    text = open(design, encoding="utf-8").read()
    start = text.index("## Folders")
    end = text.index("\n## ", start + 1)
    rows = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("| `"):
            continue
        deps = {d.strip() for d in cells[2].split(",") if d.strip()}
        for folder in CELL.findall(cells[0]):
            if folder != "include/hoist":
                rows[folder] = deps
    return rows


def includes(root, units):
    """{unit: set of units it includes}, for the units that have sources."""
    found = {}
    for top in sorted(os.listdir(root)):
        if (top in SKIP or top.startswith((".", "build"))
                or not os.path.isdir(os.path.join(root, top))):
            continue
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in names:
                if not name.endswith((".cc", ".h", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                unit = unit_of(path)
                deps = found.setdefault(unit, set())
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for header in INCLUDE.findall(f.read()):
                        other = unit_of(header)
                        if "/" in header and other != unit and other in units:
                            deps.add(other)
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = table(os.path.join(root, "docs", "DESIGN.md"))
    units = set(rows)
    problems = []
    for unit, deps in sorted(includes(root, units | {"hoist"}).items()):
        deps.discard("hoist")
        if unit not in rows:
            if deps:
                problems.append(f"{unit}/: not in docs/DESIGN.md's folder table")
            continue
        listed = rows[unit] & units
        for extra in sorted(deps - listed):
            problems.append(f"{unit}/ includes {extra}/ but the table does not list it")
        for stale in sorted(listed - deps):
            problems.append(f"{unit}/: the table lists {stale}/ but no include uses it")
    for p in problems:
        print("check_design_deps: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
