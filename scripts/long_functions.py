#!/usr/bin/env python3
"""Lists the functions of tandem's C++ and CUDA sources longer than a limit.

usage: scripts/long_functions.py [--max-lines N] [--check] [PATH...]

A function's length is the number of lines from its header's first line to
its closing brace. GPU kernels and device functions (__global__, __device__)
are not counted: their length follows the hardware (unrolled tiles, register
staging), not the reader. Lambdas and local classes count towards the
function that holds them.

The scan is lexical: comments, string and character literals (raw strings
too) and preprocessor lines are blanked, then braces are matched. A brace at
namespace or class scope whose header ends in a parameter list (with
qualifiers, a trailing return type or a constructor's initialiser list) opens
a function body. With --check the exit status is 1 when any function is
longer than the limit, so CI can hold the line.
"""
import argparse
import os
import re
import sys

SOURCE_EXTENSIONS = (".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc")
DEFAULT_ROOTS = ["engine", "simulator", "traces", "plan_trace", "profiler", "cli", "gui", "bench", "tests"]


def blank_noncode(text):
    """Returns text with comments, literals and preprocessor lines replaced
    by spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if c == "\n":
            out.append(c)
            at_line_start = True
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() and \
                    re.match(r"[0-9a-fA-FxXbB]", text[i - 1]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
QUALIFIERS = r"(?:\s|\bconst\b|\bnoexcept\b(?:\s*\([^()]*\))?|\boverride\b|\bfinal\b|\bmutable\b|&&?|\bvolatile\b)*"
HEADER_END = re.compile(r"\)" + QUALIFIERS + r"(?:->[^{;]*)?$", re.S)
INIT_LIST = re.compile(r"\)" + QUALIFIERS + r":(?!:)", re.S)


def header_kind(header):
    """'function', 'scope' (namespace/class/enum body), 'init' (a brace of a
    constructor's initialiser list) or 'other' for the text before a brace."""
    h = header.strip()
    if not h:
        return "other"
    if h.startswith("extern") and h.endswith('"C"'):
        return "scope"
    first_paren = h.find("(")
    head = h if first_paren < 0 else h[:first_paren]
    if SCOPE_KEYWORDS.search(head) and not head.rstrip().endswith("operator"):
        return "scope"
    if HEADER_END.search(h):
        # `x = f(a) {` is not a function; `operator=(...)` is.
        if re.search(r"(?<![=!<>+\-*/%&|^])=(?!=)", head) and "operator" not in head:
            return "other"
        return "function"
    if INIT_LIST.search(h):
        # A constructor's initialiser list: the body brace follows a member's
        # ')' or '}', a member's own brace follows its name.
        if re.search(r"[\w>]\s*$", h) and not re.search(r"[)}]\s*$", h):
            return "init"
        return "function"
    if re.match(r"(?:\w+\s*::\s*)*\w+\s*$", h) and head == h and h.split()[-1] in ("try",):
        return "function"
    return "other"


def functions_in(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code = blank_noncode(text)
    results = []
    # Each open brace: (kind, line of the header start, name, is_device)
    stack = []
    seg_start = 0  # where the text before the next brace begins at this level
    pending_init_depth = 0
    i = 0
    line_of = [0] * (len(code) + 1)
    ln = 1
    for k, ch in enumerate(code):
        line_of[k] = ln
        if ch == "\n":
            ln += 1
    line_of[len(code)] = ln
    in_function = 0
    while i < len(code):
        ch = code[i]
        if ch == "{":
            header = code[seg_start:i]
            if in_function:
                stack.append(("inner", 0, "", False))
            else:
                kind = header_kind(header)
                if kind == "function":
                    stripped = header.lstrip()
                    start = seg_start + (len(header) - len(stripped))
                    # The name just before the first parenthesis (a
                    # constructor's initialisers come later).
                    first = stripped.find("(")
                    name_m = re.search(r"((?:operator\s*\S+?)|[~\w:<>]+)\s*$", stripped[:first]) if first > 0 else None
                    name = name_m.group(1).split()[-1] if name_m else "?"
                    device = bool(re.search(r"\b__global__\b|\b__device__\b", stripped)) and \
                        not re.search(r"\b__host__\b", stripped)
                    stack.append(("function", line_of[start], name, device))
                    in_function += 1
                elif kind == "init":
                    # A member's brace initialiser: the header goes on after it.
                    stack.append(("init", 0, "", False))
                    i += 1
                    continue
                else:
                    stack.append((kind, 0, "", False))
            seg_start = i + 1
        elif ch == "}":
            if stack:
                kind, start_line, name, device = stack.pop()
                if kind == "function":
                    in_function -= 1
                    if not device:
                        results.append((name, start_line, line_of[i], line_of[i] - start_line + 1))
                if kind == "init":
                    # The initialiser list goes on: keep the header open.
                    i += 1
                    continue
            seg_start = i + 1
        elif ch == ";" and not in_function:
            # `;` ends a declaration; inside parentheses (a for header) it
            # cannot occur at namespace or class scope.
            seg_start = i + 1
        elif ch in ":" and not in_function:
            # `public:` and the like end a segment too.
            m = re.search(r"\b(public|private|protected|signals|slots)\s*$", code[seg_start:i])
            if m and (i + 1 >= len(code) or code[i + 1] != ":"):
                seg_start = i + 1
        i += 1
    return results


def source_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "build")
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTENSIONS):
                    yield os.path.join(dirpath, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: the source folders)")
    parser.add_argument("--max-lines", type=int, default=150, help="the longest a function may be (default 150)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a function is longer than --max-lines")
    parser.add_argument("--top", type=int, default=0, help="also list the N longest functions")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = args.paths or [os.path.join(root, d) for d in DEFAULT_ROOTS if os.path.isdir(os.path.join(root, d))]
    found = []
    for path in source_files(roots):
        for name, start, end, lines in functions_in(path):
            found.append((lines, os.path.relpath(path, root), start, name))
    found.sort(key=lambda r: (-r[0], r[1], r[2]))
    over = [r for r in found if r[0] > args.max_lines]
    for lines, path, start, name in over:
        print(f"{path}:{start}: {name}: {lines} lines (limit {args.max_lines})")
    if args.top:
        for lines, path, start, name in found[: args.top]:
            print(f"  {lines:5d}  {path}:{start}  {name}")
    print(f"{len(found)} functions scanned; {len(over)} longer than {args.max_lines} lines")
    return 1 if (args.check and over) else 0


if __name__ == "__main__":
    sys.exit(main())
