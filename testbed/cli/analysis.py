"""The analysis commands of ``netsense``: sweep, plot, report, compare, pack, export, sensing.

Kept apart from testbed/cli/app.py (the orchestrator's commands) so each half can change
without touching the other; app.py calls ``register(app)``, and what both need (the error
line, ``preflight``) is in testbed/cli/common.py. Errors in the input (unknown sweep,
bad field, missing results folder) print one line and exit 2, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from testbed.cli.common import (
    DEFAULT_RESULTS,
    ResultsOption,
    SetOption,
    away_from_committed,
    deprecated,
    fail,
    parse_overrides,
    preflight,
)

EXIT_INTERRUPTED = 130

VerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="also say which figures and tables were not made, and why")]
IncludeDegradedOption = Annotated[bool, typer.Option(
    "--include-degraded", help="count degraded runs (the host did not keep up with the "
    "emulated accelerator) in the statistics; left out by default")]

PathArg = Annotated[Path | None, typer.Argument(
    help="a run folder or a folder of run folders (same as --results)", metavar="[PATH]",
    show_default=False)]


def _check_out(path: Path, option: str, *, folder: bool) -> None:
    """Exit 2 with one line when ``path`` cannot be written (testbed.common.outputs)."""
    from testbed.common.outputs import OutputError, check_dir, check_file

    try:
        (check_dir if folder else check_file)(path, option)
    except OutputError as exc:
        fail(str(exc))


SweepArg = Annotated[str, typer.Argument(
    help="sweep name (netsense list) or a path to a YAML file", metavar="SWEEP")]
DryRunOption = Annotated[bool, typer.Option(
    "--dry-run", "-n", help="per experiment: runs and estimated minutes; run nothing")]
DryRunVerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="with --dry-run: also one row per run")]
OnlyOption = Annotated[list[str] | None, typer.Option(
    "--only", metavar="EXPERIMENT", help="run only this experiment (repeatable)")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")]
ExecutorOption = Annotated[str, typer.Option(
    "--executor", help="where runs execute: local (here, one at a time), ray (the Ray "
    "cluster of RAY_ADDRESS or this node) or ray:ADDRESS; one run per node holding the "
    "Ray resource netsense_host")]
RetriesOption = Annotated[int, typer.Option(
    "--retries", help="ray: times a run whose worker or node was lost is re-submitted "
    "before it is marked failed")]
SweepMethodOption = Annotated[list[str] | None, typer.Option(
    "--method", "-m", help="run only this method of the sweep (repeatable)")]
PointOption = Annotated[list[str] | None, typer.Option(
    "--point", metavar="KEY=VALUE", help="run only the grid points where KEY (a grid "
    "key as the run folders name it, e.g. rate_mbit) has VALUE; repeatable: the same KEY "
    "again adds values, another KEY narrows")]
SweepSeedOption = Annotated[list[int] | None, typer.Option(
    "--seed", "-s", metavar="N", help="run only this seed of the sweep (repeatable)")]


def sweep_cmd(
    sweep: SweepArg,
    results: ResultsOption = DEFAULT_RESULTS,
    set_: SetOption = None,
    dry_run: DryRunOption = False,
    verbose: DryRunVerboseOption = False,
    only: OnlyOption = None,
    quiet: QuietOption = False,
    executor: ExecutorOption = "local",
    retries: RetriesOption = 1,
    method: SweepMethodOption = None,
    point: PointOption = None,
    seed: SweepSeedOption = None,
) -> None:
    """Run a sweep: scenario grid x methods x seeds; finished (ok) runs are skipped.

    --set applies to every run of every experiment (after the sweep's own overrides and
    grid, so it wins). --only, --method, --point and --seed select a part of the sweep
    (its runs keep their folders, so the parts add up to the whole).
    """
    from testbed.config import sweep as sw
    from testbed.orchestration.executors import LocalExecutor, parse_executor

    console = Console(width=max(120, Console().width))
    try:
        ex = parse_executor(executor, retries)
        spec, runs = _sweep_runs(sweep, results, set_,
                                 _Selection(only or [], method or [], point or [], seed or []))
    except sw.SweepError as exc:
        fail(str(exc))
    if not dry_run:
        _check_out(results, "--results", folder=True)
    _check_gpus(runs)
    if dry_run:
        _print_dry_run(spec.name, runs, console, verbose)
        return
    if isinstance(ex, LocalExecutor):
        preflight()  # may re-execute the sweep in a rootless namespace (the runs resume there)
    _run_and_report(spec.name, runs, ex, results, console, quiet)


@dataclass(frozen=True)
class _Selection:
    """The part of a sweep the command line asked for; empty lists select everything."""

    only: list[str]
    method: list[str]
    point: list[str]
    seed: list[int]


def _sweep_runs(sweep: str, results: Path, set_: list[str] | None,
                sel: _Selection) -> tuple[Any, list[Any]]:
    """The sweep's spec and its runs as the selection and ``--set`` leave them, scenarios
    resolved; raises SweepError naming the option that names nothing."""
    from testbed.config import sweep as sw

    spec = sw.load_sweep(sweep)
    names = [e.name for e in spec.experiments]
    for o in sel.only:
        if o not in names:
            raise sw.SweepError(f"--only: unknown experiment {o!r}; experiments: "
                                f"{', '.join(names)}")
    everything = sw.expand(spec, results)
    _check_listed("--method", sel.method, {r.method for r in everything}, spec.name)
    _check_listed("--seed", sel.seed, {r.seed for r in everything}, spec.name)
    runs = [r for r in everything
            if (not sel.only or r.experiment in sel.only)
            and (not sel.method or r.method in sel.method)
            and (not sel.seed or r.seed in sel.seed)]
    runs = _at_points(runs, sel.point)
    if set_:
        runs = sw.with_overrides(runs, parse_overrides(set_))
    return spec, sw.resolve_scenarios(runs, base_dir=sw.resolve_sweep_path(sweep).parent)


def _check_listed(option: str, asked: list[Any], listed: set[Any], sweep: str) -> None:
    from testbed.config import sweep as sw

    for a in asked:
        if a not in listed:
            raise sw.SweepError(f"{option}: {a!r} is not in sweep {sweep}; allowed: "
                                f"{', '.join(str(x) for x in sorted(listed))}")


def _at_points(runs: list[Any], points: list[str]) -> list[Any]:
    """The runs whose grid values match every ``--point KEY=VALUE`` key (any of its values).

    Values compare as the run folders write them (``rate_mbit=1000``), so a point is named
    the way ``--dry-run -v`` and the folders show it."""
    from testbed.config import sweep as sw

    wanted: dict[str, set[str]] = {}
    for item in points:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise sw.SweepError(f"--point {item!r}: expected KEY=VALUE, e.g. rate_mbit=1000")
        wanted.setdefault(key.strip(), set()).add(value.strip())
    for key, values in wanted.items():
        seen = {sw.fmt_value(r.params[key]) for r in runs if key in r.params}
        if not seen:
            keys = sorted({k for r in runs for k in r.params})
            raise sw.SweepError(f"--point: {key!r} is not a grid key of the selected runs; "
                                f"keys: {', '.join(keys) or '(none: no grid)'}")
        missing = sorted(values - seen)
        if missing:
            raise sw.SweepError(f"--point {key}={missing[0]}: not a grid value; values: "
                                f"{', '.join(sorted(seen, key=_numeric_first))}")
    return [r for r in runs
            if all(key in r.params and sw.fmt_value(r.params[key]) in values
                   for key, values in wanted.items())]


def _numeric_first(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def _check_gpus(runs: list[Any]) -> None:
    """Exit 2 before any run where a run's workers need more GPUs than are visible (NCCL
    needs a GPU per emulated worker)."""
    from testbed.orchestration import gpus

    visible = gpus.visible_gpus()
    for r in runs:
        if r.scenario is None:
            continue
        try:
            gpus.plan(r.scenario.workload.device, r.scenario.workload.backend,
                      r.scenario.world_size, visible)
        except gpus.GpuPlanError as exc:
            fail(f"{r.label}: {exc}")


def _print_dry_run(name: str, runs: list[Any], console: Console, verbose: bool) -> None:
    """``--dry-run``: a row per experiment (per run with ``--verbose``), then the pending
    count and the estimated time with what the estimate rests on."""
    from testbed.config import sweep as sw
    from testbed.orchestration.sweep import dry_run_rows

    rows, total = dry_run_rows(runs)
    t = Table(title=f"sweep {name}: {len(rows)} runs", title_justify="left")
    for c, just in (("experiment", "left"), ("kind", "left"), ("runs", "right"),
                    ("pending", "right"), ("grid", "left"), ("methods", "right"),
                    ("seeds", "right"), ("est. min", "right")):
        t.add_column(c, justify=just)  # type: ignore[arg-type]
    for e in sw.experiment_summary(runs, rows):
        t.add_row(e["experiment"], e["kind"], str(e["runs"]), str(e["pending"]), e["grid"],
                  str(e["methods"]), str(e["seeds"]), f"{e['est_s'] / 60:.1f}")
    console.print(t)
    if verbose:
        console.print(_dry_run_runs(rows))
    pending = sum(1 for r in rows if r["state"] == "pending")
    at_most = "at most " if any(r.get("bound") for r in rows) else ""
    console.print(f"{pending} pending, {len(rows) - pending} done; estimated {at_most}"
                  f"{total / 60:.1f} min = {total / 3600:.1f} h ({_estimate_basis(rows)})"
                  + ("" if verbose else "; --verbose lists every run"), highlight=False)


def _dry_run_runs(rows: list[dict[str, Any]]) -> Table:
    """``--dry-run --verbose``: one row per run."""
    v = Table(title="runs", title_justify="left")
    for c in ("experiment", "params", "method", "seed", "state", "k", "virtual_s", "est_s"):
        v.add_column(c, justify="right" if c in ("seed", "k", "virtual_s", "est_s") else "left")
    for r in rows:
        v.add_row(r["experiment"], r["params"], r["method"], str(r["seed"]), r["state"],
                  f"{r['k']:g}", f"{r['virtual_s']:.1f}", f"{r['est_s']:.0f}")
    return v


def _estimate_basis(rows: list[dict[str, Any]]) -> str:
    """What the dry run's estimate rests on, with the dilation factors of paced runs."""
    from testbed.config import sweep as sw

    paced = [r for r in rows if r["k"] != 1.0 or r.get("step_s")]
    basis = (f"training time limit or steps x {sw.FALLBACK_STEP_S} s, or to the target "
             "where the run stops at it (the convergence table's steps x its step + the "
             "transfer and the queue behind cross traffic; an adaptive method at its best "
             f"fixed level), + {sw.PER_RUN_OVERHEAD_S:.1f} s per run for build, worker "
             "start-up and teardown")
    bound = sum(1 for r in rows if r.get("bound"))
    if bound:
        basis = (f"{basis}; {bound} own-job runs at most their deadline each (an own job "
                 "decides its length)")
    if paced:
        ks = sorted(r["k"] for r in paced)
        basis = (f"{basis}; {len(paced)} runs on the emulated accelerator: virtual "
                 f"training time (time limit, or steps x the profile's step + codec + the "
                 f"closed-form transfer; to the target from the convergence table where the run "
                 f"stops at it) x the dilation factor k (given, or for auto "
                 f"estimated from this host's measured costs: k {ks[0]:.0f}-{ks[-1]:.0f}), "
                 "+ the recorded-gradient step and the auto host timing, once per configuration; "
                 "testbed/config/estimate.py")
    return basis


