"""The paced simulation against the paced emulated runs it has the inputs of (issue 52,
part 2): every ok run folder under a results tree, simulated from its own ``config.json``
(``paced.from_run``), its throughput set against the run's ``summary.json``.

Held out by construction: the simulation has no fitted number (``testbed.simulation.paced``,
"Nothing is fitted"), so no run it is compared with set any of its inputs but the run's
own configuration (rate, k, profile, method, model, steps).

Beside each error, two facts of the run that say where an error comes from:

* ``real_mbit``: the rate the emulated link really ran at (rate / k). Section 6 of
  results/README.md found the emulation reads low where it is below ~300 Mbit/s (the
  dilation-invariance check, k 1-30 at 1 Gbit/s); :data:`FAITHFUL_REAL_MBIT`; the cause
  was the hosts' BBR (results/simulation/ring-loss.md), so the split is made for runs on
  another TCP than the testbed's default only;
* ``tcp``: the emulated hosts' congestion control (config.json ``tcp_congestion_control``;
  ``unrecorded`` for runs made before it was recorded, which ran the build machine's BBR);
* ``link_util``: the share of the configured rate the run's bottleneck link delivered
  (``bottleneck.csv``, the shaped interface's own byte counter, toward the switch)
  between the ends of the first and the last step: how busy the emulated link really
  was, which the simulation's link is whenever the ring has bytes to send;

and for the adaptive methods ``levels_same``: the share of the emulated steps' time whose
level (and top-k ratio within 2 %) the simulated step of the same number had.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from netsenseml.dilation import Dilation
from testbed.common import metrics
from testbed.simulation import paced
from topologies import spec

#: The real link rate (Mbit/s) from which results/README.md section 6 holds the emulation
#: faithful (below it a run reads 8-13 % low at the same virtual rate).
FAITHFUL_REAL_MBIT = 300.0
RATIO_TOL = 0.02
UNRECORDED = "unrecorded"
COLUMNS = ("point", "model", "rate_mbit", "method", "k", "real_mbit", "emulated", "simulated",
           "error_pct", "link_util", "sim_link_util", "levels_same", "degraded", "tcp")


@dataclass
class Point:
    """One run against its simulation (samples/s on the virtual clock)."""

    point: str
    model: str
    rate_mbit: float
    method: str
    k: float
    emulated: float
    simulated: float
    link_util: float | None = None
    sim_link_util: float | None = None
    levels_same: float | None = None
    degraded: bool = False
    tcp: str = UNRECORDED
    steps: list[tuple[str, float, float]] = field(default_factory=list, repr=False)

    @property
    def real_mbit(self) -> float:
        return Dilation(max(self.k, 1.0)).real_mbit(self.rate_mbit)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.simulated / self.emulated - 1.0)

    def row(self) -> dict[str, object]:
        d = {k: v for k, v in asdict(self).items() if k != "steps"}
        d.update(real_mbit=round(self.real_mbit, 3), error_pct=round(self.error_pct, 2),
                 emulated=round(self.emulated, 2), simulated=round(self.simulated, 2))
        return {c: d[c] for c in COLUMNS}


def run_folders(root: Path) -> list[Path]:
    """Every run folder (a ``summary.json`` beside a ``config.json``) under ``root``."""
    return sorted(s.parent for s in root.rglob("summary.json")
                  if (s.parent / "config.json").is_file())


def collect(root: Path, only: str | None = None
            ) -> tuple[list[tuple[Path, paced.PacedJob, dict]], list[str]]:
    """The ok runs' jobs and summaries (``only``: whose path under ``root`` holds it); one
    line per run left out, saying why."""
    out, skipped = [], []
    for d in run_folders(root):
        if only and only not in str(d.relative_to(root)):
            continue
        try:
            summary = json.loads((d / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            skipped.append(f"{d}: summary.json unreadable ({exc})")
            continue
        if summary.get("status") != "ok" or not summary.get("throughput_samples_per_s"):
            skipped.append(f"{d}: status {summary.get('status')!r}, no throughput")
            continue
        try:
            out.append((d, paced.from_run(d), summary))
        except (ValueError, KeyError, OSError) as exc:
            skipped.append(f"{d}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return out, skipped


def hosts_tcp(run: Path) -> str:
    """The run's emulated hosts' TCP congestion control as its config.json records it (one
    name, or the names joined where hosts differed), or :data:`UNRECORDED`."""
    try:
        got = json.loads((run / "config.json").read_text()).get("tcp_congestion_control")
    except (OSError, ValueError):
        got = None
    if isinstance(got, dict):
        got = "/".join(sorted(set(map(str, got.values()))))
    return str(got) if got else UNRECORDED


def validate(root: Path, workers: int = 1, only: str | None = None
             ) -> tuple[list[Point], list[str]]:
    """Every ok run under ``root`` (``only``: see :func:`collect`) against its simulation."""
    runs, skipped = collect(root, only)
    results = paced.simulate_isolated([job for _, job, _ in runs], workers)
    points = []
    for (d, job, summary), res in zip(runs, results, strict=True):
        emu_steps = rank0_steps(d)
        sim = res.throughput(job.batch_size, job.workers, marked_warmup(emu_steps))
        if sim is None:
            skipped.append(f"{d}: fewer than two simulated steps")
            continue
        p = Point(point=str(d.relative_to(root)), model=job.model, rate_mbit=job.bottleneck_mbit,
                  method=job.method, k=job.dilation,
                  emulated=float(summary["throughput_samples_per_s"]), simulated=sim,
                  link_util=link_util(d, emu_steps), sim_link_util=sim_link_util(job, res),
                  degraded=bool(summary.get("degraded")), tcp=hosts_tcp(d),
                  steps=[(s.level, s.ratio, s.step_s) for s in res.steps])
        if job.method in paced.SIMULATED:
            p.levels_same = levels_same(emu_steps, p.steps)
        points.append(p)
    return points, skipped


def rank0_steps(run: Path) -> list[dict[str, str]]:
    """The run's rank-0 rows of ``steps.csv`` in step order ([] where it has none)."""
    try:
        with (run / "steps.csv").open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("rank") == "0" and r.get("t")]
    except OSError:
        return []
    return sorted(rows, key=lambda r: float(r["t"]))


