"""The ``netsense`` command: run, show, list, schema, doctor, clean, convergence (+ sweep,
plot, report, compare, pack, export, sensing from analysis.py; ab from ab.py; simulate
from simulate.py; profile from profile.py; advise from advise.py).

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
from typing import Annotated, Any

import typer
import yaml

from testbed.cli import ab, advise, profile, simulate
from testbed.cli.common import (
    DEFAULT_RESULTS,
    BatchOption,
    DatasetOption,
    ModelArgsOption,
    ModelOption,
    ResultsOption,
    SetOption,
    check_runnable,
    check_workload,
    deprecated,
    fail,
    parse_overrides,
)
from testbed.common import bounded
from testbed.common.names import slug

app = typer.Typer(
    name="netsense",
    help="NetSense testbed: emulated networks, DDP workers, scenarios and results.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags shown as flags, no type boxes
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("netsense")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        typer.echo(f"netsense {v}")
        raise typer.Exit(0)

@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True, help="print the version and exit"
    )] = False,
) -> None:
    """NetSense testbed: emulated networks, DDP workers, scenarios and results.

    Every command that reads or writes run folders takes --results/-r (default: results).
    """

def _load(scenario: str, set_: list[str] | None) -> Any:
    """The scenario with its --set overrides applied, or one error line and exit 2."""
    from testbed.config.scenario import ScenarioError, apply_overrides, load_scenario

    try:
        scn = load_scenario(scenario)
        if set_:
            scn = apply_overrides(scn, parse_overrides(set_))
    except ScenarioError as exc:
        fail(str(exc))
    for line in scn.warnings():  # valid, but probably not what the user meant
        typer.echo(f"warning: scenario {scn.name}: {line}", err=True)
    return scn

ScenarioArg = Annotated[str, typer.Argument(
    help="scenario name (netsense list) or path to a YAML file", metavar="SCENARIO")]
RunMethodOption = Annotated[list[str] | None, typer.Option(
    "--method", "-m", metavar="SPEC", help="method spec; repeatable (default: the scenario's)")]
RunSeedOption = Annotated[list[int] | None, typer.Option(
    "--seed", "-s", metavar="N", help="seed; repeatable (default: scenario's)")]
RunDryRunOption = Annotated[bool, typer.Option(
    "--dry-run", "-n", help="print the runs, their folders and an estimate; run nothing")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="no progress line")]
OldOutOption = Annotated[Path | None, typer.Option("--out", "-o", hidden=True)]


@app.command()
def run(
    scenario: ScenarioArg,
    method: RunMethodOption = None,
    seed: RunSeedOption = None,
    results: ResultsOption = DEFAULT_RESULTS,
    set_: SetOption = None,
    dry_run: RunDryRunOption = False,
    quiet: QuietOption = False,
    out: OldOutOption = None,
) -> None:
    """Run a scenario: every method x seed (or those given), one run folder each.

    Runs go to RESULTS/<scenario>/<run id>; `netsense plot -r` that folder (or one run
    folder) draws its figures.
    """
    if out is not None:
        deprecated("--out/-o", "--results/-r")
        results = out
    scn = _load(scenario, set_)
    methods, seeds = _methods_and_seeds(scn, method, seed)
    root = results / scn.name
    _faithful_note(scn)
    if dry_run:
        _print_run_plan(scn, methods, seeds, root)
        return
    check_runnable(scn, results)
    _run_all(scn, methods, seeds, root, quiet)


def _methods_and_seeds(scn: Any, method: list[str] | None,
                       seed: list[int] | None) -> tuple[list[Any], list[int]]:
    """The runs' methods (``MethodSpec``: those given, each parsed here where it enters,
    else the scenario's, parsed with it) and seeds."""
    from testbed.config.scenario import MAX_SEED, ScenarioError

    try:
        methods = []
        for m in list(method) if method else list(scn.methods):
            try:
                methods.append(scn.method_spec(m))
            except ValueError as exc:
                raise ScenarioError(f"--method: {exc}") from None
        for s in list(seed or []):
            if not 0 <= s <= MAX_SEED:
                raise ScenarioError(f"--seed: {s} is not in [0, {MAX_SEED}] (numpy seeds are "
                                    "32-bit)")
    except ScenarioError as exc:
        fail(str(exc))
    return methods, list(seed) if seed else list(scn.seeds)


