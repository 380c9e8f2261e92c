#!/usr/bin/env python3
"""Checks tandem's layering against the map in docs/architecture.md.

usage: scripts/check_layers.py [--root DIR] [--map FILE] [--link-graph FILE]

The map is the table under the heading "## Libraries and arrows" of
docs/architecture.md: one row per library or program, with the folders it
owns and the libraries it may depend on. This script holds no list of its
own, so the document and the check cannot drift.

Two checks:
1. Includes. Every `#include "folder/..."` of a file in a mapped folder
   names a header of the same library or of a library reachable through its
   arrows. A folder belongs to the row with the longest matching prefix
   (engine/cuda/ to tandem_engine_cuda, engine/plan/ to tandem_engine).
2. Links (with --link-graph, the file the build writes: one line
   "target: dep dep ..." per tandem target, from target_link_libraries).
   Each built target links exactly the arrows of its row whose libraries are
   built here, and no other tandem library. A target the map does not name
   is an error too, so a new library has to be drawn before it builds.

Exit status 0 when both hold, 1 with one line per violation
("FILE:LINE: ..." for includes) otherwise, 2 on a malformed map.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".hpp")


class MapError(Exception):
    pass


def read_map(path):
    """Returns {name: {"folders": [...], "deps": [...], "kind": ...}} from
    the table under '## Libraries and arrows'."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "## Libraries and arrows")
    except StopIteration:
        raise MapError(f"{path}: no '## Libraries and arrows' section")
    rows = {}
    header = None
    for n, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            expected = ["target", "kind", "folders", "depends on"]
            if header[:4] != expected:
                raise MapError(f"{path}:{n}: the table's columns must be {' | '.join(expected)}")
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        if len(cells) < 4:
            raise MapError(f"{path}:{n}: a row needs four cells")
        name = cells[0].strip("`")
        folders = re.findall(r"`([^`]+(?:/|\.[A-Za-z]+))`", cells[2])
        deps = re.findall(r"`([^`]+)`", cells[3])
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", name) or not folders:
            raise MapError(f"{path}:{n}: a row names a target and at least one folder (`dir/`) or file")
        if name in rows:
            raise MapError(f"{path}:{n}: {name} appears twice")
        rows[name] = {"folders": folders, "deps": deps, "kind": cells[1], "line": n}
    if not rows:
        raise MapError(f"{path}: the '## Libraries and arrows' table is empty")
    for name, row in rows.items():
        for d in row["deps"]:
            if d not in rows:
                raise MapError(f"{path}:{row['line']}: {name} depends on {d}, which has no row")
    return rows


def closure(rows, name):
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        for d in rows[n]["deps"]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def owner_of(folder_index, path):
    """The row owning a repository-relative path, by longest folder prefix."""
    best = None
    for folder, name in folder_index:
        if path.startswith(folder) and (best is None or len(folder) > len(best[0])):
            best = (folder, name)
    return best[1] if best else None


def check_includes(root, rows):
    folder_index = [(f, name) for name, row in rows.items() for f in row["folders"]]
    allowed = {name: closure(rows, name) | {name} for name in rows}
    problems = []
    checked = 0
    seen = set()
    for folder in sorted({f for f, _ in folder_index}):
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for fname in sorted(filenames):
                if not fname.endswith(SOURCE_EXTENSIONS):
                    continue
                full = os.path.join(dirpath, fname)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                if rel in seen:
                    continue
                seen.add(rel)
                me = owner_of(folder_index, rel)
                checked += 1
                with open(full, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = owner_of(folder_index, m.group(1))
                        if target is None or target in allowed[me]:
                            continue
                        problems.append(f"{rel}:{n}: {me} includes {m.group(1)} of {target}, "
                                        f"but {me} may depend on: {', '.join(sorted(allowed[me] - {me})) or 'nothing'} "
                                        f"(docs/architecture.md)")
    return problems, checked


def read_link_graph(path):
    graph = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if ":" not in line:
                raise MapError(f"{path}:{n}: expected 'target: deps...'")
            target, deps = line.split(":", 1)
            graph[target.strip()] = set(deps.split())
    return graph


def check_links(rows, graph):
    problems = []
    for target, deps in sorted(graph.items()):
        if target not in rows:
            problems.append(f"link graph: {target} is built but has no row in docs/architecture.md")
            continue
        built_deps = {d for d in deps if d in rows or d.startswith("tandem")}
        drawn = {d for d in rows[target]["deps"] if d in graph}
        for d in sorted(built_deps - set(rows[target]["deps"])):
            problems.append(f"link graph: {target} links {d}, an arrow docs/architecture.md does not draw")
        for d in sorted(drawn - built_deps):
            problems.append(f"link graph: docs/architecture.md draws {target} -> {d}, but {target} does not link it")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--root", default=here, help="repository root (default: this script's)")
    parser.add_argument("--map", help="the architecture document (default: ROOT/docs/architecture.md)")
    parser.add_argument("--link-graph", help="the link graph the build writes (tandem_link_graph.txt)")
    args = parser.parse_args()
    doc = args.map or os.path.join(args.root, "docs", "architecture.md")
    try:
        rows = read_map(doc)
        graph = read_link_graph(args.link_graph) if args.link_graph else None
    except (MapError, OSError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    problems, checked = check_includes(args.root, rows)
    if graph is not None:
        problems += check_links(rows, graph)
    for p in problems:
        print(p)
    links = f", {len(graph)} built targets' links" if graph is not None else ""
    print(f"check_layers: {len(rows)} targets, {checked} files' includes{links}: "
          f"{len(problems)} violation{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
