"""How much an emulated congested step varies from seed to seed, next to the prediction's error.

    .venv/bin/python benchmarks/sim_seed_spread.py VALIDATION_CSV RUNS_DIR... [-o CSV]

``VALIDATION_CSV`` is ``netsense simulate validate -o``'s table (one seed per point);
``RUNS_DIR`` are more held-out runs of the same points with other seeds (none of them
calibrates anything). Per (method, W, condition): the measured mean step of every seed, their
spread ((max - min) / mean) and the prediction's error against the seeds' mean. A prediction
cannot be expected to come closer to one run than the runs come to each other.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
from pathlib import Path

from testbed.simulation.calibrate import load_runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("validation", type=Path)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("-o", "--out", type=Path)
    a = ap.parse_args()
    with open(a.validation, newline="") as fh:
        table = list(csv.DictReader(fh))
    extra: dict[tuple[str, int, str], list[float]] = {}
    for root in a.runs:
        for r in load_runs(root):
            extra.setdefault((r.method, r.n, r.condition), []).append(r.step_s)
    rows = []
    for t in table:
        key = (t["method"], int(t["workers"]), t["condition"])
        if key not in extra:
            continue
        steps = [float(t["step_meas_s"]), *extra[key]]
        mean = statistics.fmean(steps)
        pred = float(t["step_pred_s"])
        rows.append({"method": key[0], "workers": key[1], "condition": key[2],
                     "seeds": len(steps), "steps_meas_s": " ".join(f"{s:.4g}" for s in steps),
                     "spread_pct": round(100 * (max(steps) - min(steps)) / mean, 1),
                     "step_pred_s": pred,
                     "err_vs_one_seed_pct": float(t["step_err_pct"]),
                     "err_vs_mean_pct": round(100 * (pred - mean) / mean, 1)})
    if not rows:
        raise SystemExit(f"sim_seed_spread: no point of {a.validation} (method, workers, "
                         "condition) among the runs given")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    print(buf.getvalue(), end="")
    if a.out:
        a.out.write_text(buf.getvalue())
    for m in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == m]
        print(f"{m}: seed spread median {statistics.median(r['spread_pct'] for r in rs):.0f} %;"
              f" |error| vs one seed median "
              f"{statistics.median(abs(r['err_vs_one_seed_pct']) for r in rs):.1f} %, vs the "
              f"seeds' mean {statistics.median(abs(r['err_vs_mean_pct']) for r in rs):.1f} %")


if __name__ == "__main__":
    main()