def _run_and_report(name: str, runs: list[Any], ex: Any, results: Path, console: Console,
                    quiet: bool) -> None:
    """The sweep's runs, then one summary line and a line per failed run; exit 130 when
    interrupted, 1 when a run failed."""
    from testbed.config import sweep as sw
    from testbed.orchestration.sweep import SweepLocked, run_sweep

    try:
        rep = run_sweep(runs, console=console, progress=not quiet, executor=ex)
    except (SweepLocked, sw.SweepError) as exc:  # another sweep; Ray missing or unusable
        fail(str(exc))
    console.print(f"sweep {name}: {rep.ok} ok, {len(rep.failed)} failed, {rep.skipped} "
                  f"skipped (already ok) in {rep.seconds / 60:.1f} min; results in "
                  f"{results / name}", highlight=False)
    for label in rep.failed:
        console.print(f"  failed: {label}  (re-run the sweep to retry only these)",
                      highlight=False)
    if rep.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if rep.failed:
        raise typer.Exit(1)


def _folder(path: Path | None, results: Path) -> Path:
    folder = path if path is not None else results
    if not folder.is_dir():
        fail(f"--results: no such folder {str(folder)!r}")
    return folder


def _not_into_committed(folder: Path, figures: Path | None, html: Path | None = None,
                        report: bool = False) -> tuple[Path | None, Path | None]:
    """The outputs ``plot``/``report`` write when a default would land inside a results
    tree git tracks (the committed evaluation, ``results/runs/``): its view folder instead
    (``away_from_committed``), said on stderr; an output the user named is written where
    named."""
    if figures is not None and (html is not None or not report):
        return figures, html
    view = away_from_committed(folder, "--figures/-f and --html" if report else "--figures/-f")
    if view is None:
        return figures, html
    figures = figures if figures is not None else view / "figures"
    html = html if html is not None or not report else view / "report.html"
    return figures, html