def marked_warmup(steps: list[dict[str, str]]) -> int:
    """How many leading steps the run's throughput left out before its first steady step
    beyond the first (its method's ``warmup`` and DDP's ``startup``:
    ``testbed.common.metrics``); 0 for a run made before the marking existed (it counted
    them), so the simulation's throughput is read over the same steps."""
    steady = metrics.steady_steps(steps)
    return next((i for i, r in enumerate(steps) if r is steady[0]), 0) if steady else 0


def link_util(run: Path, steps: list[dict[str, str]]) -> float | None:
    """Delivered / configured rate of the run's bottleneck link toward the switch, between
    the first and the last step's end (None where the run has no bottleneck.csv)."""
    if len(steps) < 2:
        return None
    t0, t1 = float(steps[0]["t"]), float(steps[-1]["t"])
    try:
        with (run / "bottleneck.csv").open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("toward", "").startswith("s")
                    and t0 <= float(r["t"]) <= t1 and float(r["configured_mbit"]) > 0]
    except (OSError, ValueError, KeyError):
        return None
    if not rows:
        return None
    return round(statistics.mean(float(r["delivered_mbit"]) / float(r["configured_mbit"])
                                 for r in rows), 4)


def sim_link_util(job: paced.PacedJob, res: paced.PacedResult) -> float | None:
    """What :func:`link_util` reads, of the simulation: a worker's bytes on its link toward
    the switch (the ring's per-rank volume, TCP/IP/Ethernet headers included: 1514 bytes a
    1448-byte segment) over the bottleneck's rate, from the first step's end to the last's."""
    steps = res.steps
    if len(steps) < 2:
        return None
    span = steps[-1].t + steps[-1].step_s - (steps[0].t + steps[0].step_s)
    w = job.workers
    volume = 0.0
    for s in steps[1:]:
        for b in paced.step_plan(job, s.step, paced.level_method(s.level, s.ratio)
                                 if job.method in paced.SIMULATED else job.method):
            volume += sum(2 * (w - 1) / w * n if kind == "allreduce" else (w - 1) * n
                          for kind, n in b.parts)
    return round(volume / paced.GOODPUT * 8 / (job.bottleneck_mbit * 1e6 * span), 4)


