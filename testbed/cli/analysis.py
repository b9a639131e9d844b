"""The analysis commands of ``netsense``: ``sweep``, ``plot``, ``report``.

Kept apart from testbed/cli.py (the orchestrator's commands) so each half can change without
touching the other; cli.py calls ``register(app)``. Errors in the input (unknown sweep,
bad field, missing results folder) print one line and exit 2, before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _fail(msg: str, code: int = EXIT_BAD_INPUT) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _check_out(path: Path, option: str, *, folder: bool) -> None:
    """Exit 2 with one line when ``path`` cannot be written (testbed.common.outputs)."""
    from testbed.common.outputs import OutputError, check_dir, check_file

    try:
        (check_dir if folder else check_file)(path, option)
    except OutputError as exc:
        _fail(str(exc))


def sweep_cmd(
    sweep: Annotated[str, typer.Argument(
        help="sweep name in testbed/sweeps/ (e.g. paper-quick) or a path to a YAML file")],
    results: Annotated[Path, typer.Option(
        "--results", "-r", help="results root; runs go to RESULTS/<sweep>/...")] = Path("results"),
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="list the runs and an estimated duration; run nothing")] = False,
    only: Annotated[list[str] | None, typer.Option(
        "--only", help="run only this experiment (repeatable)")] = None,
    executor: Annotated[str, typer.Option(
        "--executor", help="where runs execute: local (here, one at a time), ray (the Ray "
        "cluster of RAY_ADDRESS or this node) or ray:ADDRESS; one run per node holding the "
        "Ray resource netsense_host")] = "local",
    retries: Annotated[int, typer.Option(
        "--retries", help="ray: times a run whose worker or node was lost is re-submitted "
        "before it is marked failed")] = 1,
) -> None:
    """Run a sweep: scenario grid x methods x seeds; finished (ok) runs are skipped."""
    from testbed.config import sweep as sw
    from testbed.orchestration.executors import LocalExecutor, parse_executor
    from testbed.orchestration.sweep import dry_run_rows, run_sweep

    console = Console()
    try:
        only = only or []
        ex = parse_executor(executor, retries)
        spec = sw.load_sweep(sweep)
        names = [e.name for e in spec.experiments]
        for o in only:
            if o not in names:
                raise sw.SweepError(f"--only: unknown experiment {o!r}; experiments: "
                                    f"{', '.join(names)}")
        runs = [r for r in sw.expand(spec, results) if not only or r.experiment in only]
        runs = sw.resolve_scenarios(runs, base_dir=sw.resolve_sweep_path(sweep).parent)
    except sw.SweepError as exc:
        _fail(str(exc))
        return
    if not dry_run:
        _check_out(results, "--results", folder=True)
    if dry_run:
        rows, total = dry_run_rows(runs)
        t = Table(title=f"sweep {spec.name}: {len(rows)} runs")
        for c in ("experiment", "params", "method", "seed", "state", "est_s"):
            t.add_column(c, justify="right" if c in ("seed", "est_s") else "left")
        for r in rows:
            t.add_row(r["experiment"], r["params"], r["method"], str(r["seed"]), r["state"],
                      f"{r['est_s']:.0f}")
        console.print(t)
        pending = sum(1 for r in rows if r["state"] == "pending")
        console.print(f"{pending} pending, {len(rows) - pending} done; estimated "
                      f"{total / 60:.1f} min (training time limit or steps x "
                      f"{sw.FALLBACK_STEP_S} s, + {sw.PER_RUN_OVERHEAD_S:.0f} s per run for "
                      "build, worker start-up and teardown)")
        return
    if isinstance(ex, LocalExecutor):
        from testbed.cli.app import preflight

        preflight()  # may re-execute the sweep in a rootless namespace (the runs resume there)
    from testbed.orchestration.sweep import SweepLocked

    try:
        rep = run_sweep(runs, console=console, executor=ex)
    except (SweepLocked, sw.SweepError) as exc:  # another sweep; Ray missing or unusable
        _fail(str(exc))
        return
    console.print(f"sweep {spec.name}: {rep.ok} ok, {len(rep.failed)} failed, {rep.skipped} "
                  f"skipped (already ok) in {rep.seconds / 60:.1f} min; results in "
                  f"{results / spec.name}")
    for label in rep.failed:
        console.print(f"  failed: {label}  (re-run the sweep to retry only these)")
    if rep.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if rep.failed:
        raise typer.Exit(1)


def plot_cmd(
    results: Annotated[Path, typer.Argument(
        help="folder holding run folders (searched recursively)")] = Path("results"),
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="figures folder (default RESULTS/figures)")] = None,
) -> None:
    """Tables (CSV) and figures (PNG + PDF) from the run folders under RESULTS."""
    from testbed.analysis import plots

    if not results.is_dir():
        _fail(f"results: no such folder {str(results)!r}")
    _check_out(out or results / "figures", "--out", folder=True)
    try:
        written = plots.make_figures(results, out, log=lambda m: Console().print(f"[yellow]{m}"))
    except plots.NoData as exc:
        _fail(str(exc))
        return
    for name, paths in written.items():
        Console().print(f"{name}: " + ", ".join(str(p) for p in paths), highlight=False)


def report_cmd(
    results: Annotated[Path, typer.Argument(
        help="folder holding run folders (searched recursively)")] = Path("results"),
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="HTML file (default RESULTS/report.html)")] = None,
    figures: Annotated[Path | None, typer.Option(
        "--figures", help="figures folder (default RESULTS/figures)")] = None,
) -> None:
    """One self-contained HTML page: figures, tables, scenarios and software versions."""
    from testbed.analysis import plots, report

    if not results.is_dir():
        _fail(f"results: no such folder {str(results)!r}")
    _check_out(out or results / "report.html", "--out", folder=False)
    _check_out(figures or results / "figures", "--figures", folder=True)
    try:
        path = report.build_report(results, out, figures,
                                   log=lambda m: Console().print(f"[yellow]{m}"))
    except plots.NoData as exc:
        _fail(str(exc))
        return
    Console().print(f"report: {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``sweep``, ``plot`` and ``report`` to the main ``netsense`` app."""
    app.command("sweep")(sweep_cmd)
    app.command("plot")(plot_cmd)
    app.command("report")(report_cmd)