def plot_cmd(
    path: PathArg = None,
    results: ResultsOption = DEFAULT_RESULTS,
    figures: Annotated[Path | None, typer.Option(
        "--figures", "-f", metavar="DIR", help="figures folder (default RESULTS/figures; "
        "for a results tree git tracks, results/views/<its path>/figures)")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", hidden=True)] = None,
    verbose: VerboseOption = False,
    include_degraded: IncludeDegradedOption = False,
) -> None:
    """Figures (PNG + PDF) and tables (CSV) from the run folders under RESULTS.

    A results tree git tracks (the committed runs under results/runs/) is never written
    into unless --figures names it: its figures go to results/views/<its path>/ (said).

    Works on one run folder too (`netsense plot -r results/smoke/<run id>`): its accuracy
    curve and, when it has a timeline, its network/adaptation timeline.
    """
    from testbed.analysis import plots
    from testbed.analysis.results import Results

    if out is not None:
        deprecated("plot --out/-o", "--figures/-f")
        figures = figures or out
    folder = _folder(path, results)
    figures, _ = _not_into_committed(folder, figures)
    _check_out(figures or folder / "figures", "--figures", folder=True)
    try:
        written = plots.make_figures(
            Results.load(folder, include_degraded=include_degraded), figures, verbose=verbose,
            log=lambda m: Console(stderr=True).print(f"note: {m}", highlight=False,
                                                     markup=False))
    except plots.NoData as exc:
        fail(str(exc))
    for name, paths in written.items():
        Console().print(f"{name}: " + ", ".join(str(p) for p in paths), highlight=False,
                        soft_wrap=True)


def report_cmd(
    path: PathArg = None,
    results: ResultsOption = DEFAULT_RESULTS,
    html: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="HTML file (default RESULTS/report.html; for a results "
        "tree git tracks, results/views/<its path>/report.html)")] = None,
    figures: Annotated[Path | None, typer.Option(
        "--figures", "-f", metavar="DIR", help="figures folder (default RESULTS/figures; for "
        "a results tree git tracks, results/views/<its path>/figures)")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", hidden=True)] = None,
    verbose: VerboseOption = False,
    include_degraded: IncludeDegradedOption = False,
) -> None:
    """One self-contained HTML page: the claim (time to accuracy), throughput, figures,
    tables, scenarios, versions.

    A results tree git tracks (the committed runs under results/runs/) is never written
    into unless --figures/--html name it: the page and figures go to
    results/views/<its path>/ (said).
    """
    from testbed.analysis import plots, report

    if out is not None:
        deprecated("report --out/-o", "--html")
        html = html or out
    folder = _folder(path, results)
    figures, html = _not_into_committed(folder, figures, html, report=True)
    _check_out(html or folder / "report.html", "--html", folder=False)
    _check_out(figures or folder / "figures", "--figures", folder=True)
    try:
        page = report.build_report(folder, html, figures, verbose=verbose,
                                   include_degraded=include_degraded,
                                   log=lambda m: Console(stderr=True).print(
                                       f"note: {m}", highlight=False, markup=False))
    except plots.NoData as exc:
        fail(str(exc))
    Console().print(f"report: {page}", highlight=False, soft_wrap=True)