def same_level(level: str, ratio: float, other: str | None,
               other_ratio: float | str | None) -> bool:
    """The same level, and for top-k a ratio within ``RATIO_TOL`` of the other's (a ratio
    as ``steps.csv`` writes it, text, or a number)."""
    if level != other:
        return False
    if level != "topk":
        return True
    try:
        return abs(ratio / float(other_ratio) - 1.0) <= RATIO_TOL  # type: ignore[arg-type]
    except (TypeError, ValueError, ZeroDivisionError):
        return False


def levels_same(emu: list[dict[str, str]], sim: list[tuple[str, float, float]]) -> float | None:
    """The share of the emulated steps' time at the level the simulation's step had."""
    pairs = list(zip(emu, sim, strict=False))
    total = sum(float(e["step_s"]) for e, _ in pairs)
    if not pairs or total <= 0:
        return None
    same = sum(float(e["step_s"]) for e, (lv, r, _) in pairs
               if same_level(lv, r, e.get("level"), e.get("ratio")))
    return round(same / total, 4)


# ----------------------------------------------------------------------------- the table
def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(points: list[Point]) -> list[str]:
    """The markdown table, one row per point."""
    out = ["| point | method | rate Mbit/s | k | real Mbit/s | emulated samples/s | "
           "simulated | error % | link util emulated | simulated | levels same |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        out.append(f"| {p.point}{' (degraded)' if p.degraded else ''} | {p.method} | "
                   f"{p.rate_mbit:g} | {p.k:g} | {p.real_mbit:g} | {p.emulated:.1f} | "
                   f"{p.simulated:.1f} | {p.error_pct:+.1f} | {_fmt(p.link_util, '.3f')} | "
                   f"{_fmt(p.sim_link_util, '.3f')} | "
                   f"{_fmt(p.levels_same, '.2f')} |")
    return out


def summary(points: list[Point]) -> list[str]:
    """Median and worst |error|: all points, then by the hosts' TCP, and for the runs not on
    the testbed's default TCP split at the faithful real rate."""
    groups = [("all", points)]
    for tcp in sorted({p.tcp for p in points}):
        ps = [p for p in points if p.tcp == tcp]
        groups.append((f"hosts' TCP {tcp}", ps))
        if tcp != spec.DEFAULT_CONGESTION_CONTROL:
            groups += [(f"hosts' TCP {tcp}, real rate >= {FAITHFUL_REAL_MBIT:g} Mbit/s",
                        [p for p in ps if p.real_mbit >= FAITHFUL_REAL_MBIT]),
                       (f"hosts' TCP {tcp}, real rate < {FAITHFUL_REAL_MBIT:g} Mbit/s",
                        [p for p in ps if p.real_mbit < FAITHFUL_REAL_MBIT])]
    out = []
    for name, ps in groups:
        if not ps:
            continue
        errs = [abs(p.error_pct) for p in ps]
        worst = max(ps, key=lambda p: abs(p.error_pct))
        signed = statistics.mean(p.error_pct for p in ps)
        out.append(f"{name}: {len(ps)} points, |error| median {statistics.median(errs):.1f} %, "
                   f"worst {max(errs):.1f} % ({worst.point}), mean signed {signed:+.1f} %")
    return out


def write(points: list[Point], skipped: list[str], out_dir: Path, source: str,
          commit: str = "?") -> None:
    """``paper-grid-validation.csv`` and ``.md`` under ``out_dir`` (``commit``: the code's)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "paper-grid-validation.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for p in points:
            w.writerow(p.row())
    md = [f"# The paced simulation against `{source}`", "",
          "Made by `python benchmarks/sim_paper_grid.py " + source + " --out "
          + str(out_dir) + f"` at commit {commit}; no number of the simulation was fitted "
          "(testbed/simulation/paced.py).", "", *table(points), "", *summary(points)]
    if skipped:
        md += ["", "Left out:", *[f"- {s}" for s in skipped]]
    (out_dir / "paper-grid-validation.md").write_text("\n".join(md) + "\n")
