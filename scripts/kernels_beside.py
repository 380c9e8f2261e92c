#!/usr/bin/env python3
"""How kernels of two compute streams shared the GPU in profiled runs.

    scripts/kernels_beside.py TANDEM CALIBRATION TOPOLOGY DIR...

For every `*.real.sqlite` in each DIR (as `bench_sim_vs_real` leaves them),
each task's main kernel (its first; a weight gradient's trailing bias
kernels left out) in the run's middle step is compared with its time alone:
the same job (the run's job text) simulated with every kernel as if alone
(`tandem simulate` with CALIBRATION, its kernel_overlap_efficiency raised to
2 and --kernel-sharing fair, so that no kernel waits for another). Tasks are
grouped by the other stream's task they overlapped most and which of the
two started first, with
  - time over alone: the kernel's duration over its time alone;
  - work during the overlap: (time alone - time outside the overlap) /
    overlap, 1 being as fast as alone (the kernel is taken to run at its
    own speed outside the overlap);
and the second-started kernels again by their grid and the first one's.
This is the evidence the replay's kernel-sharing rules are checked on
(docs/simulator.md, kernel sharing; docs/accuracy.md). GEMM kinds carry
their cluster size (`/c2`). Attention tasks of several kernels are compared
by their first kernel only, so their rows say little.
"""
import collections
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile


def main_kernels(path, run, middle_step=True):
    """Task ops, and each task's main kernel (start, end, cluster, grid) in one step."""
    db = sqlite3.connect(path)
    names = dict(db.execute("SELECT id, value FROM strings"))
    tasks = {t: (names.get(n, str(n)), op, stream) for t, n, op, stream in
             db.execute("SELECT task_id, name, op, stream FROM plan_tasks WHERE run = ? AND rank = 0", (run,))}
    steps = list(db.execute("SELECT start_ns, end_ns FROM steps WHERE run = ? AND rank = 0 ORDER BY step", (run,)))
    if not steps:
        raise SystemExit(f"{path}: run {run} has no steps")
    s0, s1 = steps[len(steps) // 2] if middle_step else steps[0]
    has_resources = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'kernel_resources'").fetchone()[0]
    cluster = "r.cluster_x * r.cluster_y * r.cluster_z" if has_resources else "NULL"
    join = "LEFT JOIN kernel_resources r ON r.activity = a.id" if has_resources else ""
    kernels = {}
    for a0, a1, t, cl, grid in db.execute(
            f"SELECT a.start_ns, a.end_ns, a.task_id, {cluster}, g.grid_x * g.grid_y * g.grid_z FROM activities a "
            f"{join} LEFT JOIN activity_geometry g ON g.activity = a.id WHERE a.run = ? AND a.rank = 0 "
            "AND a.kind IN (0, 2) AND a.task_id IS NOT NULL AND a.start_ns >= ? AND a.end_ns <= ?", (run, s0, s1)):
        if t not in kernels or a0 < kernels[t][0]:
            kernels[t] = (a0, a1, cl, grid or 0)
    return tasks, kernels


def alone_calibration(calibration, folder):
    text = open(calibration).read()
    text, n = re.subn(r"(?m)^kernel_overlap_efficiency:.*$", "kernel_overlap_efficiency: 2.0", text)
    if n == 0:
        text += "\nkernel_overlap_efficiency: 2.0\n"
    path = os.path.join(folder, "alone.yaml")
    open(path, "w").write(text)
    return path


def label(op, cluster):
    return f"{op}/c{cluster}" if op.startswith("matmul") and cluster else op


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    tandem, calibration, topology, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    times = collections.defaultdict(list)   # (op, role, other op) -> [(time over alone, ns)]
    work = collections.defaultdict(list)    # (op, role, other op) -> [work during the overlap]
    by_grid = collections.defaultdict(list)  # (op, grid, first op, first grid) -> [(work, time over alone)]
    with tempfile.TemporaryDirectory() as tmp:
        alone_cal = alone_calibration(calibration, tmp)
        for folder in dirs:
            for f in sorted(os.listdir(folder)):
                if not f.endswith(".real.sqlite"):
                    continue
                real = os.path.join(folder, f)
                job = sqlite3.connect(real).execute("SELECT job_yaml FROM runs WHERE id = 1").fetchone()[0]
                job_path, sim_path = os.path.join(tmp, "job.yaml"), os.path.join(tmp, "alone.sqlite")
                open(job_path, "w").write(job)
                if os.path.exists(sim_path):
                    os.remove(sim_path)
                subprocess.run([tandem, "simulate", job_path, "--topology", topology, "--calibration", alone_cal,
                                "--kernel-sharing", "fair", "--plan-cache", "off", "--out", sim_path],
                               check=True, capture_output=True)
                _, alone = main_kernels(sim_path, 1, middle_step=False)
                tasks, kernels = main_kernels(real, 1)
                for t, (a0, a1, cl, grid) in kernels.items():
                    if t not in alone or t not in tasks:
                        continue
                    op, stream = tasks[t][1], tasks[t][2]
                    alone_ns = alone[t][1] - alone[t][0]
                    duration = a1 - a0
                    if alone_ns <= 0 or duration <= 0:
                        continue
                    other, overlap = None, 0
                    for t2, (b0, b1, _, _) in kernels.items():
                        if t2 != t and t2 in tasks and tasks[t2][2] != stream and min(a1, b1) - max(a0, b0) > overlap:
                            other, overlap = t2, min(a1, b1) - max(a0, b0)
                    if other is None or overlap < 0.1 * duration:
                        times[(label(op, cl), "alone", "")].append((duration / alone_ns, duration))
                        continue
                    role = "first" if a0 <= kernels[other][0] else "second"
                    other_label = label(tasks[other][1], kernels[other][2])
                    key = (label(op, cl), role, other_label)
                    times[key].append((duration / alone_ns, duration))
                    done = (alone_ns - (duration - overlap)) / overlap
                    work[key].append(done)
                    if role == "second":
                        by_grid[(op, grid, tasks[other][1], kernels[other][3])].append((done, duration / alone_ns))

    print(f"{'kernel':22s} {'started':7s} {'beside':22s} {'n':>5s} {'time/alone':>10s} {'p10':>6s} {'p90':>6s} "
          f"{'work in overlap':>15s} {'real ms':>8s}")
    for key in sorted(times, key=lambda k: -sum(x[1] for x in times[k])):
        v = sorted(x[0] for x in times[key])
        w = f"{statistics.median(work[key]):15.2f}" if work.get(key) else f"{'':15s}"
        print(f"{key[0]:22s} {key[1]:7s} {key[2]:22s} {len(v):5d} {statistics.median(v):10.2f} {v[len(v) // 10]:6.2f} "
              f"{v[(9 * len(v)) // 10]:6.2f} {w} {sum(x[1] for x in times[key]) / 1e6:8.2f}")
    print("\nstarted second, by its grid and the first one's: work during the overlap, time over alone")
    for (op, grid, first, first_grid), v in sorted(by_grid.items()):
        if len(v) >= 5:
            print(f"  {op:18s} grid {grid:6d} beside {first:18s} grid {first_grid:5d}: work "
                  f"{statistics.median(x[0] for x in v):5.2f}, time {statistics.median(x[1] for x in v):5.2f}x, n={len(v)}")


if __name__ == "__main__":
    main()
