#!/usr/bin/env python3
"""Per-shape agreement of two kernel calibrations (tandem calibrate output).

    scripts/compare_calibrations.py A.yaml B.yaml [--by-op]

For every (op kind, shape) both files measured, the difference of B's time
against A's: median, 90th percentile and worst |difference|, and the
difference weighted by A's time. --by-op adds a line per op kind. Where
both carry a GEMM census (`gemm_kernels:`), how often the two found the
same kernel blocks and tile per shape. Reads the `ops:` section's shape
lines (`"key": {ns: N, ...}`) and the census's (`"key": "blocks N tile
MxN ..."`) only, so it needs no YAML library.
"""
import re
import sys

SHAPE = re.compile(r'^\s+"(?P<key>[^"]+)":\s*\{ns:\s*(?P<ns>[0-9.eE+-]+)')
OP = re.compile(r'^  (?P<op>[a-z_0-9]+):')


def section(path, name):
    """(op kind, line) of each line under an op kind of the top-level section `name`."""
    op, inside = None, False
    with open(path) as f:
        for line in f:
            if line.startswith(name + ':'):
                inside = True
                continue
            if not inside:
                continue
            if line and not line[0].isspace() and not line.startswith('#'):
                inside = False
                continue
            m = OP.match(line)
            if m:
                op = m.group('op')
            elif op:
                yield op, line


def shapes(path):
    out = {}
    for op, line in section(path, 'ops'):
        m = SHAPE.match(line)
        if m:
            out[(op, m.group('key'))] = float(m.group('ns'))
    return out


CENSUS = re.compile(r'^    "(?P<key>[^"]+)":\s*"(?P<text>[^"]*)"')


def census(path):
    """(op, key) -> {'blocks': '120', 'tile': '128x160', ...} of the gemm_kernels section."""
    out = {}
    for op, line in section(path, 'gemm_kernels'):
        m = CENSUS.match(line)
        if m:
            words = m.group('text').split()
            out[(op, m.group('key'))] = dict(zip(words[::2], words[1::2]))
    return out


def compare_census(path_a, path_b):
    a, b = census(path_a), census(path_b)
    common = sorted(set(a) & set(b))
    if not common:
        return
    print(f"GEMM census: {len(a)} and {len(b)} shapes, {len(common)} in both")
    for op in sorted({k[0] for k in common}):
        keys = [k for k in common if k[0] == op]
        same_blocks = sum(a[k].get('blocks') == b[k].get('blocks') for k in keys)
        same_tile = sum(a[k].get('tile') == b[k].get('tile') for k in keys)
        print(f"  {op}: blocks the same in {same_blocks} of {len(keys)}, tile the same in {same_tile}")


def summary(pairs):
    diffs = sorted(abs(b / a - 1) for a, b in pairs)
    n = len(diffs)
    weighted = sum(abs(b - a) for a, b in pairs) / sum(a for a, _ in pairs)
    worst = max(pairs, key=lambda p: abs(p[1] / p[0] - 1))
    return (f"{n} shapes: median |difference| {100 * diffs[n // 2]:.2f}%, 90th percentile "
            f"{100 * diffs[int(0.9 * (n - 1))]:.2f}%, worst {100 * diffs[-1]:.1f}% "
            f"({worst[0] / 1e3:.1f} -> {worst[1] / 1e3:.1f} us), weighted by time {100 * weighted:.2f}%")


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b = shapes(argv[1]), shapes(argv[2])
    common = sorted(set(a) & set(b))
    if not common:
        print(f"no shape measured in both {argv[1]} ({len(a)}) and {argv[2]} ({len(b)})", file=sys.stderr)
        return 1
    print(f"{argv[1]}: {len(a)} shapes; {argv[2]}: {len(b)} shapes")
    print("all:", summary([(a[k], b[k]) for k in common]))
    if '--by-op' in argv:
        for op in sorted({k[0] for k in common}):
            pairs = [(a[k], b[k]) for k in common if k[0] == op]
            signed = sorted(b_ / a_ - 1 for a_, b_ in pairs)
            print(f"{op}: median signed {100 * signed[len(signed) // 2]:+.2f}%;", summary(pairs))
    compare_census(argv[1], argv[2])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
