"""``netsense ab``: arms of one scenario, interleaved over seeds, and each arm's ratio to the
first with a Welch t-interval on the logs (honest from 2 seeds per arm), a permutation p and
a verdict (faster / slower / cannot tell, with the seeds that would tell).

The running is ``testbed.orchestration.ab``'s (arms, the interleaved order, revisions'
checkouts), the statistics ``testbed.analysis.ab_stats``'s; this module checks the input (one
line, exit 2, before anything is made), prints and decides when to stop. Exit codes as
``netsense run``: 0 every run ok, 1 a run failed (left out of the statistics and named),
2 bad input, 130/143 interrupted (the comparison stops after the interrupted run's teardown;
its folders are final, the revisions' checkouts removed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
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
    check_runnable,
    fail,
    parse_overrides,
)
from testbed.common.names import slug

ArmOption = Annotated[list[str] | None, typer.Option(
    "--arm", "-a", metavar="METHOD[@REV]", help="an arm: a method, or METHOD@REV to run it "
    "with the code of git revision REV; repeatable, the first is the baseline")]


ScenarioArg = Annotated[str | None, typer.Argument(
    help="scenario name (netsense list) or path to a YAML file; with --from-runs, "
    "optional: only that scenario's runs", metavar="SCENARIO", show_default=False)]
SeedsOption = Annotated[str, typer.Option(
    "--seeds", metavar="N-M|N,N,...", help="seeds every arm runs (e.g. 0-7)")]
MetricOption = Annotated[str, typer.Option(
    "--metric", metavar="NAME", help="throughput, tta or a summary.json field")]
UntilWidthOption = Annotated[float | None, typer.Option(
    "--until-width", metavar="W", help="after the seeds, add one seed at a time (every "
    "arm, interleaved) until each ratio's interval (hi - lo) / ratio is at most W")]
MaxSeedsOption = Annotated[int, typer.Option(
    "--max-seeds", metavar="N", help="with --until-width: stop at N seeds per arm")]
FromRunsOption = Annotated[Path | None, typer.Option(
    "--from-runs", metavar="DIR", help="run nothing: compare the run folders under DIR "
    "(arms: --arm, else DIR's ab.json, else the runs' methods)")]
ReadBackOutOption = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="DIR", help="with --from-runs: the folder for its ab.json/ab.csv "
    "(default DIR; for a DIR git tracks, e.g. results/runs/..., its view folder under "
    "results/views/)")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="no line per run")]
DryRunOption = Annotated[bool, typer.Option(
    "--dry-run", "-n", help="print the runs in their interleaved order, where they go and an "
    "estimate of the time; run nothing")]
OneKOption = Annotated[bool | None, typer.Option(
    "--one-k/--own-k", help="with accelerator.dilation auto: every arm at the largest of the "
    "arms' factors, or each at its own (default: one where flows compete with the job, "
    "own otherwise)", show_default=False)]


def ab_cmd(
    scenario: ScenarioArg = None,
    arm: ArmOption = None,
    seeds: SeedsOption = "0-3",
    metric: MetricOption = "throughput",
    until_width: UntilWidthOption = None,
    max_seeds: MaxSeedsOption = 16,
    results: ResultsOption = DEFAULT_RESULTS,
    set_: SetOption = None,
    from_runs: FromRunsOption = None,
    out: ReadBackOutOption = None,
    quiet: QuietOption = False,
    dry_run: DryRunOption = False,
    one_k: OneKOption = None,
) -> None:
    """A/B: every arm once per seed, in alternating order, then each arm's mean, its ratio
    to the first arm (geometric means) with a 95 % Welch t-interval on the logs, a
    permutation p and a verdict: faster / slower, or cannot tell at this n and the seeds
    per arm that would tell.

    Runs go to RESULTS/ab-<scenario>/<arm>/<scenario>/<run id>, the table to ab.json and
    ab.csv beside them (with --from-runs: in DIR, or --out; another comparison than DIR's
    ab.json asked, e.g. other arms or metric: ab-<metric>-<arms>.json beside it). A DIR git
    tracks (the committed runs under results/runs/) is never written into unless --out
    names it: the table goes to results/views/<its path>/ (said).

    With the scenario's accelerator.dilation auto and flows competing with the job (a
    cross_start or ramp), every arm runs at one factor, the largest of the arms' own (said
    before the runs, kept in ab.json): a congested phase depends on the factor where a
    kernel timer is not dilated (BBR's). Without competing flows each arm keeps its own: a
    larger factor lowers the real rates (below ~300 Mbit/s real an 8-rank ring on hosts
    set to BBR loses throughput of its own; the default cubic does not). --one-k / --own-k
    choose either.
    """
    if until_width is not None and not (until_width > 0 and math.isfinite(until_width)):
        fail(f"--until-width: {until_width} is not a positive number")
    if from_runs is not None:
        _from_runs(from_runs, scenario, arm, metric, out)
        return
    if out is not None:
        fail("--out: only with --from-runs (a session writes its table beside its runs)")
    if scenario is None:
        fail("SCENARIO: missing (or give --from-runs DIR)")
    field, arms, seed_list = _plan(arm, seeds, metric, until_width, max_seeds)
    scn, path = _scenario(scenario, set_)
    root = results / f"ab-{scn.name}"
    one = scn.competes if one_k is None else one_k
    k, own = _one_factor(scn, arms, measure=not dry_run) if one else (None, {})
    if k is not None:
        set_ = [*(set_ or []), f"accelerator.dilation={k:g}"]
        scn, path = _scenario(scenario, set_)
        why = "--one-k" if one_k else "flows compete with the job; --own-k: each its own"
        typer.echo(f"one dilation factor for every arm: k {k:g}, the largest of the arms' "
                   f"own ({', '.join(f'{a} {v:g}' for a, v in own.items())}; {why})")
    if dry_run:
        _print_plan(scn, arms, seed_list, root, until_width, max_seeds)
        return
    check_runnable(scn, root)
    _run(scn, path, list(set_ or []), arms, seed_list, root, field, metric, until_width,
         max_seeds, quiet, {"k": k, "own": own} if k is not None else None)


def _plan(arm: list[str] | None, seeds: str, metric: str, until_width: float | None,
          max_seeds: int) -> tuple[str, list[Any], list[int]]:
    """(the metric's summary.json field, the arms with their revisions resolved, the seeds),
    or one error line naming the option and exit 2."""
    from testbed.analysis import ab_stats
    from testbed.orchestration import ab as run_ab

    try:
        field = ab_stats.metric_field(metric)
        arms = run_ab.parse_arms(list(arm or []))
        seed_list = run_ab.parse_seeds(seeds)
        if until_width is not None and max_seeds < len(seed_list):
            raise run_ab.ABError(f"--max-seeds {max_seeds}: fewer than the {len(seed_list)} "
                                 "seeds of --seeds")
        return field, run_ab.resolve_revisions(arms), seed_list
    except (run_ab.ABError, ab_stats.ABInputError) as exc:
        fail(str(exc))


def _one_factor(scn: Any, arms: list[Any], measure: bool) -> tuple[float | None, dict]:
    """``testbed.orchestration.ab.one_factor``, or its one line and exit 2."""
    from testbed.orchestration import ab as run_ab

    try:
        return run_ab.one_factor(scn, arms, measure=measure)
    except run_ab.ABError as exc:
        fail(str(exc))


def _print_plan(scn: Any, arms: list[Any], seeds: list[int], root: Path,
                until_width: float | None, max_seeds: int) -> None:
    """``ab --dry-run``: the runs in order, their folders, and the estimated minutes (this
    code's estimate for every arm, a revision's too: ``testbed.config.estimate``)."""
    from testbed.config.estimate import estimate_runs
    from testbed.orchestration import ab as run_ab
    from testbed.orchestration.dilation import is_cached

    order = run_ab.plan(arms, seeds)
    est = estimate_runs([(scn, a.method) for a, _ in order], is_cached)
    total = sum(e["seconds"] for e in est)
    per_seed = total / max(len(seeds), 1)
    about = "at most" if any(e.get("bound") for e in est) else "about"  # an own job
    typer.echo(f"ab {scn.name}: {len(arms)} arms x {len(seeds)} seeds = {len(order)} runs, "
               f"interleaved, {scn.world_size} workers; {about} {total / 60:.1f} min")
    for (a, seed), e in zip(order, est, strict=True):
        rev = f" @ {a.commit[:12]}" if a.commit else ""
        typer.echo(f"  {a.label:<22} seed {seed:<3} ~{e['seconds']:>6.0f} s -> "
                   f"{root}/{a.slug}/{scn.name}/<time>-{slug(a.method)}-s{seed}/{rev}")
    if until_width is not None:
        more = max(max_seeds - len(seeds), 0)
        typer.echo(f"--until-width {until_width:g}: up to {more} more seeds per arm, about "
                   f"{more * per_seed / 60:.1f} min more at most")
    typer.echo("nothing run (--dry-run)")


def _scenario(scenario: str, set_: list[str] | None) -> tuple[Any, Path]:
    """The scenario with --set applied, and its file (what a revision's runs are given)."""
    from testbed.config.scenario import (
        ScenarioError,
        apply_overrides,
        load_scenario,
        scenario_path,
    )

    try:
        scn = load_scenario(scenario)
        if set_:
            scn = apply_overrides(scn, parse_overrides(set_))
        return scn, scenario_path(scenario).resolve()
    except ScenarioError as exc:
        fail(str(exc))


@dataclass
class _Session:
    """What an A/B session has run so far: one observation per finished run, the seeds
    used, the (arm, seed) order the runs ran in, and why it stopped adding seeds."""

    arms: list[Any]
    root: Path
    field: str
    say: Callable[[str], None]
    metric: str = "throughput"
    obs: list[Any] = dataclasses.field(default_factory=list)
    used: list[int] = dataclasses.field(default_factory=list)
    order: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    stopped: str | None = None
    dilation: dict | None = None  # one factor for every arm: {"k": k, "own": {arm: k}}

    def run_seeds(self, runner: Any, new: list[int], total: int) -> None:
        """Every arm once for each of the ``new`` seeds, interleaved."""
        from testbed.analysis import ab_stats
        from testbed.orchestration import ab as run_ab

        todo = run_ab.plan(self.arms, new, start=len(self.used))
        first = len(self.order) + 1
        self.used.extend(new)
        for done in run_ab.run_plan(runner, todo, self.say, first=first, total=total,
                                    show=lambda s: metric_text(s, self.field, self.metric)):
            self.order.append((done.arm.label, done.seed))
            o = done.outcome
            self.obs.append(ab_stats.observation(
                done.arm.label, done.seed, o.summary, o.status,
                str(Path(o.run_dir).resolve().relative_to(self.root.resolve())), self.field))


def _run(scn: Any, path: Path, overrides: list[str], arms: list[Any], seeds: list[int],
         root: Path, field: str, metric: str, until_width: float | None, max_seeds: int,
         quiet: bool, dilation: dict | None = None) -> None:
    """The session's runs, then its table written and printed; exits 1 when a run failed,
    130/143 when interrupted (the table then covers the runs done)."""
    console = Console(width=max(120, Console().width))

    def say(line: str) -> None:
        if not quiet:
            console.print(line, highlight=False, markup=False, soft_wrap=True)

    s = _Session(arms, root, field, say, metric, dilation=dilation)
    revs = [f"{a.label} = {a.commit[:12]}" for a in arms if a.commit]
    console.print(f"ab {scn.name}: {len(arms)} arms x {len(seeds)} seeds, interleaved; "
                  f"metric {metric}" + (f"; {', '.join(revs)}" if revs else ""),
                  highlight=False, markup=False, soft_wrap=True)
    code = _run_session(s, scn, path, overrides, seeds, until_width, max_seeds, console)
    if not s.obs:
        raise typer.Exit(code)
    _write(s, scn, metric, code, console)
    if code:
        raise typer.Exit(code)
    if any(o.status != "ok" for o in s.obs):
        raise typer.Exit(1)


def _run_session(s: _Session, scn: Any, path: Path, overrides: list[str], seeds: list[int],
                 until_width: float | None, max_seeds: int, console: Console) -> int:
    """The seeds, then (``--until-width``) one more at a time until the intervals are narrow
    enough; the revisions' checkouts removed after. Returns the exit code of an interrupt
    (0: none)."""
    from testbed.analysis import ab_stats
    from testbed.common.files import NoSpace
    from testbed.orchestration import ab as run_ab
    from testbed.orchestration import launcher
    from testbed.orchestration.interrupts import RunInterrupted

    labels = [a.label for a in s.arms]
    try:
        with run_ab.Checkouts(s.root, s.arms) as checkouts, launcher.shared():
            runner = run_ab.Runner(scn, path, overrides, s.root, checkouts)
            s.run_seeds(runner, seeds, len(s.arms) * len(seeds))
            if until_width is not None:
                while (stopped := ab_stats.stop_reason(
                        ab_stats.compare(s.obs, labels, field=s.field), until_width,
                        len(s.used), max_seeds)
                       ) is None:
                    s.run_seeds(runner, run_ab.next_seeds(s.used), len(s.order) + len(s.arms))
                s.stopped = stopped
    except RunInterrupted as exc:
        console.print(f"interrupted ({exc}) after {len(s.order)} runs; torn down, the "
                      "interrupted run marked failed", highlight=False, markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        console.print(f"interrupted between runs after {len(s.order)} runs; every run folder "
                      "is final", highlight=False, markup=False)
        return 130
    except NoSpace as exc:
        fail(str(exc), 1)
    except run_ab.ABError as exc:  # a revision could not be checked out
        fail(str(exc))
    return 0


def _write(s: _Session, scn: Any, metric: str, code: int, console: Console) -> None:
    """ab.json and ab.csv of the session, and its table printed."""
    from testbed.analysis import ab_stats

    res = ab_stats.compare(s.obs, [a.label for a in s.arms], field=s.field)
    info = {"scenario": scn.name, "metric": metric, "field": s.field, "seeds": s.used,
            "order": [list(x) for x in s.order], "stopped": s.stopped,
            "interrupted": code != 0,
            "commits": {a.label: a.commit for a in s.arms if a.commit},
            "resamples": ab_stats.RESAMPLES, "bootstrap_seed": ab_stats.BOOTSTRAP_SEED}
    if s.dilation is not None:
        info["one_dilation"] = s.dilation
    written = ab_stats.write(s.root, res, s.obs, info)
    _print(console, res, metric, written, s.stopped)


def _from_runs(folder: Path, scenario: str | None, arm: list[str] | None, metric: str,
               out: Path | None = None) -> None:
    from testbed.analysis import ab_stats, loading
    from testbed.common.outputs import OutputError, check_dir

    if not folder.is_dir():
        fail(f"--from-runs: no such folder {str(folder)!r}")
    labels = None
    if arm:
        labels = [a.strip() for a in arm]
        dup = next((a for a in labels if labels.count(a) > 1), None)
        if dup is not None:
            fail(f"--arm {dup!r}: given twice; arm labels must be unique")
        if len(labels) < 2:
            fail(f"--arm: give at least 2 arms (got {len(labels)})")
    dest = out if out is not None else away_from_committed(folder, "--out/-o") or folder
    try:
        check_dir(dest, "--out" if out is not None else "--from-runs")
        loaded = loading.load_all(folder)  # read once: the fields and the runs
        field = ab_stats.metric_field(metric, ab_stats.known_fields(folder, loaded))
        labels, obs, excluded = ab_stats.from_runs(folder, labels, scenario, field, loaded)
    except (ab_stats.ABInputError, OutputError) as exc:
        fail(str(exc))
    err = Console(stderr=True)
    for e in excluded:
        err.print(f"note: excluded damaged run {e.run}: {e.reason}", highlight=False,
                  markup=False)
    res = ab_stats.compare(obs, labels, field=field)
    from testbed.common.files import read_json

    prior = read_json(folder / "ab.json") or {}  # a session read back keeps its record
    info = {**{k: prior[k] for k in ("commits", "order", "one_dilation") if k in prior},
            "scenario": scenario or prior.get("scenario") or _one_scenario(loaded),
            "metric": metric, "field": field,
            "from_runs": str(folder),
            "seeds": sorted({o.seed for o in obs}), "resamples": ab_stats.RESAMPLES,
            "bootstrap_seed": ab_stats.BOOTSTRAP_SEED}
    written = ab_stats.write(dest, res, obs, info,
                             stem=ab_stats.readback_stem(prior, res.arms, metric))
    _print(Console(width=max(120, Console().width)), res, metric, written, None)


def _one_scenario(loaded: Any) -> str | None:
    """The scenario the runs read back ran, where they ran one (the record names it)."""
    names = {str((r.config.get("scenario") or {}).get("name") or "") for r in loaded.runs}
    return names.pop() or None if len(names) == 1 else None


def metric_text(summary: dict[str, Any], field: str, metric: str) -> str:
    """A finished run's value of the comparison's metric, for its line (``tta 41.2 s``)."""
    v = summary.get(field)
    if not isinstance(v, int | float) or isinstance(v, bool) or v != v:
        return f"no {metric}"
    if field == "throughput_samples_per_s":
        return f"{v:.1f} samples/s"
    unit = " s" if field.endswith("_s") else ""
    return f"{metric} {_fmt(float(v))}{unit}"


def _num(v: float, fmt: str) -> str:
    return "-" if v != v else format(v, fmt)


def _fmt(v: float) -> str:
    """A mean in as many digits as it needs (throughput in the hundreds, accuracy < 1)."""
    if v != v:
        return "-"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.1f}"


def _print(console: Console, res: Any, metric: str, written: list[Path],
           stopped: str | None) -> None:
    from testbed.analysis import ab_stats

    base = res.arms[0]
    t = Table(title=f"ab: {metric}, {len(res.arms)} arms, ratio to {base}", title_justify="left")
    for c in ("arm", "n", "mean ± 95 %", f"x {base}", "95 % interval", "p"):
        t.add_column(c, justify="left" if c == "arm" else "right")
    for i, r in enumerate(res.rows):
        mean = _fmt(r["mean"]) + (f" ± {_fmt(r['ci95'])}" if r["ci95"] == r["ci95"] else "")
        if i == 0:
            t.add_row(r["arm"], str(r["n"]), mean, "1 (baseline)", "", "")
            continue
        interval = ("-" if r["ratio_lo"] != r["ratio_lo"] else
                    f"[{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]")
        t.add_row(r["arm"], str(r["n"]), mean, _num(r["ratio"], ".3f"), interval,
                  _num(r["p"], ".3g"))
    console.print(t)
    for r in res.rows[1:]:
        console.print(f"verdict: {r['arm']} vs {base}: {r['verdict']}", highlight=False,
                      markup=False, soft_wrap=True)
    console.print(ab_stats.explain(res), highlight=False, markup=False, soft_wrap=True)
    for arm, items in res.left_out.items():
        console.print(f"left out of {arm}: {len(items)} run(s): " + "; ".join(items[:5])
                      + (f"; +{len(items) - 5} more" if len(items) > 5 else ""),
                      highlight=False, markup=False, soft_wrap=True)
    if stopped:
        console.print(f"stopped: {stopped}", highlight=False, markup=False, soft_wrap=True)
    for p in written:
        console.print(str(p), highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``ab`` to the main ``netsense`` app."""
    app.command("ab")(ab_cmd)
