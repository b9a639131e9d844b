"""The ``netsense`` command: run, list, doctor, clean (+ sweep, plot, report from analysis).

Exit codes: 0 all runs ok; 1 a run failed (its folder says why); 2 bad input (one line on
stderr, ``error: ...``, nothing built); 130/143 interrupted by SIGINT/SIGTERM (after
teardown; the interrupted run's folder says failed).

Heavy imports (torch via netsenseml, Mininet) happen only inside the commands that need
them, so ``netsense list`` and bad-input errors answer fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

app = typer.Typer(
    name="netsense",
    help="NetSense testbed: emulated networks, DDP workers, scenarios and results.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_RESULTS = Path("results")


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr and exit; the contract for bad input."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


MAX_SET_BYTES = 64 * 1024


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    """``dotted.path=value`` items; values are YAML under the same bounds as files
    (testbed.common.bounded), and text that is not YAML stays a plain string."""
    from testbed.common import bounded

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            fail(f"--set {item!r}: expected dotted.path=value")
        key, raw = item.split("=", 1)
        if len(raw.encode()) > MAX_SET_BYTES:
            fail(f"--set {key.strip()}: value longer than {MAX_SET_BYTES} bytes")
        try:
            out[key.strip()] = bounded.parse_yaml(raw, f"--set {key.strip()}")
        except bounded.BoundError as exc:
            if "YAML syntax error" not in str(exc):
                fail(str(exc))
            out[key.strip()] = raw
    return out


@app.command()
def run(
    scenario: Annotated[str, typer.Argument(help="scenario name (testbed/scenarios/) or path")],
    method: Annotated[
        list[str] | None,
        typer.Option("--method", "-m", help="method spec; repeatable (default: the scenario's)"),
    ] = None,
    seed: Annotated[
        list[int] | None, typer.Option("--seed", "-s", help="seed; repeatable (default: scenario's)")
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="results root; runs go to OUT/<scenario>/<run_id>")
    ] = DEFAULT_RESULTS,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a field: dotted.path=value (YAML value); repeatable"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress line")] = False,
) -> None:
    """Run a scenario: every method x seed (or those given), one run folder each."""
    from testbed.config.scenario import ScenarioError, apply_overrides, check_method, load_scenario

    try:
        scn = load_scenario(scenario)
        if set_:
            scn = apply_overrides(scn, _parse_overrides(set_))
        methods = list(method) if method else list(scn.methods)
        for m in methods:
            try:
                check_method(m)
            except ValueError as exc:
                raise ScenarioError(f"--method: {exc}") from None
        seeds = list(seed) if seed else list(scn.seeds)
        from testbed.config.scenario import MAX_SEED

        for s in seeds:
            if not 0 <= s <= MAX_SEED:
                raise ScenarioError(f"--seed: {s} is not in [0, {MAX_SEED}] (numpy seeds are "
                                    "32-bit)")
    except ScenarioError as exc:
        fail(str(exc))
    from testbed.common.outputs import OutputError, check_dir

    try:
        check_dir(out, "--out")
    except OutputError as exc:
        fail(str(exc))
    if scn.topology.kind != "hosts":  # real hosts: nothing is emulated on this machine
        preflight()

    from testbed.orchestration import launcher
    from testbed.orchestration.run import RunInterrupted, make_run_id, run_scenario

    root = out / scn.name
    outcomes = []
    run_dir: Path | None = None
    try:
        with launcher.shared():  # one pre-imported worker for every run of this command
            for s in seeds:
                for m in methods:
                    run_dir = _unique(root / make_run_id(m, s))
                    outcomes.append(run_scenario(scn, m, s, run_dir, progress=not quiet))
    except RunInterrupted as exc:
        _drop_if_empty(run_dir)
        _print_table(scn.name, outcomes)
        typer.echo(f"interrupted ({exc}); torn down, run marked failed", err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:  # between two runs: no run folder is half-made (run.py)
        _drop_if_empty(run_dir)
        _print_table(scn.name, outcomes)
        typer.echo("interrupted between runs; every run folder is final", err=True)
        raise typer.Exit(130) from None
    _print_table(scn.name, outcomes)
    if any(o.status != "ok" for o in outcomes):
        raise typer.Exit(1)


def _drop_if_empty(run_dir: Path | None) -> None:
    """The folder _unique made for a run that an interruption stopped before it wrote
    anything: remove it (rmdir removes only an empty folder), so no folder lacks a record."""
    if run_dir is None:
        return
    try:
        run_dir.rmdir()
    except OSError:
        pass  # not empty: the run wrote its records


def _unique(path: Path) -> Path:
    """Never reuse a folder: two runs in the same second get -2, -3 ... suffixes.

    The folder is *created* here (exclusive mkdir), so two `netsense run`s starting in the
    same second (same method and seed) can never pick the same one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        cand = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            n += 1