def _faithful_note(scn: Any) -> None:
    """A warning line before anything runs when the scenario's training path is configured
    above the emulation's faithful range at the factor it will run at (a native run's 1, a
    given factor); ``dilation: auto`` picks a factor that brings it inside."""
    from testbed.config import faithful

    acc = getattr(scn, "accelerator", None)
    if acc is not None and acc.dilation == "auto":
        return
    text = faithful.warning(scn.model_dump(mode="json"), 1.0 if acc is None else float(acc.dilation))
    if text:
        typer.echo(f"warning: {text}", err=True)


def _print_run_plan(scn: Any, methods: list[Any], seeds: list[int], root: Path) -> None:
    """``run --dry-run``: the runs, their folders and the estimated minutes."""
    from testbed.config.estimate import estimate_runs
    from testbed.orchestration.dilation import is_cached

    plan = estimate_runs([(scn, m) for _ in seeds for m in methods], is_cached)
    est = sum(e["seconds"] for e in plan)
    # an own job decides its length: its deadline bounds each run, said as a bound
    about = (f"at most {est / 60:.1f} min (an own job decides its length; each run ends by "
             f"its deadline, {plan[0]['seconds']:.0f} s: timeout_s)"
             if plan and plan[0].get("bound") else f"about {est / 60:.1f} min")
    typer.echo(f"scenario {scn.name}: {len(methods) * len(seeds)} runs "
               f"({len(methods)} methods x {len(seeds)} seeds), {scn.world_size} workers; "
               f"{about}")
    for s in seeds:
        for m in methods:
            # the folder's name as make_run_id writes it: the method's slug (no ':')
            typer.echo(f"  {str(m):<18} seed {s:<3} -> {root}/<time>-{slug(str(m))}-s{s}/")
    typer.echo("nothing run (--dry-run); `netsense show` prints the resolved scenario")


def _run_all(scn: Any, methods: list[Any], seeds: list[int], root: Path, quiet: bool) -> None:
    """Every seed x method into its own folder under ``root``, then the table; exits 1 when a
    run failed, 130/143 when interrupted (the table covers the runs done)."""
    from testbed.common.files import NoSpace
    from testbed.orchestration import launcher
    from testbed.orchestration.run import RunInterrupted, make_run_id, run_scenario

    outcomes = []
    run_dir: Path | None = None
    try:
        with launcher.shared():  # one pre-imported worker for every run of this command
            for s in seeds:
                for m in methods:
                    run_dir = _unique(root / make_run_id(str(m), s))
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
    except NoSpace as exc:  # before a run (the free-space check) or its first record
        _drop_if_empty(run_dir)
        _print_table(scn.name, outcomes)
        fail(str(exc), 1)
    _print_table(scn.name, outcomes)
    if any(o.status != "ok" for o in outcomes):
        raise typer.Exit(1)

@app.command()
def show(
    scenario: ScenarioArg,
    set_: SetOption = None,
) -> None:
    """Print a scenario as it will run: defaults filled in, --set applied, validated (YAML)."""
    scn = _load(scenario, set_)
    data = scn.model_dump(mode="json")
    typer.echo(f"# {scn.name}: {scn.world_size} workers; every field, defaults filled in")
    typer.echo(f"# topology {scn.topology.kind}, as it will be built:")
    for line in topology_lines(scn.topology):
        typer.echo(f"#   {line}")
    typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000).rstrip())

