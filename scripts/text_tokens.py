#!/usr/bin/env python3
"""Writes a token file of real text for `data.source: tokens` (job-spec.md).

The text: the license texts every Debian system carries in
/usr/share/common-licenses (the base-files package: GPL, LGPL, GFDL,
Apache, MPL, Artistic, BSD, CC0; about 300 KB of English prose), or the
files named on the command line, or (--tree DIR) every text file under a
folder, such as the packages' documentation in /usr/share/doc (READMEs,
changelogs, copyright files; .gz files decompressed; files that are not
UTF-8 text skipped and counted), up to --max-tokens. The tokens: the
text's UTF-8 bytes, one token each (a vocabulary of 256: train with `--set model.vocab=256`), as
little-endian uint16, the files in name order, each followed by a blank
line. Bytes as tokens need no learned vocabulary, so the file is the same
on every machine with the same texts; the script prints its size and a
checksum to compare.

  scripts/text_tokens.py --out licenses.tokens [FILE...]
  scripts/text_tokens.py --out doc.tokens --tree /usr/share/doc --max-tokens 4000000

The file is written next to --out and renamed into place: an interrupted
run leaves no partial file.
"""
import argparse
import glob
import gzip
import hashlib
import os
import sys
import tempfile

DEFAULT_GLOB = "/usr/share/common-licenses/*"


def read_text(path):
    """(the file's bytes, decompressed when it ends in .gz, None) or, when
    they are not UTF-8 text, (None, why)."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                text = f.read()
        else:
            with open(path, "rb") as f:
                text = f.read()
    except (OSError, EOFError) as e:
        if path.endswith(".gz"):
            return None, "not gzip data"
        sys.exit(f"text_tokens: {path}: {getattr(e, 'strerror', None) or e}")
    nul = text.find(b"\0")
    if nul >= 0:
        return None, f"binary (a NUL byte at {nul})"
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {e.start})"
    return text, None


def tree_text(root, max_tokens):
    """The text files under root, in path order, until max_tokens bytes
    (0: all); returns (bytes, files used, files skipped)."""
    data, files, skipped = bytearray(), [], 0
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            text, _ = read_text(path)
            if text is None:
                skipped += 1
                continue
            data += text.rstrip(b"\n") + b"\n\n"
            files.append(path)
            if max_tokens and len(data) >= max_tokens:
                return data, files, skipped
    return data, files, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="token file to write (little-endian uint16, one token per byte)")
    ap.add_argument("--tree", metavar="DIR", help="every UTF-8 text file under DIR (.gz decompressed), in path order")
    ap.add_argument("--max-tokens", type=int, default=0, metavar="N", help="stop after N tokens (0: no limit)")
    ap.add_argument("files", nargs="*", help=f"text files (default: {DEFAULT_GLOB})")
    args = ap.parse_args()
    if args.tree and args.files:
        sys.exit("text_tokens: give files or --tree, not both")
    if args.max_tokens < 0:
        sys.exit("text_tokens: --max-tokens must be >= 0")
    if args.tree:
        if not os.path.isdir(args.tree):
            sys.exit(f"text_tokens: {args.tree}: not a folder")
        data, files, skipped = tree_text(args.tree, args.max_tokens)
        if skipped:
            print(f"text_tokens: skipped {skipped} " + ("file that is" if skipped == 1 else "files that are") +
                  " not UTF-8 text")
    else:
        files = args.files or sorted(f for f in glob.glob(DEFAULT_GLOB) if os.path.isfile(f))
        if not files:
            sys.exit(f"text_tokens: no text files given and none in {DEFAULT_GLOB}")
        data = bytearray()
        for path in sorted(files):
            text, why = read_text(path)
            if text is None:
                sys.exit(f"text_tokens: {path}: {why}")
            data += text.rstrip(b"\n") + b"\n\n"
    if args.max_tokens:
        del data[args.max_tokens:]
    if not data:
        sys.exit("text_tokens: no text found")
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
