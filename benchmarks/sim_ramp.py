"""The paper's congestion ramp predicted by the paced simulation before it is emulated, and
the emulated ramp's runs against it (issue 52).

    .venv/bin/python benchmarks/sim_ramp.py [--models resnet18-imagenet,vgg16,gpt2-small]
        [--methods M,M] [--time-limit S] [--out results/simulation] [--jobs 1]
    .venv/bin/python benchmarks/sim_ramp.py --runs DIR [--prediction CSV] [--out DIR]

**Prediction** (no ``--runs``): the ramp experiments of the paper-grid sweep
(``testbed/sweeps/paper-grid.yaml``: ``resnet18-ramp``, ``vgg16-ramp``, ``gpt2-ramp``, with
their overrides and methods -- ``paper-ramp.yaml`` and ``paper-ramp30.yaml``: a 4+4
dumbbell, 1 Gbit/s bottleneck, 1, 10, ..., 50 iperf3 streams x0 -> x1, 15 s levels and 5 s
pauses for ResNet-18, 30 s and 10 s for VGG-16 and GPT-2), each run's inputs as the run
would have them (the profile's timing, the dilation factor of the ``auto`` estimate),
simulated (``testbed/simulation/paced.py``, nothing fitted) for the whole ramp. Prints and
writes under ``--out``: ``ramp-prediction.csv`` (per model, method and window of constant
streams: samples/s, the share of the window covered, the level held longest and its
share), ``ramp-prediction-levels.csv`` (each adaptive method's level over time),
``ramp-prediction.md`` (the table, the commit and date it was made) and
``ramp-prediction.png`` / ``.pdf`` (drawn from the two CSVs). It is a held-out
**prediction**: made before any ramp was emulated; re-running it replaces it.

**Comparison** (``--runs DIR``): every ok run folder under DIR whose timeline is cross
traffic only (a ramp), simulated from its own ``config.json`` (its k, its timing), set
against the run per window: both throughputs, the error (windows both cover at least half
of), and for the adaptive methods the share of the time on which the simulated level equals
the emulated one (issue 52's target: >= 90 % of the ramp's time); beside them the committed
prediction's throughput (``--prediction``) where it has that model, method and window.
``--out`` writes ``ramp-validation.csv`` / ``.md``. ``testbed/analysis/ramp.py`` has the
windows, tracks and throughput per window (the report's ramp figure reads runs with it),
``testbed/simulation/paced_ramp.py`` the simulated track and the levels' agreement.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netsenseml import methods  # noqa: E402
from testbed.analysis import ramp  # noqa: E402
from testbed.common.files import atomic_write_text  # noqa: E402
from testbed.common.provenance import git_commit  # noqa: E402
from testbed.simulation import paced  # noqa: E402
from testbed.simulation import paced_ramp as pr  # noqa: E402

SWEEP = "paper-grid"
RAMPS = ("resnet18-ramp", "vgg16-ramp", "gpt2-ramp")
COLUMNS = ["model", "method", "k", "window", "start_s", "end_s", "streams", "samples_per_s",
           "cover", "level", "level_share"]
LEVEL_COLUMNS = ["model", "method", "start_s", "end_s", "level", "wire"]
VALIDATION_COLUMNS = ["run", "model", "method", "window", "start_s", "end_s", "streams",
                      "emulated", "simulated", "error_pct", "predicted", "prediction_error_pct",
                      "emu_cover", "sim_cover", "levels_same"]


# ----------------------------------------------------------------------------- the prediction
def ramp_jobs(models: list[str] | None, methods: list[str] | None, time_limit: float | None
              ) -> list[tuple[paced.PacedJob, list[dict], str]]:
    """One job per ramp experiment and method of the sweep (one seed: the simulation is
    deterministic), the experiment's overrides applied as the sweep applies them; beside
    each, its scenario's timeline and name."""
    from testbed.cli.simulate import paced_configs
    from testbed.config.scenario import apply_overrides, load_scenario
    from testbed.config.sweep import expand, load_sweep

    spec = load_sweep(SWEEP)
    jobs, seen = [], set()
    for r in expand(spec, ROOT / "results"):
        if r.experiment not in RAMPS or (r.experiment, r.method) in seen:
            continue
        if methods is not None and r.method not in methods:
            continue
        seen.add((r.experiment, r.method))
        scn = apply_overrides(load_scenario(str(r.scenario_ref), skip_kernel_checks=True),
                              r.overrides)
        if models is not None and scn.workload.model not in models:
            continue
        cfg = paced_configs(scn, [r.method])[0]
        job = paced.from_config(cfg, None, f"{r.experiment} {r.method}")
        if time_limit is not None:  # the scenario refuses events past its own limit
            job = dataclasses.replace(job, time_limit_s=time_limit)
        jobs.append((job, cfg["scenario"]["timeline"], scn.name))
    return jobs


