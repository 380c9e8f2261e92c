#!/usr/bin/env python3
"""The weight-gradient stream on and off: measured against simulated.

    scripts/stream_on_off.py TANDEM CALIBRATION TOPOLOGY DIR...

For every pair of profiled one-rank runs `NAME-true.real.sqlite` and
`NAME-false.real.sqlite` in each DIR (as stage `wgprofile` of
tests/gpu/run_on_device.sh leaves them: the same job with
schedule.weight_gradient_stream true and false), the median step of rank 0
in each, and the step `tandem simulate` predicts for the same job text (the
run's own, read from the trace) with CALIBRATION on TOPOLOGY: whether the
simulator gets the stream's gain or loss, and its size, right. A run whose
trace holds no job text is reported and skipped.
"""
import glob
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile


def measured(path):
    """(job text, median step ms of rank 0) of the trace's last real run."""
    db = sqlite3.connect(path)
    row = db.execute("SELECT id, job_yaml FROM runs WHERE kind = 'real' ORDER BY id DESC LIMIT 1").fetchone()
    if row is None or not row[1]:
        return None, None
    steps = [e - s for s, e in db.execute(
        "SELECT start_ns, end_ns FROM steps WHERE run = ? AND rank = 0 AND end_ns > start_ns", (row[0],))]
    return row[1], (statistics.median(steps) / 1e6 if steps else None)


def simulated(tandem, calibration, topology, job_yaml):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(job_yaml)
        job = f.name
    try:
        out = subprocess.run([tandem, "simulate", job, "--topology", topology, "--calibration", calibration,
                              "--plan-cache", "off", "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "simulate failed")
        return json.loads(out.stdout)["step_ns"] / 1e6
    finally:
        os.unlink(job)


def main(argv):
    if len(argv) < 5:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    tandem, calibration, topology, dirs = argv[1], argv[2], argv[3], argv[4:]
    print(f"{'job':<28} {'real on':>9} {'off':>9} {'on/off':>7}   {'sim on':>9} {'off':>9} {'on/off':>7}")
    pairs = 0
    for d in dirs:
        for on_path in sorted(glob.glob(os.path.join(d, "*-true.real.sqlite"))):
            name = os.path.basename(on_path)[:-len("-true.real.sqlite")]
            off_path = os.path.join(d, name + "-false.real.sqlite")
            if not os.path.exists(off_path):
                print(f"{name}: no {os.path.basename(off_path)} beside it, skipped")
                continue
            (job_on, real_on), (job_off, real_off) = measured(on_path), measured(off_path)
            if job_on is None or job_off is None or real_on is None or real_off is None:
                print(f"{name}: a trace without job text or steps, skipped")
                continue
            sim_on = simulated(tandem, calibration, topology, job_on)
            sim_off = simulated(tandem, calibration, topology, job_off)
            pairs += 1
            print(f"{name:<28} {real_on:9.3f} {real_off:9.3f} {real_on / real_off:7.4f}   "
                  f"{sim_on:9.3f} {sim_off:9.3f} {sim_on / sim_off:7.4f}")
            print(json.dumps({"job": name, "real_on_ms": round(real_on, 3), "real_off_ms": round(real_off, 3),
                              "sim_on_ms": round(sim_on, 3), "sim_off_ms": round(sim_off, 3),
                              "error_on_pct": round(100 * (sim_on / real_on - 1), 2),
                              "error_off_pct": round(100 * (sim_off / real_off - 1), 2)}))
    if pairs == 0:
        print("no NAME-true / NAME-false trace pairs found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