@app.command()
def schema(
    kind: Annotated[str, typer.Argument(help="scenario or sweep", metavar="scenario|sweep")],
    write: Annotated[bool, typer.Option(
        "--write", help="refresh the committed copy in testbed/schemas/ instead")] = False,
) -> None:
    """The JSON Schema of scenario or sweep files (for editors; testbed/schemas/ has copies)."""
    from testbed.config import schemas

    if kind not in schemas.KINDS:
        fail(f"schema: unknown kind {kind!r}; accepted: {', '.join(schemas.KINDS)}")
    if write:
        typer.echo(f"wrote {schemas.write(kind)}")
    else:
        typer.echo(schemas.text(kind), nl=False)

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
    from testbed.common.files import unique_dir

    return unique_dir(path)

def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _mb(v: float | None) -> str:
    """MB sent: a tenth of a MB, or two digits below it (an own job's small model sent
    0.02 MB, shown as 0.0)."""
    return "-" if v is None else f"{v:.2g}" if 0 < v < 0.1 else f"{v:.1f}"


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
    failed: list[str] = []
    warned: list[str] = []
    for r in summary_table_rows(outcomes):
        silent = r["status"] == "ok" and not r["accuracy_reported"]  # "not reported", not "-"
        table.add_row(
            str(r["method"]), str(r["seed"]), r["status"], _fmt(r["throughput"], ".1f"),
            "not reported" if silent else _fmt(r["final_acc"], ".3f"),
            "not reported" if silent else _fmt(r["tta"], ".1f"), _mb(r["mb_sent"]),
        )
        if r["status"] != "ok":
            failed.append(f"{r['method']} seed {r['seed']}: {r['reason']}")
        for w in r.get("warnings") or []:
            warned.append(f"{r['method']} seed {r['seed']}: {w}")
    console = Console(width=max(100, Console().width))
    console.print(table)
    console.print(f"run folders: {Path(outcomes[0].run_dir).parent}", highlight=False,
                  markup=False)
    if any(r["status"] == "ok" and not r["accuracy_reported"]
           for r in summary_table_rows(outcomes)):
        console.print("not reported: the job reported no accuracy (hooks.report(accuracy=...)"
                      " gives final accuracy and time to accuracy)", highlight=False,
                      markup=False, soft_wrap=True)
    for line in failed:
        console.print(f"failed: {line}", highlight=False, markup=False, soft_wrap=True)
    for line in warned:
        console.print(f"WARNING: {line}", highlight=False, markup=False, soft_wrap=True)

@app.command("list")
def list_() -> None:
    """What there is to run: scenarios, sweeps, methods, models, datasets, topologies."""
    from netsenseml import methods
    from testbed.config.scenario import list_scenarios
    from testbed.config.sweep import list_sweeps
    from workloads import registry

    def section(title: str, rows: list[tuple[str, str]]) -> None:
        typer.echo(title)
        width = max((len(n) for n, _ in rows), default=0)
        for name, desc in rows:
            typer.echo(f"  {name.ljust(width)}  {desc}".rstrip())
        typer.echo("")

    section("scenarios (netsense run NAME; netsense show NAME):", list_scenarios())
    section("sweeps (netsense sweep NAME --dry-run):", list_sweeps())
    section("methods (--method, methods: in a scenario; plug-ins: package.module:Name):",
            [(i.form.split(" (")[0], i.summary) for i in methods.infos()])
    section("models (workload.model):",
            [(n, registry.model_entry(n).summary) for n in registry.model_names()])
    section("datasets (workload.dataset):",
            [(n, registry.dataset_entry(n).summary) for n in registry.dataset_names()])
    typer.echo("topologies (topology.kind; hosts and links as built for a shipped scenario; "
               "`netsense show SCENARIO` prints any scenario's):")
    for block in topology_listing():
        for line in block:
            typer.echo(f"  {line}")
    typer.echo("")


def _join(names: list[str], limit: int = 8) -> str:
    return " ".join(names[:limit]) + (f" ... ({len(names)})" if len(names) > limit else "")


