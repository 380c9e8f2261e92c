#!/usr/bin/env python3
"""Every plan task's kernels in profiled trace files, for fitting models offline.

    scripts/trace_kernels.py OUT.tsv TRACE.sqlite... | DIR

One row per (trace, task, kernel name, thread blocks): the op kind, the
median duration over the run's steps and how many times it ran, from rank
0 of the trace's last real run. A sweep's work folder (`tandem calibrate
--sweep full --work-dir DIR`) gives every GEMM shape's cuBLASLt kernel, whose
name carries its tile and cluster shape (`nvjet_sm90_tst_256x128_64x4_1x2`),
beside its launch geometry. Uses Python's sqlite3 module only.
"""
import glob
import os
import sqlite3
import statistics
import sys


def traces(args):
    for a in args:
        if os.path.isdir(a):
            yield from sorted(glob.glob(os.path.join(a, '*.sqlite')))
        else:
            yield a


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    partial = sys.argv[1] + '.partial'
    try:
        rows_out = write(partial, sys.argv[2:])
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)  # no half-written table left behind
        raise
    os.replace(partial, sys.argv[1])
    print(f'{rows_out} rows written to {sys.argv[1]}')


def write(out_path, args):
    rows_out = 0
    with open(out_path, 'w') as out:
        out.write('trace\ttask\top\tkernel\tblocks\tmedian_ns\tcount\n')
        for path in traces(args):
            try:
                db = sqlite3.connect(f'file:{path}?mode=ro', uri=True)
                run = db.execute("select max(id) from runs where kind = 'real'").fetchone()[0]
                if run is None:
                    print(f'{path}: no real run, skipped', file=sys.stderr)
                    continue
                rows = db.execute(
                    """select a.task_id, p.op, s.value, coalesce(g.grid_x * g.grid_y * g.grid_z, 0),
                              a.end_ns - a.start_ns
                       from activities a
                       join plan_tasks p on p.run = a.run and p.rank = a.rank and p.task_id = a.task_id
                       join strings s on s.id = a.name
                       left join activity_geometry g on g.activity = a.id
                       where a.run = ? and a.rank = 0
                         and a.kind = (select code from activity_kinds where name = 'kernel')""",
                    (run,)).fetchall()
            except sqlite3.Error as e:
                sys.exit(f'{path}: {e}')
            by_kernel = {}
            for task, op, name, blocks, ns in rows:
                by_kernel.setdefault((task, op, name, blocks), []).append(ns)
            name = os.path.basename(path)[:-len('.sqlite')] if path.endswith('.sqlite') else os.path.basename(path)
            for (task, op, kernel, blocks), ns in sorted(by_kernel.items()):
                out.write(f'{name}\t{task}\t{op}\t{kernel}\t{blocks}\t{int(statistics.median(ns))}\t{len(ns)}\n')
                rows_out += 1
    return rows_out


if __name__ == '__main__':
    main()