def prediction_rows(job: paced.PacedJob, res: paced.PacedResult,
                    timeline: list[dict]) -> tuple[list[dict], list[dict]]:
    """Per window: samples/s, cover, the level held longest; and the level segments."""
    track = pr.simulated_track(job, res)
    rows = []
    for w in ramp.windows(timeline):
        a, b = w.bounds(track.end_s)
        if b <= a:
            continue
        thr, cover = ramp.throughput(track, a, b)
        dom = ramp.dominant_level(track, a, b)
        rows.append({"model": job.model, "method": job.method, "k": round(job.dilation, 3),
                     "window": w.label, "start_s": a, "end_s": round(b, 3),
                     "streams": w.streams, "samples_per_s": None if thr is None else round(thr, 2),
                     "cover": round(cover, 3), "level": dom[0] if dom else "",
                     "level_share": round(dom[1], 4) if dom else None})
    levels = ([{"model": job.model, "method": job.method, "start_s": round(a, 4),
                "end_s": round(b, 4), "level": lv, "wire": methods.parse(lv).wire}
               for a, b, lv in ramp.level_segments(track)]
              if job.method in paced.SIMULATED else [])
    return rows, levels


def write_csv(rows: list[dict], columns: list[str], path: Path) -> None:
    buf = io.StringIO()
    out = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    out.writeheader()
    out.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _level_cell(level: str, share: float | None) -> str:
    return f"{level} ({100 * share:.0f} %)" if share is not None and share < 0.995 else level


def prediction_table(rows: list[dict]) -> list[str]:
    """Samples/s per model and method in the idle start and each stream level (the pauses
    are in the CSV); for the adaptive methods a second row: the level held longest."""
    shown = [r for r in rows if r["streams"] or r["window"] == "idle"]
    # one column per stream level: ramps of other level lengths line up by their levels
    heads = list(dict.fromkeys(r["window"] for r in shown))
    out = ["| model | method | k | " + " | ".join(heads) + " |",
           "|---|---|---|" + "---|" * len(heads)]
    keys = list(dict.fromkeys((r["model"], r["method"]) for r in shown))
    for model, method in keys:
        mine: dict[str, dict] = {}
        for r in shown:
            if r["model"] == model and r["method"] == method:
                mine.setdefault(r["window"], r)
        k = next(iter(mine.values()))["k"]
        cells = [f"{mine[h]['samples_per_s']:.1f}" if h in mine and mine[h]["samples_per_s"]
                 is not None else "-" for h in heads]
        out.append(f"| {model} | {method} | {k:g} | " + " | ".join(cells) + " |")
        if method in paced.SIMULATED:
            lv = [_level_cell(mine[h]["level"], mine[h]["level_share"]) if h in mine else "-"
                  for h in heads]
            out.append(f"| {model} | {method}: level | | " + " | ".join(lv) + " |")
    return out