def topology_lines(topo: Any) -> list[str]:
    """Hosts (workers, cross traffic) and links (with their rates) of a parsed topology."""
    rates = topo.link_rates()
    training = set(topo.training_links())
    links = [f"{n} {'unshaped' if r is None else f'{r:g} Mbit/s'}"
             + ("" if n in training else " (cross traffic only)") for n, r in rates.items()]
    cross = topo.cross_hosts()
    out = [f"worker hosts: {_join(topo.worker_hosts())}"]
    if cross:
        out.append(f"cross-traffic hosts: {_join(cross)}")
    out.append("links: " + (", ".join(links[:8]) + (f", ... ({len(links)})"
                                                  if len(links) > 8 else "")))
    return out


def topology_listing() -> list[list[str]]:
    """Per registered kind: summary, fields (* required, else default), and the hosts and
    links of the first shipped scenario of that kind (none for a kind no scenario uses)."""
    from testbed.config.scenario import SCENARIO_DIR
    from topologies import registry as topology_registry

    examples: dict[str, tuple[str, Any]] = {}
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        try:
            data = (bounded.load_yaml(path) or {}).get("topology") or {}
            kind = data.get("kind")
            if kind in topology_registry.kinds() and kind not in examples:
                examples[kind] = (path.stem, topology_registry.parse(data))
        except Exception:  # noqa: BLE001 - a broken shipped file only loses its example
            continue
    blocks = []
    width = max(len(k) for k in topology_registry.kinds())
    for kind in topology_registry.kinds():
        cls = topology_registry.params_class(kind)
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        fields = []
        for name, f in cls.model_fields.items():
            if name == "kind":
                continue
            fields.append(f"{name}*" if f.is_required() else
                          f"{name}={f.get_default(call_default_factory=True)!r}")
        pad = " " * (width + 2)
        block = [f"{kind.ljust(width)}  {summary}", f"{pad}fields (* required): "
                 + ", ".join(fields)]
        if kind in examples:
            name, topo = examples[kind]
            lines = topology_lines(topo)
            block.append(f"{pad}e.g. {name}: {lines[0]}")
            block += [f"{pad}  {x}" for x in lines[1:]]
        else:
            block.append(f"{pad}(no shipped scenario uses it; hosts and links follow from "
                         "its fields)")
        blocks.append(block)
    return blocks


def _accelerator_plan(spec: str | None, model: str | None, batch_size: int | None,
                      dataset: str | None, model_args: str, workers: int, method: str,
                      threads: int, rate_mbit: float | None) -> dict[str, Any] | None:
    """The checked options of `doctor --profile`, or None without --profile; one error
    line and exit 2 for a bad one (before any host timing runs)."""
    if spec is None:
        if model is not None or batch_size is not None:
            fail("--model/--batch-size: only with --profile NAME|FILE")
        return None
    from netsenseml import accelerator, methods
    from testbed.config.accelerator import Accelerator
    from testbed.orchestration import dilation

    dataset, knobs = check_workload(model, batch_size, dataset, model_args)
    assert model is not None and batch_size is not None  # check_workload refuses None
    try:
        timing = accelerator.load(spec).timing(model, knobs, batch_size)
    except accelerator.ProfileError as exc:
        fail(f"--profile: {exc}")
    if not 1 <= workers <= MAX_DOCTOR_WORKERS:
        fail(f"--workers: {workers}; allowed: 1..{MAX_DOCTOR_WORKERS}")
    if not 1 <= threads <= 64:
        fail(f"--threads: {threads}; allowed: 1..64")
    if rate_mbit is not None and not rate_mbit > 0:
        fail(f"--rate-mbit: {rate_mbit:g}; allowed: a rate > 0 (virtual Mbit/s)")
    try:
        codecs = dilation.codec_specs(methods.parse(method))  # the method enters here
    except ValueError as exc:
        fail(f"--method: {exc}")
    label = f"{spec} {model}{_knob_text(knobs)} batch {batch_size} ({dataset})"
    return {"timing": timing, "label": label, "codecs": codecs,
            "margin": Accelerator.model_fields["margin"].default,
            "workload": {"model": model, "dataset": dataset, "batch_size": batch_size,
                         "knobs": knobs}}