def preflight() -> None:
    """Refuse (exit 2) before building anything when this machine cannot emulate; enter
    the rootless mode when this user may not create interfaces here.

    Rootless: the process replaces itself with the same command inside its own user +
    network + mount namespace (testbed.emulation.rootless) and comes back here, inside.
    """
    import shutil

    from testbed.emulation import leftovers, rootless

    mode = rootless.choose_mode()
    if mode.name == "none":
        fail(f"cannot emulate here: {mode.detail}; to fix: {mode.fix} (see `netsense doctor`)")
    for tool in ("mnexec", "iperf3", "tc", "ip"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found; see `netsense doctor`")
    if mode.name == "rootless" and not rootless.in_namespace():
        try:
            state_dir = leftovers.default_state_dir()
            leftovers.ensure_own_dir(state_dir)
        except OSError as exc:
            fail(str(exc))
        rootless.reexec(sys.argv[1:], state_dir)
    if rootless.in_namespace():
        try:
            rootless.prepare_namespace()
        except OSError as exc:
            fail(str(exc))


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _print_table(name: str, outcomes: list[Any]) -> None:
    if not outcomes:
        return
    from rich.console import Console
    from rich.table import Table

    from testbed.orchestration.run import summary_table_rows

    table = Table(title=f"{name}: results", title_justify="left")
    for col, just in (("method", "left"), ("seed", "right"), ("status", "left"),
                      ("samples/s", "right"), ("final acc", "right"), ("TTA s", "right"),
                      ("MB sent", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    failed = []
    for r in summary_table_rows(outcomes):
        table.add_row(
            str(r["method"]), str(r["seed"]), r["status"], _fmt(r["throughput"], ".1f"),
            _fmt(r["final_acc"], ".3f"), _fmt(r["tta"], ".1f"), _fmt(r["mb_sent"], ".1f"),
        )
        if r["status"] != "ok":
            failed.append(f"{r['method']} seed {r['seed']}: {r['reason']}")
    console = Console(width=max(100, Console().width))
    console.print(table)
    console.print(f"run folders: {Path(outcomes[0].run_dir).parent}", highlight=False,
                  markup=False)
    for line in failed:
        console.print(f"failed: {line}", highlight=False, markup=False, soft_wrap=True)


@app.command("list")
def list_() -> None:
    """Bundled scenarios with one-line descriptions."""
    from testbed.config.scenario import list_scenarios

    rows = list_scenarios()
    width = max((len(n) for n, _ in rows), default=0)
    for name, desc in rows:
        typer.echo(f"{name.ljust(width)}  {desc}")


@app.command()
def doctor() -> None:
    """Which mode runs use here (native root / rootless user namespace) and what works.

    Exit 1 when the chosen mode cannot run the testbed; optional features (netem, TBF)
    missing only say what will be refused.
    """
    from rich.console import Console
    from rich.table import Table

    from testbed.cli.doctor import checks, usable

    results = checks()
    table = Table(title="netsense doctor", title_justify="left")
    for col in ("check", "status", "detail", "to fix"):
        table.add_column(col)
    for c in results:
        status = "[green]ok[/]" if c.ok else ("[red]FAILED[/]" if c.required
                                              else "[yellow]missing[/]")
        table.add_row(c.name, status, c.detail or "", "" if c.ok else (c.fix or ""))
    Console(width=max(120, Console().width)).print(table)
    if not usable(results):
        typer.echo("netsense run cannot work here: fix the FAILED checks")
        raise typer.Exit(1)
    missing = [c.name for c in results if not c.ok]
    if missing:
        typer.echo(f"runs work; features needing {', '.join(missing)} are refused")


@app.command()
def clean(
    force: Annotated[
        bool, typer.Option(help="also clean runs whose orchestrator still looks alive")
    ] = False,
) -> None:
    """Remove leftovers of this testbed's own runs (found by prefix and recorded PIDs)."""
    from testbed.emulation import leftovers
    from testbed.orchestration.rundir import repair_dead_runs

    report = leftovers.clean(force=force)
    report["records_repaired"] = repair_dead_runs()
    for key in ("interfaces_removed", "pids_killed", "registries_removed", "records_repaired",
                "skipped_active", "failed"):
        items = report.get(key) or []
        typer.echo(f"{key.replace('_', ' ')}: {len(items)}"
                   + (f" ({', '.join(map(str, items[:10]))})" if items else ""))
    if report.get("failed"):
        raise typer.Exit(1)


def _register_analysis() -> None:
    """Add sweep/plot/report when the analysis module is present.

    find_spec rather than try/except ImportError: a real import error inside the module
    must surface, not silently hide three commands.
    """
    if importlib.util.find_spec("testbed.cli.analysis") is not None:
        importlib.import_module("testbed.cli.analysis").register(app)


_register_analysis()


def main() -> None:  # pragma: no cover - console entry alternative
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
