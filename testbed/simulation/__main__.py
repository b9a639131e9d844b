"""``python -m testbed.simulation RESULTS [--calib-n 2] [--cores N] [--scale 8,64,1024]``

Calibrates the step model on the RESULTS runs with ``--calib-n`` workers, prints the
prediction error on every run (markdown) and writes ``RESULTS/sim_validation.csv``; with
``--scale``, also the predicted step time and throughput at those worker counts (one machine
per worker, same links).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

from testbed.common.files import atomic_write_text
from testbed.simulation.calibrate import load_runs, scale_rows, validate


def _table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v: object) -> str:
        return f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else (
            f"{v:.1f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.simulation")
    ap.add_argument("results", type=Path)
    ap.add_argument("--calib-n", type=int, default=2)
    ap.add_argument("--cores", type=int, default=None,
                    help="CPUs of the emulating machine (default: from the runs' config.json)")
    ap.add_argument("--scale", default="", help="worker counts to predict, e.g. 8,64,1024")
    a = ap.parse_args(argv)
    if not a.results.is_dir():
        print(f"error: results: no such folder {str(a.results)!r}", file=sys.stderr)
        return 2
    runs = load_runs(a.results)
    if not runs:
        print(f"error: results: no ok star runs under {a.results}", file=sys.stderr)
        return 2
    cores = a.cores
    if cores is None:
        cfg = json.loads((runs[0].path / "config.json").read_text())
        cores = (cfg.get("host") or {}).get("cpus")
    try:
        link, rows = validate(runs, a.calib_n, cores)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"calibrated on {a.calib_n}-worker runs: alpha = {link.alpha_s * 1e3:.2f} ms per "
          f"message, eta = {link.eta:.3f} of the link rate; compute x max(1, n/{cores})")
    cols = ["method", "collective", "workers", "role", "payload_kB", "comm_meas_s",
            "comm_pred_s", "step_meas_s", "step_pred_s", "step_err_pct", "thr_meas",
            "thr_pred", "thr_err_pct"]
    print(_table(rows, cols))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(a.results / "sim_validation.csv", buf.getvalue())
    if a.scale:
        sizes = [int(s) for s in a.scale.split(",") if s.strip()]
        print(_table(scale_rows(runs, link, sizes, a.calib_n),
                     ["method", "workers", "comm_s", "step_s", "thr"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