def _knob_text(knobs: dict[str, Any]) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in sorted(knobs.items())) + "]"


MAX_DOCTOR_WORKERS = 64


RangeOption = Annotated[bool, typer.Option(
    "--range", help="also measure the faithful range here: goodput across a shaped link at "
    "100 Mbit/s and at the stated limit, two workers' compute running (native mode; ~10 s)")]
ProfileSpecOption = Annotated[str | None, typer.Option(
    "--profile", metavar="NAME|FILE", help="an accelerator profile: state what this "
    "host keeps faithful for its entry of --model/--batch-size (one host timing, seconds)")]
DoctorWorkersOption = Annotated[int, typer.Option(
    "--workers", metavar="N", help="with --profile: emulated workers on this host")]
DoctorMethodOption = Annotated[str, typer.Option(
    "--method", metavar="SPEC", help="with --profile: whose codecs to time")]
ThreadsOption = Annotated[int, typer.Option(
    "--threads", metavar="N", help="with --profile: CPU threads per worker")]
RateMbitOption = Annotated[float | None, typer.Option(
    "--rate-mbit", metavar="MBIT", help="with --profile: the fastest virtual link rate "
    "training crosses (its network factor)")]


@app.command()
def doctor(
    measure_range: RangeOption = False,
    profile_spec: ProfileSpecOption = None,
    model: ModelOption = None,
    batch_size: BatchOption = None,
    dataset: DatasetOption = None,
    model_args: ModelArgsOption = "",
    workers: DoctorWorkersOption = 2,
    method: DoctorMethodOption = "netsenseml",
    threads: ThreadsOption = 1,
    rate_mbit: RateMbitOption = None,
) -> None:
    """Which mode runs use here (native root / rootless user namespace) and what works.

    With --profile, also what this host keeps faithful for that accelerator: the dilation
    factor `auto` picks for --workers, the fastest virtual link inside the faithful range,
    and the most workers whose real work fits.

    Exit 1 when the chosen mode cannot run the testbed, or (with --range) when the stated
    faithful range does not hold here; optional features (netem, TBF) missing only say
    what will be refused.
    """
    from rich.console import Console

    from testbed.cli.doctor import check_faithful, checks, usable

    plan = _accelerator_plan(profile_spec, model, batch_size, dataset, model_args, workers,
                             method, threads, rate_mbit)
    results = checks()
    results.append(check_faithful(measure=measure_range, mode_ok=usable(results)))
    sentence = None
    if plan is not None:
        row, sentence = _accelerator_row(plan, workers, threads, rate_mbit)
        results.append(row)
    console = Console(width=max(120, Console().width))
    console.print(_doctor_table(results))
    if sentence is not None:
        console.print(sentence, highlight=False, markup=False, soft_wrap=True)
    _doctor_verdict(results, measure_range)


def _accelerator_row(plan: dict[str, Any], workers: int, threads: int,
                     rate_mbit: float | None) -> tuple[Any, str]:
    """``doctor --profile``'s row, and its sentence: what this host keeps faithful for the
    profile's entry (or why the dilation cannot be chosen)."""
    from testbed.cli.doctor import accelerator_fit, check_accelerator
    from testbed.orchestration.dilation import DilationError

    try:
        fit: Any = accelerator_fit(plan["timing"], plan["workload"], workers,
                                   plan["codecs"], threads, plan["margin"], rate_mbit)
    except DilationError as exc:
        fit = str(exc)
    return check_accelerator(plan["label"], fit, rate_mbit)


