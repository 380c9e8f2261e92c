#!/usr/bin/env python3
"""Mutation fuzzing of every input a user hands the `tandem` CLI.

Each case takes a real seed input (a job YAML, a topology or calibration
YAML, `nvidia-smi` text, a PyTorch profiler JSON, a trace database), mutates
it, runs the command that reads it and checks what users rely on:

  crash    the process died on a signal, hit an uncaught exception
           ("terminate called"), or a sanitizer reported an error
  hang     it ran past --timeout seconds
  silent   it failed (non-zero exit) without a message on stderr
  partial  it failed and left its --out/--json/--chrome file behind
  slow     it succeeded but took longer than --slow seconds

A failed run with a message and no output file ("refused") is the expected
outcome for a bad input; a successful run ("ok") is fine too (many
mutations stay valid). The summary counts every outcome per target.
Failing cases are copied to --keep (input, command, stderr) so they can be
replayed. Prints one JSON line per finding and a summary line at the end;
exits 1 when there was any finding.

  scripts/fuzz_inputs.py --tandem build/cli/tandem [--cases N] [--seed S]
      [--targets job,topology,...] [--timeout S] [--keep DIR]

Build with -fsanitize=address,undefined to catch memory errors as crashes.
"""
import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Values that tend to break number and string handling.
INTERESTING = [
    "0", "-1", "1", "-0", "2", "7", "3.5", "-2.5", "1e308", "-1e308", "1e-320", "1e400",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616",
    "2147483647", "2147483648", "4294967296", "65536", "1000000", "100000000",
    "nan", ".nan", "inf", ".inf", "-.inf", "0x10", "1_000", "true", "false", "null", "~", "''",
    '""', "[]", "{}", "[1, 2]", "{a: 1}", "abc", "x" * 5000, "é", "\\u0000", "- 1",
]