def compare_cmd(
    paths: Annotated[list[Path], typer.Argument(
        help="run folders or folders of run folders (any number, from anywhere)",
        metavar="RUN_OR_FOLDER...", show_default=False)],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", metavar="DIR", help="folder for compare.csv and compare.png/.pdf "
        "(default ./compare; inside a results tree git tracks, its view folder)")] = None,
    include_degraded: IncludeDegradedOption = False,
) -> None:
    """Any runs side by side: headline metrics per group (95 % intervals over seeds) and
    their accuracy, step-time and level timelines on shared axes."""
    from testbed.analysis import compare
    from testbed.analysis.figures import NoData, style

    for p in paths:
        if not p.is_dir():
            fail(f"RUN_OR_FOLDER: no such folder {str(p)!r}")
    out = out if out is not None else _compare_out(paths)
    _check_out(out, "--out", folder=True)
    err = Console(stderr=True)
    runs, steps = _compared_runs(paths, include_degraded, err)
    groups = compare.table(runs)
    n_deg = compare.degraded_left_out(runs)
    if groups.empty:
        fail("RUN_OR_FOLDER: none of the runs finished ok; nothing to compare")
    console = Console(width=max(120, Console().width))
    console.print(_compare_table(groups))
    console.print("± : half-width of the 95 % t-interval over seeds (none with one seed); "
                  "TTA (s; virtual s where k != 1) only when every seed reached the target; compute: "
                  "native, or paced by the emulated accelerator (profile, dilation k: times "
                  "of a dilated run are virtual seconds); overruns: share of steps that did "
                  "not fit the profiled slot; host other %: the host's load by other work"
                  + (f"; {n_deg} degraded run(s) left out (--include-degraded counts them)"
                     if n_deg else ""), highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    from testbed.analysis.plots import write_csv

    written = [write_csv(groups, out / "compare.csv")]
    try:
        written += style.save(compare.figure(runs, steps, groups), out, "compare")
    except NoData as exc:
        err.print(f"note: no figure: {exc}", highlight=False, markup=False)
    for p in written:
        console.print(str(p), highlight=False, soft_wrap=True)


def _compare_out(paths: list[Path]) -> Path:
    """``compare``'s default folder: ``./compare``, unless that lies inside a compared folder
    git tracks (``cd results/runs/x && netsense compare .``): then that folder's view."""
    out = Path("compare")
    for p in paths:
        if out.resolve().is_relative_to(p.resolve()):
            view = away_from_committed(p, "--out/-o")
            if view is not None:
                return view / "compare"
    return out


def _compared_runs(paths: list[Path], include_degraded: bool, err: Console) -> tuple[Any, Any]:
    """The runs and steps under ``paths``; a note on stderr for each damaged run excluded and
    each run that did not finish ok; exit 2 where there is no run folder."""
    from testbed.analysis import compare, loading

    runs, steps = compare.load(paths, include_degraded=include_degraded)
    for e in loading.excluded_of(runs):
        err.print(f"note: excluded damaged run {e.run}: {e.reason}", highlight=False,
                  markup=False)
    if runs.empty:
        fail("RUN_OR_FOLDER: no run folders (summary.json) under "
             + ", ".join(str(p) for p in paths))
    for _, r in runs[runs["status"] != "ok"].iterrows():
        err.print(f"note: left out: {r['run']} is {r['status']}", highlight=False,
                  markup=False)
    return runs, steps


def _pm(v: float, ci: float, fmt: str) -> str:
    """``v ± ci`` (``-`` for a missing value, no interval where there is none)."""
    if v != v:
        return "-"
    return format(v, fmt) + (f" ± {format(ci, fmt)}" if ci == ci else "")


def _compare_table(groups: Any) -> Table:
    """``compare``'s table: one row per group of runs."""
    from testbed.analysis.tables import NOT_REPORTED

    t = Table(title=f"compare: {len(groups)} groups", title_justify="left")
    for c in ("group", "runs", "compute", "samples/s", "steps/s", "TTA s", "reached",
              "final acc", "MB sent", "overruns", "host other %", "degraded"):
        # text columns wrap, never end in "...": netsenseml and netsenseml-paper were both
        # cut to "netsense..." in a narrow terminal
        text = c in ("group", "compute", "degraded", "reached")
        t.add_column(c, justify="left" if text else "right",
                     overflow="fold" if text else "ellipsis", min_width=12 if c == "group" else None)
    for g in groups.itertuples():
        t.add_row(g.group, str(g.runs), g.compute, _pm(g.throughput, g.throughput_ci, ".1f"),
                  _pm(g.steps_per_s, g.steps_per_s_ci, ".1f"),
                  _pm(g.tta_s, g.tta_ci, ".2f"), g.reached,
                  g.reached if g.reached == NOT_REPORTED
                  else _pm(g.final_accuracy, g.final_accuracy_ci, ".3f"),
                  "-" if g.mb_sent != g.mb_sent else f"{g.mb_sent:.1f}",
                  "-" if g.overrun_share != g.overrun_share else f"{100 * g.overrun_share:.1f} %",
                  "-" if g.host_other_pct != g.host_other_pct else f"{g.host_other_pct:.0f}",
                  g.degraded or "")
    return t


def pack_cmd(
    results_dir: Annotated[Path, typer.Argument(
        help="a results folder (run folders below it)", metavar="RESULTS_DIR")],
    out: Annotated[Path, typer.Option(
        "--out", "-o", metavar="DIR", help="where the compact copies go, e.g. "
        "results/runs/<evaluation>")],
    replace: Annotated[bool, typer.Option(
        "--replace", help="replace DIR's packed runs (one copy per evaluation, not one per "
        "re-run)")] = False,
    rank0_rows: Annotated[int, typer.Option(
        "--rank0-rows", min=10, help="rank 0's training rows kept per run (every evaluation "
        "row is kept)")] = 400,
    series_rows: Annotated[int, typer.Option(
        "--series-rows", min=10, help="rows kept per link of bottleneck.csv and of host.csv")
    ] = 600,
) -> None:
    """Compact copies of run folders for committing (config, summary, events, downsampled
    steps, bottleneck and host series; no worker logs, no captures): report, compare and
    plot read them as they read the full ones."""
    from testbed.analysis import pack

    _check_out(out, "--out", folder=True)
    err = Console(stderr=True)
    try:
        n, size = pack.pack(results_dir, out, replace=replace, rank0_rows=rank0_rows,
                            series_rows=series_rows,
                            log=lambda m: err.print(f"note: {m}", highlight=False,
                                                    markup=False))
    except pack.PackError as exc:
        fail(str(exc))
    Console().print(f"packed {n} runs into {out} ({size / 1e6:.2f} MB)", highlight=False,
                    soft_wrap=True)


def export_cmd(
    paths: Annotated[list[Path], typer.Argument(
        help="run folders or folders of run folders", metavar="RUN_OR_FOLDER...",
        show_default=False)],
    tensorboard: Annotated[Path | None, typer.Option(
        "--tensorboard", metavar="DIR", help="write TensorBoard event files under DIR "
        "(tensorboard --logdir DIR)")] = None,
    mlflow: Annotated[str | None, typer.Option(
        "--mlflow", metavar="EXPERIMENT", help="log each run to this MLflow experiment "
        "(needs the mlflow extra)")] = None,
    wandb: Annotated[str | None, typer.Option(
        "--wandb", metavar="PROJECT", help="log each run to this W&B project (needs the "
        "wandb extra)")] = None,
) -> None:
    """Export runs to TensorBoard, MLflow or W&B: per step loss, accuracy, step time,
    level, kept ratio and the configured rate."""
    from testbed.analysis import compare, export

    if tensorboard is None and mlflow is None and wandb is None:
        fail("export: give --tensorboard DIR, --mlflow EXPERIMENT or --wandb PROJECT")
    for p in paths:
        if not p.is_dir():
            fail(f"RUN_OR_FOLDER: no such folder {str(p)!r}")
    try:
        if mlflow is not None:
            export.require("mlflow")
        if wandb is not None:
            export.require("wandb")
    except export.ExportError as exc:
        fail(str(exc))
    if tensorboard is not None:
        _check_out(tensorboard, "--tensorboard", folder=True)
    console = Console()
    for p, name in zip(paths, compare._names(paths), strict=True):
        if tensorboard is not None:
            dirs = export.tensorboard(p, tensorboard, name)
            console.print(f"{p}: {len(dirs)} runs -> {tensorboard / name}", highlight=False,
                          soft_wrap=True)
        if mlflow is not None:
            console.print(f"{p}: {export.mlflow_export(p, mlflow)} runs -> MLflow {mlflow}",
                          highlight=False)
        if wandb is not None:
            console.print(f"{p}: {export.wandb_export(p, wandb)} runs -> W&B {wandb}",
                          highlight=False)


def sensing_cmd(
    run_dir: Annotated[Path, typer.Argument(help="one run folder (with bottleneck.csv)")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="folder for sensing.csv/.json/.png (default: the run folder; "
        "for a run git tracks, its view folder)")] = None,
) -> None:
    """Sensing validation: the monitor's estimates against the bottleneck's truth.

    A committed run (git tracks it) is never written into unless --out names it."""
    from testbed.analysis import sensing

    if not run_dir.is_dir():
        fail(f"run_dir: no such folder {str(run_dir)!r}")
    if out is None:
        out = away_from_committed(run_dir, "--out/-o")
    try:
        summary, written = sensing.write(run_dir, out)
    except sensing.SensingError as exc:
        fail(str(exc))
        return
    rel = summary["rate_mae_relative"]
    Console().print(
        f"bottleneck {summary['bottleneck']['link']} -> {summary['bottleneck']['toward']}: "
        f"{summary['steps_compared']} steps; rate MAE {summary['rate_mae_mbit']} Mbit/s"
        + (f" ({rel:.0%} of the mean available {summary['mean_available_mbit']} Mbit/s)"
           if rel is not None else "")
        + f", bias {summary['rate_bias_mbit']} Mbit/s; queueing-delay MAE "
        f"{summary['queue_mae_ms']} ms", highlight=False)
    phases = "; ".join(
        f"{ph}: {summary[f'steps_{ph}']} steps, median |error| "
        + (f"{summary[f'rate_medae_rel_{ph}']:.0%}" if summary[f"rate_medae_rel_{ph}"] is not None
           else "-") + " of the available rate, "
        + (f"{summary[f'rate_medae_rel_{ph}_fair']:.0%}" if summary.get(f"rate_medae_rel_{ph}_fair")
           is not None else "-") + " of the fair share"
        + (f" (the policy's truth, {summary['needed'][ph]}: bias "
           f"{summary[f'rate_bias_rel_{ph}_needed']:+.0%})"
           if summary.get(f"rate_bias_rel_{ph}_needed") is not None else "")
        for ph in ("idle", "congested"))
    Console().print(f"{phases}; coverage {summary['coverage']:.0%}; dilation k "
                    f"{summary.get('dilation', 1.0):g} (the congested phases' competition "
                    "depends on it)", highlight=False)
    Console().print(
        f"min RTT: monitor {summary['est_min_rtt_ms']} ms, kernel (tcpi_min_rtt) "
        f"{summary['tcp_min_rtt_ms']} ms, ratio {summary['min_rtt_ratio']}", highlight=False)
    if summary.get("segments"):
        Console().print("level changes per segment (probes left out): " + ", ".join(
            f"{s['phase'][0].upper()} {s['changes']}" for s in summary["segments"])
            + "; ladder rungs incl. top-k ratio moves: " + ", ".join(
            f"{s['phase'][0].upper()} {s.get('ladder_changes', '-')}" for s in summary["segments"]),
            highlight=False)
    for p in written:
        Console().print(str(p), highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``sweep``, ``plot``, ``report``, ``compare``, ``pack``, ``export`` and ``sensing``
    to the main ``netsense`` app."""
    app.command("sweep")(sweep_cmd)
    app.command("plot")(plot_cmd)
    app.command("report")(report_cmd)
    app.command("compare")(compare_cmd)
    app.command("export")(export_cmd)
    app.command("pack")(pack_cmd)
    app.command("sensing")(sensing_cmd)
