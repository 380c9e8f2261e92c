#!/usr/bin/env python3
"""Tests of the repository checks: scripts/check_layers.py and
scripts/long_functions.py must pass a clean tree and fail a tree that breaks
their rule, naming the place. Each case builds a small tree in a temporary
folder, so the checks are shown to be able to fail."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_LAYERS = os.path.join(ROOT, "scripts", "check_layers.py")
LONG_FUNCTIONS = os.path.join(ROOT, "scripts", "long_functions.py")

MAP = textwrap.dedent("""\
    # Architecture
    ## Libraries and arrows
    | target | kind | folders | depends on |
    |---|---|---|---|
    | `lib_base` | library | `base/` | |
    | `lib_store` | library | `store/` | `lib_base` |
    | `lib_plan` | library | `plan/` | `lib_base` |
    | `lib_plan_cpu` | library | `plan/cpu/` | `lib_plan` |
    | `tool` | program | `cli/` | `lib_store`, `lib_plan` |
    ## Elsewhere
    """)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(*args):
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class CheckLayersTest(unittest.TestCase):
    def tree(self, extra=None, graph=None):
        d = tempfile.mkdtemp()
        write(d, "docs/architecture.md", MAP)
        write(d, "base/kinds.h", "#pragma once\n")
        write(d, "store/writer.h", '#include "base/kinds.h"\n')
        write(d, "plan/plan.h", '#include "base/kinds.h"\n')
        write(d, "plan/cpu/exec.cpp", '#include "plan/plan.h"\n#include "base/kinds.h"  // through lib_plan\n')
        write(d, "cli/main.cpp", '#include "store/writer.h"\n#include "plan/plan.h"\n#include <vector>\n')
        for rel, text in (extra or {}).items():
            write(d, rel, text)
        args = [CHECK_LAYERS, "--root", d]
        if graph is not None:
            write(d, "graph.txt", graph)
            args += ["--link-graph", os.path.join(d, "graph.txt")]
        return run(*args)

    GOOD_GRAPH = "lib_base: \nlib_store: lib_base\nlib_plan: lib_base\nlib_plan_cpu: lib_plan\ntool: lib_plan lib_store\n"

    def test_clean_tree_passes(self):
        rc, out = self.tree(graph=self.GOOD_GRAPH)
        self.assertEqual(rc, 0, out)
        self.assertIn("0 violations", out)

    def test_forbidden_include_fails_with_file_and_line(self):
        rc, out = self.tree({"store/reader.cpp": '#include "store/writer.h"\n#include "plan/plan.h"\n'})
        self.assertEqual(rc, 1, out)
        self.assertIn("store/reader.cpp:2: lib_store includes plan/plan.h of lib_plan", out)

    def test_deeper_folder_is_its_own_library(self):
        # plan/ may not reach into plan/cpu/: the longest prefix owns the file.
        rc, out = self.tree({"plan/lower.cpp": '#include "plan/cpu/exec.h"\n', "plan/cpu/exec.h": ""})
        self.assertEqual(rc, 1, out)
        self.assertIn("plan/lower.cpp:1: lib_plan includes plan/cpu/exec.h of lib_plan_cpu", out)

    def test_link_not_drawn_fails(self):
        rc, out = self.tree(graph=self.GOOD_GRAPH.replace("lib_store: lib_base", "lib_store: lib_base lib_plan"))
        self.assertEqual(rc, 1, out)
        self.assertIn("lib_store links lib_plan, an arrow docs/architecture.md does not draw", out)

    def test_drawn_arrow_not_linked_fails(self):
        rc, out = self.tree(graph=self.GOOD_GRAPH.replace("tool: lib_plan lib_store", "tool: lib_plan"))
        self.assertEqual(rc, 1, out)
        self.assertIn("draws tool -> lib_store, but tool does not link it", out)

    def test_target_without_row_fails(self):
        rc, out = self.tree(graph=self.GOOD_GRAPH + "lib_new: lib_base\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("lib_new is built but has no row", out)

    def test_unbuilt_target_arrows_are_skipped(self):
        # lib_plan_cpu not built here (an optional part): its arrow from nobody is missed by nobody.
        graph = "lib_base: \nlib_store: lib_base\nlib_plan: lib_base\ntool: lib_plan lib_store\n"
        rc, out = self.tree(graph=graph)
        self.assertEqual(rc, 0, out)

    def test_malformed_map_is_refused(self):
        d = tempfile.mkdtemp()
        write(d, "docs/architecture.md", "# nothing here\n")
        rc, out = run(CHECK_LAYERS, "--root", d)
        self.assertEqual(rc, 2, out)
        self.assertIn("no '## Libraries and arrows' section", out)


class LongFunctionsTest(unittest.TestCase):
    def scan(self, text, limit=10):
        d = tempfile.mkdtemp()
        write(d, "src/a.cpp", text)
        return run(LONG_FUNCTIONS, "--check", "--max-lines", str(limit), os.path.join(d, "src"))

    def test_long_function_fails_and_is_named(self):
        body = "\n".join(f"  x += {i};" for i in range(12))
        rc, out = self.scan("namespace n {\nint f(int x) {\n" + body + "\n  return x;\n}\n}\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("a.cpp:2: f: 15 lines (limit 10)", out)

    def test_short_functions_and_kernels_pass(self):
        body = "\n".join(f"  x += {i};" for i in range(12))
        text = ("struct S {\n  int g() const { return 1; }\n};\n"
                "__global__ void k(int x) {\n" + body + "\n}\n"
                "const char* s = \"}{\";  // a brace in a string { is not code\n"
                "int h(int x) {\n  return x;\n}\n")
        rc, out = self.scan(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("2 functions scanned; 0 longer", out)  # g and h; the kernel is not counted

    def test_constructor_initialiser_braces(self):
        body = "\n".join(f"  v_ += {i};" for i in range(12))
        rc, out = self.scan("A::A(int v) : v_{v}, w_(v) {\n" + body + "\n}\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("A::A: 14 lines", out)


class StatNamesTest(unittest.TestCase):
    """Stats are declared once (traces/trackers/stats.h); producers build
    their rows from the declarations, never from a name written inline."""

    def test_no_stat_name_written_inline(self):
        import re
        inline = re.compile(r'(setStat\(\s*\{\s*(fmt::format\()?"|incrementStat\(\s*"|StatRow\s*\{\s*"|stat\.name\s*=\s*")')
        found = []
        for folder in ("engine", "simulator", "traces", "plan_trace", "profiler", "runner", "cli", "gui"):
            for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
                for f in files:
                    if not f.endswith((".cpp", ".h")) or "trackers" in dirpath:
                        continue
                    path = os.path.join(dirpath, f)
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        if inline.search(line):
                            found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
        self.assertEqual(found, [], "stat names written inline instead of traces/trackers/stats.h declarations")


if __name__ == "__main__":
    unittest.main()