def mutate_text(text, rng):
    """One to three text mutations, most of them on `key: value` lines."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if not lines:
            lines = [""]
        i = rng.randrange(len(lines))
        line = lines[i]
        if op < 0.45 and ":" in line:
            key, _, _ = line.partition(":")
            lines[i] = key + ": " + rng.choice(INTERESTING)
        elif op < 0.55:
            del lines[i]
        elif op < 0.62:
            lines.insert(i, line)
        elif op < 0.70:
            lines[i] = (" " * rng.choice([1, 2, 4])) + line if rng.random() < 0.5 else line.lstrip()
        elif op < 0.78:
            # Replace one number in the line by an interesting one.
            toks = line.split()
            nums = [k for k, t in enumerate(toks) if any(c.isdigit() for c in t)]
            if nums:
                k = rng.choice(nums)
                toks[k] = rng.choice(INTERESTING)
                lines[i] = " ".join(toks)
        elif op < 0.86:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            data = "\n".join(lines)
            if not data:
                continue
            pos = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.4:
                data = data[:pos]  # truncated file
            elif choice < 0.7:
                data = data[:pos] + chr(rng.randrange(1, 0x2FF)) + data[pos + 1:]
            else:
                data = data[:pos] + rng.choice(["\t", "\0", "'", '"', "{", "[", "&a", "*a", "!!binary "]) + data[pos:]
            lines = data.split("\n")
    return "\n".join(lines)


def mutate_json(text, rng):
    """Structure-aware JSON mutation (a node replaced, deleted or doubled), or a text one."""
    if rng.random() < 0.3:
        return mutate_text(text, rng)
    try:
        doc = json.loads(text)
    except ValueError:
        return mutate_text(text, rng)
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            for k in list(node):
                nodes.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for k in range(len(node)):
                nodes.append((node, k))
                walk(node[k])

    walk(doc)
    for _ in range(rng.randint(1, 4)):
        if not nodes:
            break
        parent, key = rng.choice(nodes)
        try:
            parent[key]
        except (KeyError, IndexError):
            continue
        op = rng.random()
        if op < 0.6:
            parent[key] = rng.choice([0, -1, 1, 2**63, -(2**63), 1e308, -1e308, 0.5, "", "x", None, True, [], {},
                                      [1, 2], {"a": 1}, 1e-9, 9007199254740993])
        elif op < 0.8 and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, list):
            parent.append(parent[key])
    return json.dumps(doc)


SQL_VALUES = [None, 0, -1, 1, 2**62, -(2**62), 1.5e300, -1e300, float("nan"), "", "x", "🙂", b"\x00\x01"]


def mutate_db(path, rng):
    """Random SQL damage to a copy of a trace database: values, rows, tables."""
    con = sqlite3.connect(path)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for _ in range(rng.randint(1, 4)):
        if not tables:
            break
        t = rng.choice(tables)
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        op = rng.random()
        try:
            if op < 0.65 and cols:
                c = rng.choice(cols)
                v = rng.choice(SQL_VALUES)
                if rng.random() < 0.5:
                    con.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE rowid IN '
                                f'(SELECT rowid FROM "{t}" ORDER BY random() LIMIT 3)', (v,))
                else:
                    con.execute(f'UPDATE "{t}" SET "{c}" = ?', (v,))
            elif op < 0.85:
                con.execute(f'DELETE FROM "{t}" WHERE rowid IN (SELECT rowid FROM "{t}" ORDER BY random() LIMIT 5)')
            elif op < 0.93:
                con.execute(f'DELETE FROM "{t}"')
            else:
                con.execute(f'DROP TABLE "{t}"')
                tables.remove(t)
        except sqlite3.Error:
            pass
    con.commit()
    con.close()
    if rng.random() < 0.1:  # raw corruption of the file itself
        with open(path, "r+b") as f:
            size = os.path.getsize(path)
            for _ in range(rng.randint(1, 16)):
                f.seek(rng.randrange(size))
                f.write(bytes([rng.randrange(256)]))


def seed_path(*parts):
    return os.path.join(ROOT, *parts)


def nsys_seed(work):
    """The Nsight Systems export the tests build (tests/traces/nsys_fixture.h), as a file."""
    path = os.path.join(work, "nsys-seed.sqlite")
    if not os.path.exists(path):
        with open(seed_path("tests/traces/nsys_fixture.h")) as f:
            header = f.read()
        start = header.index('R"SQL(') + len('R"SQL(')
        con = sqlite3.connect(path)
        con.executescript(header[start:header.index(')SQL"', start)])
        con.commit()
        con.close()
    return path


# Each target: seed files, how to mutate, and the command (with {in} and {out}).
TARGETS = {
    "job": dict(seeds=["resources/jobs/gpt2-tiny.yaml", "resources/jobs/gpt2-124m-dp8.yaml",
                       "resources/jobs/gpt2-350m.yaml", "resources/jobs/llama-124m.yaml"],
                kind="text", suffix=".yaml",
                cmds=[["plan", "{in}", "--json", "{out}"],
                      ["simulate", "{in}", "--topology", "h200x2-nv18", "--out", "{out}"]]),
    "topology": dict(seeds=["resources/topologies/h200x2-nv18.yaml", "resources/topologies/dgx-h100.yaml",
                            "resources/topologies/pcie-4gpu.yaml", "resources/topologies/hgx-a100.yaml"],
                     kind="text", suffix=".yaml",
                     cmds=[["topo", "show", "{in}", "--json"],
                           ["simulate", seed_path("resources/jobs/gpt2-tiny.yaml"), "--topology", "{in}",
                            "--out", "{out}"],
                           ["plan", seed_path("resources/jobs/gpt2-tiny.yaml"), "--fit", "{in}"]]),
    "calibration": dict(seeds=["resources/calibration/h200x2-nv18.yaml"], kind="text", suffix=".yaml",
                        cmds=[["simulate", seed_path("resources/jobs/gpt2-tiny.yaml"), "--topology", "h200x2-nv18",
                               "--calibration", "{in}", "--out", "{out}"],
                              ["calibrate", seed_path("tests/traces/fixtures/real-tiny-h200.sqlite"),
                               "--multi-rank-from", "{in}", "--out", "{out}"]]),
    "nvidia-smi": dict(seeds=["tests/sim/fixtures/h200x2-topo-m.txt", "tests/sim/fixtures/dgx8-topo-m.txt",
                              "tests/sim/fixtures/pcie4-topo-m.txt"],
                       kind="text", suffix=".txt",
                       # The matrix alone does not name the GPUs, so one command says which.
                       cmds=[["topo", "import", "--nvidia-smi", "{in}", "--model", "H200", "--out", "{out}"],
                             ["topo", "import", "--nvidia-smi", "{in}", "--nvlink", "{pair}", "--out", "{out}"]]),
    "nvlink": dict(seeds=["tests/sim/fixtures/h200x2-nvlink-s.txt", "tests/sim/fixtures/dgx8-nvlink-s.txt"],
                   kind="text", suffix=".txt",
                   cmds=[["topo", "import", "--nvidia-smi", "{pair}", "--nvlink", "{in}", "--out", "{out}"]]),
    "kineto": dict(seeds=["tests/traces/fixtures/kineto_small.json"], kind="json", suffix=".json",
                   cmds=[["import", "{in}", "--out", "{out}"]]),
    "nsys": dict(seeds=["nsys"], kind="db", suffix=".sqlite",
                 cmds=[["import", "{in}", "--out", "{out}"], ["import", "{in}", "--format", "nsys", "--out", "{out}"]]),
    "trace-db": dict(seeds=["tests/traces/fixtures/real-tiny-h200.sqlite", "tests/traces/fixtures/real-dp2-h200.sqlite"],
                     kind="db", suffix=".sqlite",
                     cmds=[["report", "{in}", "--json"],
                           ["export", "{in}", "--chrome", "{out}"],
                           ["compare", "{in}"],
                           ["calibrate", "{in}", "--out", "{out}"],
                           ["merge", "{in}", "{in}", "--out", "{out}"]]),
}
# The other half of an `nvidia-smi topo -m` / `nvidia-smi nvlink -s` pair ({pair} in a command).
PAIRS = {"h200x2-nvlink-s.txt": "h200x2-topo-m.txt", "dgx8-nvlink-s.txt": "dgx8-topo-m.txt",
         "h200x2-topo-m.txt": "h200x2-nvlink-s.txt", "dgx8-topo-m.txt": "dgx8-nvlink-s.txt",
         "pcie4-topo-m.txt": "h200x2-nvlink-s.txt"}


def run_case(tandem, target, case_in, out, cmd, timeout, seed_file):
    pair = seed_path("tests/sim/fixtures", PAIRS.get(os.path.basename(seed_file), "h200x2-topo-m.txt"))
    argv = [tandem] + [a.replace("{in}", case_in).replace("{out}", out).replace("{pair}", pair) for a in cmd]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", UBSAN_OPTIONS="print_stacktrace=1")
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return "hang", argv, b"", time.monotonic() - t0
    wall = time.monotonic() - t0
    err = p.stderr
    bad = b"terminate called" in err or b"AddressSanitizer" in err or b"runtime error:" in err
    if p.returncode < 0 or p.returncode >= 128 or bad:
        return "crash", argv, err, wall
    if p.returncode != 0:
        if not err.strip():
            return "silent", argv, p.stdout, wall
        if os.path.exists(out) and out != case_in:
            return "partial", argv, err, wall
        return "refused", argv, err, wall
    return "ok", argv, err, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tandem", required=True, help="the tandem binary")
    ap.add_argument("--cases", type=int, default=200, help="cases per target (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: " + ",".join(TARGETS))
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    ap.add_argument("--slow", type=float, default=10.0, help="seconds after which a success counts as slow")
    ap.add_argument("--keep", default="", help="folder to copy failing cases to")
    a = ap.parse_args()
    if not os.access(a.tandem, os.X_OK):
        sys.exit(f"fuzz_inputs: {a.tandem}: not an executable")
    targets = [t for t in a.targets.split(",") if t]
    for t in targets:
        if t not in TARGETS:
            sys.exit(f"fuzz_inputs: unknown target '{t}' (one of {', '.join(TARGETS)})")
    rng = random.Random(a.seed)
    findings = 0
    counts = {}
    work = tempfile.mkdtemp(prefix="tandem-fuzz-")
    try:
        for t in targets:
            spec = TARGETS[t]
            for n in range(a.cases):
                seed = spec["seeds"][n % len(spec["seeds"])]
                seed_file = nsys_seed(work) if seed == "nsys" else seed_path(seed)
                case_in = os.path.join(work, f"case{spec['suffix']}")
                if spec["kind"] == "db":
                    shutil.copyfile(seed_file, case_in)
                    mutate_db(case_in, rng)
                else:
                    with open(seed_file, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    text = mutate_json(text, rng) if spec["kind"] == "json" else mutate_text(text, rng)
                    with open(case_in, "w", encoding="utf-8", errors="surrogatepass") as f:
                        f.write(text)
                cmd = spec["cmds"][n % len(spec["cmds"])]
                out = os.path.join(work, "out" + (".json" if "--chrome" in cmd or cmd[0] == "plan" else
                                                   ".yaml" if cmd[0] in ("calibrate", "topo") else ".sqlite"))
                if os.path.exists(out):
                    os.remove(out)
                verdict, argv, err, wall = run_case(a.tandem, t, case_in, out, cmd, a.timeout, seed_file)
                if verdict == "ok" and wall > a.slow:
                    verdict = "slow"
                counts[(t, verdict)] = counts.get((t, verdict), 0) + 1
                if verdict in ("ok", "refused"):
                    continue
                findings += 1
                tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
                print(json.dumps(dict(target=t, case=n, verdict=verdict, wall_s=round(wall, 2),
                                      command=" ".join(argv[1:2] + [os.path.basename(x) for x in argv[2:]]),
                                      stderr_tail=tail)), flush=True)
                if a.keep:
                    dst = os.path.join(a.keep, f"{t}-{n}-{verdict}")
                    os.makedirs(dst, exist_ok=True)
                    shutil.copyfile(case_in, os.path.join(dst, "input" + spec["suffix"]))
                    with open(os.path.join(dst, "command"), "w") as f:
                        f.write(" ".join(argv) + "\n")
                    with open(os.path.join(dst, "stderr"), "wb") as f:
                        f.write(err)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {f"{t}.{v}": c for (t, v), c in sorted(counts.items())}
    print(json.dumps(dict(summary=summary, findings=findings, cases_per_target=a.cases, seed=a.seed)), flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
