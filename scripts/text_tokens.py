#!/usr/bin/env python3
"""Writes a token file of real text for `data.source: tokens` (job-spec.md).

The text: the license texts every Debian system carries in
/usr/share/common-licenses (the base-files package: GPL, LGPL, GFDL,
Apache, MPL, Artistic, BSD, CC0; about 300 KB of English prose), or the
files named on the command line. The tokens: the text's UTF-8 bytes, one
token each (a vocabulary of 256: train with `--set model.vocab=256`), as
little-endian uint16, the files in name order, each followed by a blank
line. Bytes as tokens need no learned vocabulary, so the file is the same
on every machine with the same texts; the script prints its size and a
checksum to compare.

  scripts/text_tokens.py --out licenses.tokens [FILE...]

The file is written next to --out and renamed into place: an interrupted
run leaves no partial file.
"""
import argparse
import glob
import hashlib
import os
import sys
import tempfile

DEFAULT_GLOB = "/usr/share/common-licenses/*"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="token file to write (little-endian uint16, one token per byte)")
    ap.add_argument("files", nargs="*", help=f"text files (default: {DEFAULT_GLOB})")
    args = ap.parse_args()
    files = args.files or sorted(f for f in glob.glob(DEFAULT_GLOB) if os.path.isfile(f))
    if not files:
        sys.exit(f"text_tokens: no text files given and none in {DEFAULT_GLOB}")
    data = bytearray()
    for path in sorted(files):
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            sys.exit(f"text_tokens: {path}: {e.strerror}")
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as e:
            sys.exit(f"text_tokens: {path}: not UTF-8 text (byte {e.start})")
        data += text.rstrip(b"\n") + b"\n\n"
    tokens = bytearray()
    for b in data:
        tokens += bytes((b, 0))  # uint16, little-endian
    out_dir = os.path.dirname(os.path.abspath(args.out))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".text_tokens.", dir=out_dir)
    except OSError as e:
        sys.exit(f"text_tokens: {out_dir}: {e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(tokens)
        os.replace(tmp, args.out)
    except OSError as e:
        os.unlink(tmp)
        sys.exit(f"text_tokens: {args.out}: {e.strerror}")
    print(f"{args.out}: {len(data)} tokens (bytes) from {len(files)} files, vocabulary 256, "
          f"sha256 {hashlib.sha256(tokens).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
