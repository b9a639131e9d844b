"""Predicted throughput per method from 8 to 1024 workers, for the paper's three models at
the paper's rates (issue 52 part 4), from ``netsense advise``'s closed form
(``testbed.simulation.advise``: the accelerator profile's compute and codec times, DDP's
real bucket layout, each method's wire bytes and collective, the adaptive methods' own
policy in the step loop).

    .venv/bin/python benchmarks/advise_scale.py [--workers 8,16,...,1024]
        [--rates 200,300,1000,10000] [--models resnet18-imagenet,vgg16,gpt2-small]
        [--topology star] [--out results/simulation]

Writes ``scale-advise.csv`` (one row per model, rate, workers and method: predicted
samples/s, step seconds, the best method at that point) and ``scale-advise.png`` / ``.pdf``
(a row per model, a column per rate; the workers axis log 2; the range the emulation has
checked shaded: 8 workers, the paper grid's), drawn from the CSV; prints, per model and
rate, the best method at each worker count. A prediction beyond the shaded range is the
closed form's arithmetic, not a measurement: the ring's latency term (``alpha`` per
message, ``2 (N-1)`` messages a collective) is assumed, not measured, above 8 workers.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.common.files import atomic_write_text  # noqa: E402
from testbed.simulation import advise as adv  # noqa: E402

#: The worker counts the emulation has run each model at (the paper grid: a star of 8).
CHECKED_WORKERS = (8, 8)
COLUMNS = ["model", "topology", "rate_mbit", "workers", "method", "samples_per_s", "step_s",
           "best"]


def predict_all(models: list[str], rates: list[float], workers: list[int], topology: str,
                methods: list[str]) -> list[dict]:
    rows: list[dict] = []
    for model in models:
        work = adv.load_workload(model)
        for rate in rates:
            for w in workers:
                net = adv.Network(topology, w, rate)
                pred = adv.predict(work, net, methods)
                best = adv.best_of(pred, methods).method
                rows += [{"model": model, "topology": topology, "rate_mbit": rate,
                          "workers": w, "method": r.method,
                          "samples_per_s": round(r.throughput, 3),
                          "step_s": round(r.step_s, 6), "best": best} for r in pred]
            print(f"{model} at {rate:g} Mbit/s: best "
                  + ", ".join(f"{w}: {next(r['best'] for r in rows if r['model'] == model and r['rate_mbit'] == rate and r['workers'] == w)}"
                              for w in workers), flush=True)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    import io

    buf = io.StringIO()
    out = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    out.writeheader()
    out.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def draw(csv_path: Path, out: Path) -> list[Path]:
    """The figure from the CSV alone (a row per model, a column per rate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from testbed.analysis.figures import style

    df = pd.read_csv(csv_path)
    models = list(dict.fromkeys(df["model"]))
    rates = sorted(df["rate_mbit"].unique())
    fig, axes = plt.subplots(len(models), len(rates), figsize=(4.2 * len(rates),
                             3.3 * len(models)), squeeze=False, sharex=True)
    for i, model in enumerate(models):
        for j, rate in enumerate(rates):
            ax = axes[i][j]
            d = df[(df["model"] == model) & (df["rate_mbit"] == rate)]
            for method, g in d.groupby("method", sort=False):
                g = g.sort_values("workers")
                ax.plot(g["workers"], g["samples_per_s"], marker=".", lw=1.2,
                        color=style.method_color(str(method)), label=str(method),
                        ls="-" if method != style.ADAPTIVE else "--")
            ax.axvspan(CHECKED_WORKERS[0] * 0.85, CHECKED_WORKERS[1] * 1.15, color="0.85",
                       zorder=0, label="checked by emulation (8 workers)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}, {rate:g} Mbit/s", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
            if i == len(models) - 1:
                ax.set_xlabel("data-parallel workers (count, log 2)")
            if j == 0:
                ax.set_ylabel("predicted throughput\n(samples/s, log)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return style.save(fig, out.parent, out.stem)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="8,16,32,64,128,256,512,1024")
    ap.add_argument("--rates", default="200,300,1000,10000")
    ap.add_argument("--models", default="resnet18-imagenet,vgg16,gpt2-small")
    ap.add_argument("--topology", default="star", choices=adv.TOPOLOGIES)
    ap.add_argument("--methods", default=",".join(adv.DEFAULT_METHODS))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "simulation")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    rows = predict_all(args.models.split(","), rates, workers, args.topology,
                       adv.check_methods(args.methods))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "scale-advise.csv"
    write_csv(rows, path)
    for p in draw(path, args.out / "scale-advise.png"):
        print(f"wrote {p}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
