#!/usr/bin/env python3
"""scripts/text_tokens.py: the bytes of the texts become uint16 tokens in
order, a bad input fails in one line and leaves no file, and tandem trains
on the result (the loss falls over a few steps)."""
import argparse
import gzip
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "text_tokens.py")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.txt"), os.path.join(d, "b.txt")
        with open(a, "w", encoding="utf-8") as f:
            f.write("The quick brown fox.\n" * 400)
        with open(b, "w", encoding="utf-8") as f:
            f.write("Jumps over the lazy dog, naïvely.\n\n\n" * 400)
        out = os.path.join(d, "t.tokens")
        r = subprocess.run([sys.executable, SCRIPT, "--out", out, b, a], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"text_tokens.py failed: {r.stderr}")
        want = b""
        for p in (a, b):  # name order, each followed by a blank line
            want += open(p, "rb").read().rstrip(b"\n") + b"\n\n"
        got = open(out, "rb").read()
        tokens = bytes(v for (v,) in struct.iter_unpack("<H", got))
        if tokens != want or any(v > 255 for (v,) in struct.iter_unpack("<H", got)):
            fail("the tokens are not the texts' bytes in order")
        # Not UTF-8: one line naming the file, no output left.
        bad, bad_out = os.path.join(d, "bad.txt"), os.path.join(d, "bad.tokens")
        with open(bad, "wb") as f:
            f.write(b"ok\xff\xfe")
        r = subprocess.run([sys.executable, SCRIPT, "--out", bad_out, bad], capture_output=True, text=True)
        if r.returncode == 0 or "bad.txt: not UTF-8" not in r.stderr or os.path.exists(bad_out):
            fail(f"a non-UTF-8 file: rc {r.returncode}, stderr {r.stderr!r}, output left: {os.path.exists(bad_out)}")
        if any(n.startswith(".text_tokens.") for n in os.listdir(d)):
            fail("a temporary file was left behind")
        # --tree: every UTF-8 text file under a folder in path order, .gz
        # decompressed, the others skipped; cut at --max-tokens.
        tree = os.path.join(d, "tree")
        os.makedirs(os.path.join(tree, "pkg2"))
        os.makedirs(os.path.join(tree, "pkg1"))
        with open(os.path.join(tree, "pkg1", "README"), "w", encoding="utf-8") as f:
            f.write("first\n")
        with gzip.open(os.path.join(tree, "pkg2", "changelog.gz"), "wb") as f:
            f.write(b"second\n")
        with open(os.path.join(tree, "pkg2", "logo.png"), "wb") as f:
            f.write(b"\x89PNG\0\0")
        tree_out = os.path.join(d, "tree.tokens")
        r = subprocess.run([sys.executable, SCRIPT, "--out", tree_out, "--tree", tree], capture_output=True, text=True)
        got = bytes(v for (v,) in struct.iter_unpack("<H", open(tree_out, "rb").read())) if r.returncode == 0 else b""
        if got != b"first\n\nsecond\n\n" or "skipped 1 file that is not UTF-8" not in r.stdout:
            fail(f"--tree: rc {r.returncode}, tokens {got!r}, stdout {r.stdout!r}, stderr {r.stderr!r}")
        r = subprocess.run([sys.executable, SCRIPT, "--out", tree_out, "--tree", tree, "--max-tokens", "4"],
                           capture_output=True, text=True)
        got = bytes(v for (v,) in struct.iter_unpack("<H", open(tree_out, "rb").read()))
        if r.returncode != 0 or got != b"firs":
            fail(f"--max-tokens 4: rc {r.returncode}, tokens {got!r}")
        r = subprocess.run([sys.executable, SCRIPT, "--out", tree_out, "--tree", os.path.join(d, "none")],
                           capture_output=True, text=True)
        if r.returncode == 0 or "not a folder" not in r.stderr:
            fail(f"--tree of a missing folder: rc {r.returncode}, stderr {r.stderr!r}")
        # tandem trains on it.
        r = subprocess.run([args.tandem, "train", "gpt2-tiny", "--steps", "40", "--log-every", "40",
                            "--set", "data.source=tokens", "--set", f"data.path={out}", "--set", "model.vocab=256",
                            "--set", "training.steps=40"], capture_output=True, text=True)
        m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", r.stdout)
        if r.returncode != 0 or not m or float(m.group(2)) >= float(m.group(1)) - 1.0:
            fail(f"training on the tokens: rc {r.returncode}\n{r.stdout}{r.stderr}")
        print(f"OK: {len(tokens)} tokens; tandem trains on them (loss {m.group(1)} -> {m.group(2)})")


if __name__ == "__main__":
    main()
