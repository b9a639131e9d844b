"""``netsense advise``'s closed form against every emulated run of a results tree: the
validation its stated uncertainty comes from (``advise.uncertainty``).

Each ok run folder (``summary.json`` beside ``config.json``) is predicted from its own
configuration -- model, dataset and batch, the accelerator timing it was paced by, DDP's
bucket layout, worker count, topology and rate (a dumbbell's bottleneck), method -- by the
same closed form and step loop advise answers with (``advise.step_time``), and set against the
run's measured throughput (summary.json: the steady steps, on the virtual clock). Nothing is
fitted to these runs: advise's goodput share, ``advise.ETA`` (from first principles), was
checked on the plain-allreduce runs under ``advise.ETA_FIT_RUNS`` (and, earlier, fitted
there); a run of that set is marked ``held_out`` False and kept out of the spreads.

Left out, each with its reason: runs not ok or without a throughput; degraded runs
(summary.json ``degraded``: the host did not keep up with the emulated accelerator, so the
run measured the host); runs a paced simulation cannot read (``paced.from_run``: not paced,
a method whose decisions are its own code's, a timeline of rate changes); a method advise
cannot predict (the prototype's rule: ``advise.NOT_SIMULATED``); runs with cross
traffic in their timeline (advise predicts a constant network); topologies advise has no
match for (its fat-tree is fixed at 4:1, 16 hosts a leaf); and a run whose throughput
counts its method's dense warm-up steps (made before they were marked: advise predicts the
steady state).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from netsenseml import methods
from testbed.common.files import atomic_write_text, write_csv
from testbed.common.provenance import git_commit
from testbed.simulation import advise, paced, scale
from testbed.simulation import paced_validation as pv

ROOT = Path(__file__).resolve().parents[2]
#: Topologies a run's config names that advise's ``Network`` models as the run had them.
MATCHED = ("star", "dumbbell")
COLUMNS = ("run", "model", "topology", "workers", "rate_mbit", "streams", "k", "method",
           "family", "measured", "predicted", "error_pct", "held_out")
#: The Markdown tables' columns: one row a run; one row a model and family.
TABLE = ["run", "model", "topology", "workers", "rate Mbit/s", "k", "method", "family",
         "measured samples/s", "predicted", "error %"]
SUMMARY = ["model", "family", "runs", "median \\|error\\| %", "worst \\|error\\| %",
           "worst run", "mean signed %"]


@dataclass(frozen=True)
class RunPoint:
    """One run against advise's prediction of its configuration (samples/s)."""

    run: str
    model: str
    topology: str
    workers: int
    rate_mbit: float
    k: float
    method: str
    measured: float
    predicted: float
    held_out: bool

    @property
    def family(self) -> str:
        """What its method puts on the ring (``advise.FAMILIES``)."""
        return advise.family(self.method)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)

    def row(self) -> dict[str, str]:
        """The CSV row (text, as ``advise.spreads`` reads it back)."""
        return {"run": self.run, "model": self.model, "topology": self.topology,
                "workers": str(self.workers), "rate_mbit": f"{self.rate_mbit:g}",
                "streams": "0", "k": f"{self.k:g}", "method": self.method,
                "family": self.family, "measured": f"{self.measured:.2f}",
                "predicted": f"{self.predicted:.2f}", "error_pct": f"{self.error_pct:.2f}",
                "held_out": str(self.held_out)}


def points(root: Path, only: str | None = None) -> tuple[list[RunPoint], list[str]]:
    """Every run under ``root`` (``only``: whose path under it holds this) advise can be
    checked on, and one line per run left out (``run: why``; a degraded run's ``degraded
    (...)``)."""
    out: list[RunPoint] = []
    left: list[str] = []
    for d in pv.run_folders(root):
        name = d.relative_to(root).as_posix()
        if only and only not in name:
            continue
        why = _point(d, name, out)
        if why:
            left.append(f"{name}: {why}")
    return out, left