def draw(csv_path: Path, levels_path: Path, out: Path) -> list[Path]:
    """Per model: samples/s per window over time (every method), then the adaptive
    methods' levels over time; the stream levels shaded. From the two CSVs alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from testbed.analysis.figures import style

    df = pd.read_csv(csv_path)
    lv = pd.read_csv(levels_path) if levels_path.stat().st_size else pd.DataFrame()
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(2, len(models), figsize=(4.6 * len(models), 6.2), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
    for j, model in enumerate(models):
        ax, axl = axes[0][j], axes[1][j]
        d = df[df["model"] == model]
        for _, w in d.drop_duplicates("start_s").iterrows():
            for a in (ax, axl):
                if w["streams"]:
                    a.axvspan(w["start_s"], w["end_s"], color="0.9", zorder=0)
            if w["streams"]:
                ax.text((w["start_s"] + w["end_s"]) / 2, 0.98, f"{w['streams']:g}", fontsize=7,
                        ha="center", va="top", transform=ax.get_xaxis_transform())
        for method, g in d.groupby("method", sort=False):
            g = g.sort_values("start_s").dropna(subset=["samples_per_s"])
            xs = [x for a, b in zip(g["start_s"], g["end_s"], strict=True) for x in (a, b)]
            ys = [y for y in g["samples_per_s"] for _ in (0, 1)]
            ax.plot(xs, ys, lw=1.3, color=style.method_color(str(method)), label=str(method),
                    ls="--" if str(method).startswith("netsenseml") else "-")
        ax.set_yscale("log")
        ax.set_title(f"{model}: predicted (paced simulation)", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left", frameon=False)
        if j == 0:
            ax.set_ylabel("throughput per window\n(samples/s, log)")
        mine = lv[lv["model"] == model] if len(lv) else lv
        for method, g in (mine.groupby("method", sort=False) if len(mine) else []):
            xs = [x for a, b in zip(g["start_s"], g["end_s"], strict=True) for x in (a, b)]
            ys = [y for y in g["wire"] for _ in (0, 1)]
            axl.plot(xs, ys, lw=1.5, color=style.method_color(str(method)), label=str(method))
        if len(mine):
            axl.legend(fontsize=7, loc="upper right", frameon=False)
        axl.set_yscale("log")
        axl.grid(True, which="major", alpha=0.3)
        axl.set_xlabel("time since the first step (virtual s); shaded: iperf3 streams")
        if j == 0:
            axl.set_ylabel("adaptive level: wire bytes\n/ fp32 bytes (log)")
    fig.tight_layout()
    return style.save(fig, out.parent, out.stem)


def predict(args: argparse.Namespace) -> int:
    models = args.models.split(",") if args.models else None
    methods = args.methods.split(",") if args.methods else None
    jobs = ramp_jobs(models, methods, args.time_limit)
    if not jobs:
        print("error: no ramp experiment matches --models / --methods", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = paced.simulate_isolated([job for job, _, _ in jobs], args.jobs)
    rows, levels = [], []
    for (job, timeline, _), res in zip(jobs, results, strict=True):
        r, lv = prediction_rows(job, res, timeline)
        rows += r
        levels += lv
        print(f"{job.model} {job.method}: k {job.dilation:g}, {len(res.steps)} steps in "
              f"{res.wall_s:.1f} s", flush=True)
    made = (f"PREDICTION, held out: made at commit {git_commit()} on "
            f"{dt.date.today().isoformat()}, before any run of the ramp was emulated")
    table = prediction_table(rows)
    print("\n".join(table))
    print(made)
    print(f"{len(jobs)} simulations in {time.perf_counter() - t0:.1f} s")
    out = args.out or ROOT / "results" / "simulation"
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, COLUMNS, out / "ramp-prediction.csv")
    write_csv(levels, LEVEL_COLUMNS, out / "ramp-prediction-levels.csv")
    scenarios = ", ".join(f"`{name}.yaml`" for name in sorted({n for _, _, n in jobs}))
    md = ["# The paper ramp in the paced simulation: a prediction", "", f"**{made}.**", "",
          f"Made by `python benchmarks/sim_ramp.py` from the `{', '.join(RAMPS)}` experiments "
          f"of `testbed/sweeps/{SWEEP}.yaml` ({scenarios}); nothing in the simulation "
          "was fitted (testbed/simulation/paced.py). Samples/s per window of constant iperf3 "
          "streams (virtual seconds from the first step's end); `level`: what the adaptive "
          "method held longest in the window (its share where below 100 %). The pauses and "
          "the tail are in `ramp-prediction.csv`. Compare with the emulated ramp: "
          "`python benchmarks/sim_ramp.py --runs DIR`.", "", *table, ""]
    atomic_write_text(out / "ramp-prediction.md", "\n".join(md))
    for p in draw(out / "ramp-prediction.csv", out / "ramp-prediction-levels.csv",
                  out / "ramp-prediction.png"):
        print(f"wrote {p}")
    print(f"wrote {out / 'ramp-prediction.csv'}")
    return 0


# ----------------------------------------------------------------------------- the comparison
def load_prediction(path: Path | None) -> dict[tuple[str, str, float], float]:
    """(model, method, window start) -> samples/s of a committed prediction CSV."""
    if path is None or not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {(r["model"], r["method"], float(r["start_s"])): float(r["samples_per_s"])
                for r in csv.DictReader(fh) if r.get("samples_per_s")}


def _pct(x: float | None, spec: str = "+.1f") -> str:
    return "-" if x is None else format(x, spec)


def validation_rows(comps: list[pr.RunComparison]) -> list[dict]:
    out = []
    for c in comps:
        for r in c.rows:
            w = r.window
            out.append({"run": c.run, "model": c.model, "method": c.method, "window": w.label,
                        "start_s": w.start_s, "end_s": w.end_s, "streams": w.streams,
                        "emulated": _round(r.emulated), "simulated": _round(r.simulated),
                        "error_pct": _round(r.error_pct), "predicted": _round(r.predicted),
                        "prediction_error_pct": _round(r.prediction_error_pct),
                        "emu_cover": round(r.emu_cover, 3), "sim_cover": round(r.sim_cover, 3),
                        "levels_same": _round(r.levels_same, 4)})
    return out


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def validation_table(comps: list[pr.RunComparison]) -> list[str]:
    out = ["| run | method | k | window | emulated samples/s | simulated | error % | "
           "predicted | error % | cover emu/sim | levels same |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in comps:
        for r in c.rows:
            out.append(f"| {c.run} | {c.method} | {c.k:g} | {r.window.label} "
                       f"({r.window.start_s:g} s) | {_pct(r.emulated, '.1f')} | "
                       f"{_pct(r.simulated, '.1f')} | {_pct(r.error_pct)} | "
                       f"{_pct(r.predicted, '.1f')} | {_pct(r.prediction_error_pct)} | "
                       f"{r.emu_cover:.2f}/{r.sim_cover:.2f} | "
                       f"{_pct(None if r.levels_same is None else 100 * r.levels_same, '.1f')} |")
        if c.levels_same is not None:
            out.append(f"| {c.run} | {c.method} | {c.k:g} | all ({c.span_s:g} s) | | | | | | | "
                       f"{100 * c.levels_same:.1f} |")
    return out


def validate(args: argparse.Namespace) -> int:
    root = args.runs
    if not root.is_dir():
        print(f"error: {root} is not a folder", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    comps, skipped = pr.compare(root, args.jobs, load_prediction(args.prediction))
    if not comps:
        print(f"error: no ok ramp run (a timeline of cross_start/cross_stop) under {root}",
              file=sys.stderr)
        return 2
    table, summary = validation_table(comps), pr.summary(comps)
    print("\n".join(table))
    print()
    print("\n".join(summary))
    for s in skipped:
        print(f"left out: {s}")
    print(f"{len(comps)} runs simulated in {time.perf_counter() - t0:.1f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(validation_rows(comps), VALIDATION_COLUMNS, args.out / "ramp-validation.csv")
        md = [f"# Emulated ramp runs against the paced simulation (`{args.runs}`)", "",
              f"Made by `python benchmarks/sim_ramp.py --runs {args.runs}` at commit "
              f"{git_commit()}; each run simulated from its own config.json; nothing fitted.",
              "", *table, "", *summary, *[f"- left out: {s}" for s in skipped], ""]
        atomic_write_text(args.out / "ramp-validation.md", "\n".join(md))
        print(f"wrote {args.out / 'ramp-validation.csv'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=None, help="only these models (comma-separated)")
    ap.add_argument("--methods", default=None, help="only these methods (comma-separated)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="simulate only this many virtual seconds (a tiny run)")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="simulations at once")
    ap.add_argument("--runs", type=Path, default=None,
                    help="compare the emulated ramp runs under this folder instead")
    ap.add_argument("--prediction", type=Path,
                    default=ROOT / "results" / "simulation" / "ramp-prediction.csv",
                    help="--runs: the committed prediction to set beside them")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the files go (prediction: default results/simulation; "
                    "--runs: none unless given)")
    args = ap.parse_args(argv)
    return validate(args) if args.runs is not None else predict(args)


if __name__ == "__main__":
    raise SystemExit(main())