def _doctor_table(results: list[Any]) -> Any:
    """The checks as a table: ok, FAILED (required) or missing (optional), and the fix."""
    from rich.table import Table

    table = Table(title="netsense doctor", title_justify="left")
    for col in ("check", "status", "detail", "to fix"):
        table.add_column(col)
    for c in results:
        status = "[green]ok[/]" if c.ok else ("[red]FAILED[/]" if c.required
                                              else "[yellow]missing[/]")
        table.add_row(c.name, status, c.detail or "", "" if c.ok else (c.fix or ""))
    return table


def _doctor_verdict(results: list[Any], measure_range: bool) -> None:
    """Exit 1 when runs cannot work here, or (``--range``) the faithful range does not
    hold; else say which optional features are missing."""
    from testbed.cli.doctor import usable

    if not usable(results):
        typer.echo("netsense run cannot work here: fix the FAILED checks")
        raise typer.Exit(1)
    if measure_range and not results[-1].ok:
        typer.echo("the faithful range does not hold here: state this machine's with "
                   "NETSENSE_FAITHFUL_MBIT (benchmarks/faithful_range.py measures it)")
        raise typer.Exit(1)
    missing = [c.name for c in results if not c.ok and c.name != "accelerator"]
    if missing:
        typer.echo(f"runs work; features needing {', '.join(missing)} are refused")

@app.command()
def clean(
    force: Annotated[
        bool, typer.Option("--force", help="also clean runs whose orchestrator still looks alive")
    ] = False,
) -> None:
    """Remove leftovers of this testbed's own runs (found by prefix and recorded PIDs)."""
    from testbed.emulation import leftovers
    from testbed.orchestration.rundir import repair_dead_runs

    report = leftovers.clean(force=force)
    report["records_repaired"] = repair_dead_runs(refused=report["refused"])
    report["refused"] = list(dict.fromkeys(report["refused"]))
    for key in ("interfaces_removed", "pids_killed", "registries_removed", "records_repaired",
                "skipped_active", "refused", "failed"):
        items = report.get(key) or []
        typer.echo(f"{key.replace('_', ' ')}: {len(items)}"
                   + (f" ({', '.join(map(str, items[:10]))})" if items else ""))
    if report.get("failed"):
        raise typer.Exit(1)

CalSeedsOption = Annotated[str, typer.Option(
    "--seeds", metavar="N,N,...", help="seeds of each level's runs")]
LevelsOption = Annotated[str | None, typer.Option(
    "--levels", metavar="L,L,...",
    help="ladder levels to measure (default none,fp16,int8,topk:0.1,topk:0.01,topk:0.001)")]
MaxStepsOption = Annotated[int, typer.Option(
    "--max-steps", min=1, max=1_000_000, help="step cap of a run (not reached: null)")]
TableOutOption = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="FILE",
    help="the table (default RESULTS/convergence/<scenario>/convergence.json)")]


@app.command()
def convergence(
    scenario: ScenarioArg,
    seeds: CalSeedsOption = "0,1,2",
    levels: LevelsOption = None,
    max_steps: MaxStepsOption = 1500,
    out: TableOutOption = None,
    results: ResultsOption = DEFAULT_RESULTS,
    set_: SetOption = None,
) -> None:
    """Measure steps to the scenario's target per ladder level on loopback (real gloo
    ranks, several seeds) and write the convergence table netsenseml loads (the scenario's
    `convergence:` field, or hooks.register(..., convergence=FILE)).

    Finished runs under RESULTS/convergence/<scenario>/runs are reused, so it resumes.
    (Its old name, `netsense convergence`, still works; `netsense simulate calibrate` is the
    SimGrid model's fit.)
    """
    from testbed.common.outputs import OutputError, check_dir
    from testbed.orchestration import convergence_table as cal

    scn = _load(scenario, set_)
    seed_list = _seed_list(seeds)
    level_list = [x.strip() for x in levels.split(",") if x.strip()] if levels else None
    root = results / "convergence" / scn.name
    target = out or root / "convergence.json"
    try:
        check_dir(target.parent, "--out", shown=target)
        check_dir(root / "runs", "--results")
    except OutputError as exc:
        fail(str(exc))
    try:
        cal.check(scn, seed_list, level_list, max_steps)
    except cal.CalibrateError as exc:
        fail(str(exc))
    typer.echo(f"convergence table of {scn.name}: {scn.workload.model} on {scn.workload.dataset}, "
               f"{scn.world_size} ranks on loopback, target {scn.workload.target_accuracy}, "
               f"seeds {seed_list}")
    import signal

    # SIGTERM as an exception, so that the runs' ranks are killed by PID on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        table = cal.calibrate(scn, out=target, work=root / "runs", seeds=seed_list,
                              levels=level_list, max_steps=max_steps,
                              say=lambda line: typer.echo(line))
    except cal.RunFailed as exc:
        fail(str(exc), code=1)
    typer.echo(cal.markdown(table))
    typer.echo(f"wrote {target}; use it with `convergence: {target.resolve()}` in a scenario")