def _point(d: Path, name: str, out: list[RunPoint]) -> str | None:
    """Appends the run's point to ``out``; else says why it is left out."""
    try:
        summary = json.loads((d / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        return f"summary.json unreadable ({exc})"
    thr = summary.get("throughput_samples_per_s")
    if summary.get("status") != "ok" or not thr:
        return f"status {summary.get('status')!r}, no throughput"
    if summary.get("degraded"):
        return f"degraded ({summary['degraded']})"
    try:
        job = paced.from_run(d)
    except (ValueError, KeyError, OSError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    try:
        advise.check_methods(job.method)
    except advise.AdviseError as exc:
        return "advise " + str(exc).removeprefix("--methods: ").split("; allowed")[0]
    kind = str((job.topology or {}).get("kind"))
    if job.cross:
        return "cross traffic in its timeline (advise predicts a constant network)"
    if kind not in MATCHED:
        return f"topology {kind!r}: advise models {', '.join(MATCHED)} as run"
    spec = methods.parse(job.method)  # the run folder's method enters here
    if spec.dense_steps and pv.marked_warmup(pv.rank0_steps(d)) < spec.dense_steps:
        return (f"its throughput counts {job.method}'s {spec.dense_steps} dense warm-up "
                "steps (unmarked); advise predicts the steady state")
    work = advise.Workload(job.model, "", job.batch_size, job.timing, job.buckets, "",
                           job.layout_origin, job.elements)
    net = advise.Network(kind, job.workers, job.bottleneck_mbit)
    predicted = job.workers * job.batch_size / advise.step_time(work, net, job.method)
    fitted = spec.reference and any((ROOT / fit) in d.resolve().parents
                                     for fit in advise.ETA_FIT_RUNS)
    out.append(RunPoint(name, job.model, kind, job.workers, job.bottleneck_mbit, job.dilation,
                        job.method, float(thr), predicted, not fitted))
    return None


# ----------------------------------------------------------------------------- the table
def table(pts: list[RunPoint]) -> list[str]:
    """One markdown row per run."""
    rows = [{"run": p.run, "model": p.model, "topology": p.topology, "workers": p.workers,
             "rate Mbit/s": f"{p.rate_mbit:g}", "k": f"{p.k:g}", "method": p.method,
             "family": p.family, "measured samples/s": f"{p.measured:.1f}",
             "predicted": f"{p.predicted:.1f}",
             "error %": f"{p.error_pct:+.1f}" + ("" if p.held_out else " (fitted)")}
            for p in pts]
    return scale.markdown(rows, TABLE).splitlines()


def summary(pts: list[RunPoint]) -> list[str]:
    """Per model and family (and per family over every model where there are several),
    the held-out runs' median and worst |error|: the figures advise states."""
    spread = advise.spreads([p.row() for p in pts])
    models = sorted({m for m, _ in spread if m is not None})
    rows = [{"model": m or "all", "family": advise.FAMILIES[f], "runs": s.runs,
             "median \\|error\\| %": f"{s.median_pct:.1f}",
             "worst \\|error\\| %": f"{s.worst_pct:.1f}", "worst run": s.worst_run,
             "mean signed %": f"{s.mean_signed_pct:+.1f}"}
            for m in [*models, *([None] if len(models) > 1 else [])]
            for f in advise.FAMILIES if (s := spread.get((m, f))) is not None]
    out = scale.markdown(rows, SUMMARY).splitlines()
    held = [abs(p.error_pct) for p in pts if p.held_out]
    if held:
        out += ["", f"all: {len(held)} held-out runs, |error| median "
                f"{statistics.median(held):.1f} %, worst {max(held):.1f} %"]
    return out


def report(pts: list[RunPoint], left: list[str]) -> list[str]:
    """What the benchmark prints and the ``.md`` holds: the spreads, the runs, the left out."""
    return [*summary(pts), "", *table(pts), *(["", "Left out:", *[f"- {s}" for s in left]]
                                             if left else [])]


def write(pts: list[RunPoint], left: list[str], out_dir: Path, source: str) -> None:
    """``advise-validation.csv`` (one row a run) and ``.md`` (the table, the spreads, what
    was left out and why; the commit of the code, these files aside) under ``out_dir``."""
    commit = git_commit(exclude=("results/simulation/advise-validation.*",))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "advise-validation.csv", COLUMNS, [p.row() for p in pts])
    md = [f"# `netsense advise`'s closed form against `{source}`", "",
          f"Made by `python benchmarks/advise_validation.py {source} --out {out_dir}` at "
          f"commit {commit}. Held out: advise's goodput share ({advise.ETA:g}, from "
          f"first principles: testbed/simulation/advise.py) was checked on the plain-allreduce runs under "
          f"{', '.join(f'`{p.as_posix()}`' for p in advise.ETA_FIT_RUNS)}; rows marked (fitted) are those and are not "
          "in the spreads. `netsense advise` states each method family's worst |error| "
          "below (the asked model's runs, else every model's) as its uncertainty.", "",
          *report(pts, left)]
    atomic_write_text(out_dir / "advise-validation.md", "\n".join(md) + "\n")