# The command's old name, kept working (hidden): `calibrate` now means only the SimGrid
# model's fit (`netsense simulate calibrate`).
app.command("calibrate", hidden=True,
            help="the old name of `netsense convergence`")(convergence)


def _seed_list(seeds: str) -> list[int]:
    """``--seeds N,N,...`` as integers, each a valid seed, or one error line and exit 2."""
    from testbed.config.scenario import MAX_SEED

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds: {seeds!r} is not a comma-separated list of integers")
    if not seed_list or any(not 0 <= s <= MAX_SEED for s in seed_list):
        fail(f"--seeds: need one or more integers in [0, {MAX_SEED}], got {seeds!r}")
    return seed_list


def _register_analysis() -> None:
    """Add sweep/plot/report/sensing when the analysis module is present.

    find_spec rather than try/except ImportError: a real import error inside the module
    must surface, not silently hide three commands.
    """
    if importlib.util.find_spec("testbed.cli.analysis") is not None:
        importlib.import_module("testbed.cli.analysis").register(app)

_register_analysis()
ab.register(app)
simulate.register(app)
profile.register(app)
advise.register(app)

def _sigint_interrupts() -> None:
    """SIGINT interrupts netsense wherever it lands, even where it was started ignoring it.

    A process started in the background by a non-interactive shell (a script's ``cmd &``,
    ``nohup``, some CI runners) inherits SIGINT *ignored*, and Python then installs no
    KeyboardInterrupt for it. A run's signal guard (``testbed.orchestration.interrupts``)
    catches SIGINT anyway, so a sweep so started stopped on a SIGINT during a run but let one
    between two runs pass unseen and went on to the end (a CI run: five runs, exit 0). One
    meaning for the signal: it interrupts (exit 130), as in a terminal.
    """
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    """The ``netsense`` console entry: typer's app, with its usage errors in our one style.

    The argument parser's own errors (unknown option, missing argument) would print a usage
    block and ``Error: ...``; here they become the same ``error: ...`` line, naming the
    command's help, as the commands' own refusals.
    """
    from testbed.common import files

    _sigint_interrupts()
    try:
        rc = app(args=argv, prog_name="netsense", standalone_mode=False)
    except files.LinkRefused as exc:  # a link in a results tree: never written through
        typer.echo(f"error: {exc}", err=True)
        return 2
    except OSError as exc:
        if not files.is_no_space(exc):
            raise
        if not isinstance(exc, files.NoSpace):  # a writer that is not ours: name its folder
            where = Path(exc.filename).parent if exc.filename else Path.cwd()
            exc = files.NoSpace(where, exc)
        typer.echo(f"error: {exc}", err=True)
        return 1
    except typer.Abort:
        typer.echo("interrupted", err=True)
        return 130
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"error: {exc.format_message()}{hint}", err=True)
        return int(getattr(exc, "exit_code", 2) or 2)
    return rc if isinstance(rc, int) else 0

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
