"""``netsense simulate``: the SimGrid step model, from run folders to predictions at scale.

Three commands, one per question:

* ``calibrate RUNS...``: fit the model on calibration run folders and write the fit (JSON);
* ``validate --calibration CAL --runs HELD_OUT...``: predict held-out runs the fit never saw
  and print the error table (and write it as CSV): is the model right? The runs of one
  point's seeds (``--runs`` may name several sweeps' folders) are averaged into its ground
  truth, their spread printed beside the error;
* ``predict SCENARIO --workers 8,64,1024``: step time, throughput, time to accuracy and
  NetSenseML's chosen level per method and worker count on a bigger fabric.

``--calibration`` takes either a fit written by ``calibrate`` or calibration run folders
(fitted on the spot), so one command goes from a sweep's folder to a table. Every refusal is
one line naming the option or field (exit 2), and a machine without SimGrid is told to run
``make setup`` before anything else is read.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli.common import SetOption, fail, parse_overrides

app = typer.Typer(help="the SimGrid step model: calibrate on run folders, validate on "
                  "held-out runs, predict at scale", no_args_is_help=True,
                  context_settings={"help_option_names": ["-h", "--help"]})

FABRICS = ("fattree", "dragonfly", "scenario")
DEFAULT_METHODS = "allreduce,fp16,int8,topk:0.1,topk:0.01,netsenseml"
MAX_WORKERS = 4096
CPUS = os.cpu_count() or 1
VALIDATION_COLUMNS = ["method", "workers", "condition", "seeds", "payload_kB", "levels_pred",
                      "comm_meas_s", "comm_pred_s", "step_meas_s", "step_spread_pct",
                      "step_pred_s", "step_err_pct", "thr_meas", "thr_spread_pct", "thr_pred",
                      "thr_err_pct", "step_seeds_s", "run"]
PREDICTION_COLUMNS = ["method", "workers", "fabric", "step_s", "comm_s", "compute_s",
                      "throughput", "steps_to_target", "tta_s", "level", "levels",
                      "sim_wall_s"]

CalibrationOption = Annotated[list[Path], typer.Option(
    "--calibration", "-c", metavar="FILE|DIR",
    help="a fit written by `simulate calibrate`, or calibration run folders (repeatable)")]
JobsOption = Annotated[int, typer.Option(
    "--jobs", "-j", min=1, help="simulations run at once (one process each)")]


def _need_simgrid() -> None:
    from testbed.simulation import engine

    try:
        engine.load()
    except engine.SimGridMissing as exc:
        fail(f"{exc}")


def _runs(folders: list[Path], option: str) -> list[Any]:
    from testbed.simulation.calibrate import load_runs

    runs = []
    for f in folders:
        if not f.is_dir():
            fail(f"{option}: no such folder {str(f)!r}")
        found = load_runs(f)
        if not found:
            fail(f"{option}: no ok run folders the simulation can replay under {str(f)!r} "
                 "(star, dumbbell or leafspine; allreduce, fp16, bf16, int8, topk:R, "
                 "netsenseml)")
        runs.extend(found)
    return runs


def _calibration(sources: list[Path], jobs: int, measured_queue: bool = False) -> Any:
    from testbed.simulation.calibrate import calibrate, load_calibration

    if not sources:
        fail("--calibration: give a fit (`simulate calibrate -o FILE`) or calibration run "
             "folders")
    if len(sources) == 1 and sources[0].is_file():
        try:
            return load_calibration(sources[0])
        except ValueError as exc:
            fail(f"--calibration: {exc}")
    runs = _runs(sources, "--calibration")
    typer.echo(f"calibrating on {len(runs)} runs ...", err=True)
    try:
        return calibrate(runs, workers=jobs, measured_queue=measured_queue)
    except ValueError as exc:
        fail(f"--calibration: {exc}")


def _csv(rows: list[dict[str, Any]], cols: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _check(path: Path, option: str) -> None:
    from testbed.common.outputs import OutputError, check_file

    try:
        check_file(path, option)
    except OutputError as exc:
        fail(str(exc))


def _write(path: Path, text: str, option: str) -> None:
    from testbed.common.files import atomic_write_text

    _check(path, option)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def _net_line(cal: Any) -> str:
    n = cal.net
    return (f"network: latency factor {n.latency_factor:g}, bandwidth factor "
            f"{n.bandwidth_factor:g}, per-message CPU {n.msg_fixed_s * 1e3:g} ms + "
            f"{n.msg_cpu_s * 1e3:g} ms up to {n.msg_cap_bytes:g} B (contention share "
            f"{n.msg_share:g}), standing queue {n.queue_fraction:g} of "
            f"{_backlog(n.queue_fill)}, iperf3 stream "
            f"weight {n.cross_weight:g}, short messages' extra wait {n.short_wait_s * 1e3:g} ms "
            f"below {n.short_bytes:g} B; calibration runs' median |step error| "
            f"{cal.error_pct} %")


def _backlog(fill: float) -> str:
    if fill > 0:
        return (f"each congested run's measured backlog (median of the calibration runs: "
                f"{fill:g} of the queue's limit in full frames)")
    return "a full queue"


MeasuredQueueOption = Annotated[bool, typer.Option(
    "--measured-queue/--full-queue",
    help="fit the standing queue as a share of each congested run's measured backlog "
         "(bottleneck.csv; a diagnostic: the backlog holds the ring's own bytes too), or "
         "of a full queue")]


@app.command("calibrate")
def calibrate_cmd(
    runs: Annotated[list[Path], typer.Argument(metavar="RUNS...",
                                               help="calibration run folders")],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE",
                                      help="where the fit is written (JSON)")]
    = Path("simcal.json"),
    jobs: JobsOption = CPUS,
    measured_queue: MeasuredQueueOption = False,
) -> None:
    """Fit the network factors and compute per level on calibration runs only."""
    from testbed.simulation.calibrate import save_calibration

    _check(out, "--out")
    _need_simgrid()
    cal = _calibration(list(runs), jobs, measured_queue)
    save_calibration(cal, out)
    typer.echo(_net_line(cal))
    typer.echo(f"wrote {out}")


def error_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and condition (idle, congested, all): median and worst |error| of step
    time and throughput over the points, in %, each point's error against its seeds' mean;
    beside them the fewest seeds of a point and the median seed spread, so that an error
    reads against how far the emulated runs themselves are apart."""
    out = []
    for m in dict.fromkeys(r["method"] for r in rows):
        for cond in ("idle", "congested", "all"):
            rs = [r for r in rows if r["method"] == m and cond in ("all", r["condition"])]
            if rs:
                out.append({"method": m, "condition": cond, **_errors(rs)})
    return out


def _errors(rs: list[dict[str, Any]]) -> dict[str, Any]:
    step = [abs(r["step_err_pct"]) for r in rs]
    thr = [abs(r["thr_err_pct"]) for r in rs]
    return {"points": len(rs), "seeds_min": min(r["seeds"] for r in rs),
            "step_median_pct": round(statistics.median(step), 1),
            "step_worst_pct": round(max(step), 1),
            "step_spread_median_pct": round(statistics.median(r["step_spread_pct"]
                                                              for r in rs), 1),
            "thr_median_pct": round(statistics.median(thr), 1),
            "thr_worst_pct": round(max(thr), 1),
            "thr_spread_median_pct": round(statistics.median(r["thr_spread_pct"]
                                                             for r in rs), 1)}


@app.command("validate")
def validate_cmd(
    calibration: CalibrationOption = [],  # noqa: B006 - typer reads the default
    runs: Annotated[list[Path], typer.Option(
        "--runs", metavar="DIR", help="held-out run folders to predict (repeatable)")] = [],  # noqa: B006
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", metavar="FILE", help="the error table as CSV")] = None,
    jobs: JobsOption = CPUS,
    median_queue: Annotated[bool, typer.Option(
        "--median-queue", help="replay congested runs with the calibration runs' median "
        "backlog, not each run's own (a fit made with --measured-queue)")] = False,
) -> None:
    """Predict held-out runs with a calibration that never saw them; print the errors
    (per point: its seeds averaged, their spread beside the error). A fit made on measured
    backlogs replays each congested run with its own, unless --median-queue."""
    from testbed.simulation.calibrate import validate
    from testbed.simulation.scale import markdown

    if not runs:
        fail("--runs: give the held-out run folders to predict")
    _need_simgrid()
    held = _runs(list(runs), "--runs")
    cal = _calibration(list(calibration), jobs)
    overlap = set(cal.runs) & {r.path for r in held}
    if overlap:
        fail(f"--runs: {len(overlap)} run(s) are also calibration runs (e.g. "
             f"{sorted(overlap)[0]}); validation needs held-out runs")
    own = cal.net.queue_fill > 0 and not median_queue
    rows = validate(held, cal, workers=jobs, measured_queue=own)
    typer.echo(_net_line(cal))
    if cal.net.queue_fill > 0:
        typer.echo("congested runs replayed with " + ("each run's own measured backlog" if own
                   else "the calibration runs' median backlog"))
    cols = [c for c in VALIDATION_COLUMNS if c not in ("run", "levels_pred", "step_seeds_s")]
    typer.echo(markdown(rows, cols))
    summary = error_summary(rows)
    typer.echo("")
    typer.echo(markdown(summary, list(summary[0])))
    for cond in ("idle", "congested", "all"):
        rs = [r for r in rows if cond in ("all", r["condition"])]
        if not rs:
            continue
        e = _errors(rs)
        typer.echo(f"{cond}, {e['points']} points (>= {e['seeds_min']} seeds each): step "
                   f"|error| median {e['step_median_pct']:.1f} %, worst "
                   f"{e['step_worst_pct']:.1f} % (seed spread median "
                   f"{e['step_spread_median_pct']:.1f} %); throughput median "
                   f"{e['thr_median_pct']:.1f} %, worst {e['thr_worst_pct']:.1f} %")
    if out is not None:
        _write(out, _csv(rows, VALIDATION_COLUMNS), "--out")
        summary_path = out.with_name(out.stem + "-summary.csv")
        _write(summary_path, _csv(summary, list(summary[0])), "--out")
        typer.echo(f"wrote {out} and {summary_path}")


def parse_workers(text: str) -> list[int]:
    """``8,64,1024`` -> [8, 64, 1024]; one error line on anything else."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 2 <= int(part) <= MAX_WORKERS:
            fail(f"--workers: {part!r} is not a worker count in 2..{MAX_WORKERS} "
                 "(comma-separated, e.g. 8,64,1024)")
        out.append(int(part))
    return sorted(set(out))


def parse_methods(text: str) -> list[str]:
    from testbed.simulation.sim import SIMULATED_ADAPTIVE, level_of

    out = []
    for m in (p.strip() for p in text.split(",")):
        if m in SIMULATED_ADAPTIVE:
            out.append(m)
            continue
        try:
            level_of(m)
        except ValueError as exc:
            fail(f"--methods: {exc}")
        out.append(m)
    return out


PredictScenarioArg = Annotated[str, typer.Argument(
    help="scenario name (netsense list) or YAML path: its links' rate, and its own "
    "topology for --fabric scenario")]
WorkersOption = Annotated[str, typer.Option(
    "--workers", "-w", metavar="W,W,...", help="worker counts")]
FabricOption = Annotated[str, typer.Option(
    "--fabric", help="fattree | dragonfly (the scenario's rate, over-subscribed "
    "uplinks, another job's flows) | scenario (the scenario's own topology grown)")]
MethodsOption = Annotated[str, typer.Option("--methods", "-m", help="comma-separated methods")]
BackgroundOption = Annotated[int, typer.Option(
    "--background", min=0, help="fattree/dragonfly: bulk flows per leaf of another job "
    "(0: an idle fabric)")]
OversubOption = Annotated[float, typer.Option(
    "--oversub", min=1.0, help="fattree/dragonfly: leaf over-subscription")]
PredictStepsOption = Annotated[int, typer.Option(
    "--steps", min=5, max=10000, help="simulated steps per point")]
BaseStepsOption = Annotated[float, typer.Option(
    "--base-steps", min=1.0, help="allreduce's steps to the target when the scenario "
    "has no convergence table")]
CsvOutOption = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="FILE", help="the table as CSV")]
FigureOption = Annotated[Path | None, typer.Option(
    "--figure", metavar="PNG", help="throughput and TTA against W, drawn from --out")]


@app.command("predict")
def predict_cmd(
    scenario: PredictScenarioArg,
    calibration: CalibrationOption = [],  # noqa: B006
    workers: WorkersOption = "8,64,1024",
    fabric: FabricOption = "fattree",
    methods: MethodsOption = DEFAULT_METHODS,
    background: BackgroundOption = 4,
    oversub: OversubOption = 4.0,
    steps: PredictStepsOption = 30,
    base_steps: BaseStepsOption = 1000.0,
    out: CsvOutOption = None,
    figure: FigureOption = None,
    jobs: JobsOption = CPUS,
) -> None:
    """Step time, throughput and time to accuracy per method and W; NetSenseML's level."""
    from testbed.simulation import scale
    from testbed.simulation.calibrate import cross_flows

    if fabric not in FABRICS:
        fail(f"--fabric: {fabric!r} is not one of {', '.join(FABRICS)}")
    sizes = parse_workers(workers)
    if figure is not None and out is None:
        fail("--figure: needs --out (the figure is drawn from the CSV)")
    for path, option in ((out, "--out"), (figure, "--figure")):
        if path is not None:
            _check(path, option)
    _need_simgrid()
    meths = parse_methods(methods)
    scn, cal = _scenario_and_calibration(scenario, list(calibration), jobs)
    topo = scn.topology.model_dump(mode="json")
    timeline = [e.model_dump(mode="json") if hasattr(e, "model_dump") else dict(e)
                for e in (scn.timeline or [])]
    try:
        scale.fabric_for(topo, sizes[0], fabric)
    except ValueError as exc:
        fail(str(exc))
    t0 = time.perf_counter()
    rows = scale.predict(cal, topo, meths, sizes, fabric=fabric, steps=steps, parallel=jobs,
                         fabric_options={"background": background, "oversub": oversub},
                         cross=cross_flows(timeline),
                         convergence_path=scn.convergence, default_base_steps=base_steps)
    typer.echo(scale.markdown(rows, [c for c in PREDICTION_COLUMNS if c != "levels"]))
    source = scn.convergence or f"--base-steps {base_steps:g} and the default prior"
    typer.echo(f"time to accuracy: allreduce's steps to the target from {source}; "
               f"{len(rows)} simulations in {time.perf_counter() - t0:.1f} s")
    if out is not None:
        _write(out, _csv(rows, PREDICTION_COLUMNS), "--out")
        typer.echo(f"wrote {out}")
        if figure is not None:
            _draw(out, figure, f"{scn.name}: {fabric}, {background} background flows per "
                  f"leaf, oversubscription {oversub:g}")


PacedTargetArg = Annotated[str, typer.Argument(
    help="a paced run's folder (its config.json), or a scenario name or YAML path with an "
    "accelerator: block")]
PacedMethodsOption = Annotated[str | None, typer.Option(
    "--methods", "-m", metavar="M,M,...", help="methods (default: the run's, or the "
    "scenario's)")]


@app.command("paced")
def paced_cmd(target: PacedTargetArg, methods: PacedMethodsOption = None,
              sets: SetOption = None, jobs: JobsOption = CPUS) -> None:
    """A paced run simulated from its own inputs: profile, DDP's buckets, each method's
    wire sizes and policy, topology, timeline, k (nothing fitted); a run folder's own
    throughput beside it."""
    from testbed.simulation import paced

    _need_simgrid()
    folder = Path(target)
    warm: int | None = None  # the method's own warm-up (a scenario: today's rule)
    if (folder / "config.json").is_file():
        if sets:
            fail("--set: a run folder is simulated as it ran; --set is for a scenario")
        cfgs, start, emulated = _run_configs(folder, methods)
        if emulated:
            from testbed.simulation import paced_validation as pv
            warm = pv.marked_warmup(pv.rank0_steps(folder))
    else:
        cfgs, start, emulated = _scenario_configs(target, methods, sets), None, None
    try:
        jobs_ = [paced.from_config(c, start, target) for c in cfgs]
    except (ValueError, KeyError) as exc:
        fail(str(exc).splitlines()[0] if str(exc) else f"{target}: {type(exc).__name__}")
    t0 = time.perf_counter()
    results = paced.simulate_isolated(jobs_, jobs)
    typer.echo("| method | k | real Mbit/s | simulated samples/s | step ms | levels |"
               + (" emulated | error % |" if emulated else ""))
    typer.echo("|---|---|---|---|---|---|" + ("---|---|" if emulated else ""))
    for job, res in zip(jobs_, results, strict=True):
        # a run folder's throughput is read over the steps its own record counted
        thr = res.throughput(job.batch_size, job.workers, warm) or 0.0
        levels: dict[str, int] = {}
        for st in res.steps[1:]:
            key = str(paced.level_method(st.level, st.ratio)) if job.method in paced.SIMULATED \
                else job.method
            levels[key] = levels.get(key, 0) + 1
        top = ", ".join(f"{k} x{v}" for k, v in sorted(levels.items(), key=lambda kv: -kv[1])[:3])
        row = (f"| {job.method} | {job.dilation:g} | {job.time_dilation.real_mbit(job.bottleneck_mbit):g} | "
               f"{thr:.1f} | {1e3 * job.batch_size * job.workers / thr if thr else 0:.1f} | "
               f"{top} |")
        if emulated:
            row += f" {emulated:.1f} | {100 * (thr / emulated - 1):+.1f} |"
        typer.echo(row)
    typer.echo(f"{len(jobs_)} simulations in {time.perf_counter() - t0:.1f} s "
               "(testbed/simulation/paced.py: what is and is not modelled)")


def _run_configs(folder: Path, methods: str | None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any], float | None]:
    """A run folder's config (one per ``--methods``, else its own), its start record, and
    its emulated throughput (None when other methods are asked)."""
    import json

    try:
        cfg = json.loads((folder / "config.json").read_text())
        start = json.loads((folder / "start.json").read_text()) \
            if (folder / "start.json").is_file() else {}
        summary = json.loads((folder / "summary.json").read_text()) \
            if (folder / "summary.json").is_file() else {}
    except (OSError, ValueError) as exc:
        fail(f"{folder}: unreadable run record ({exc})")
    asked = parse_paced_methods(methods) if methods else [str(cfg.get("method"))]
    emulated = summary.get("throughput_samples_per_s") if asked == [cfg.get("method")] else None
    return [{**cfg, "method": m} for m in asked], start, emulated


def _scenario_configs(scenario: str, methods: str | None,
                      sets: list[str] | None) -> list[dict[str, Any]]:
    """What a run of the scenario would write in its config.json, per method: the timing of
    its accelerator's profile entry, the dilation factor its rule sets (a number, or the
    estimate of ``auto``, testbed.config.estimate)."""
    from netsenseml import accelerator
    from testbed.config.scenario import ScenarioError, apply_overrides, load_scenario

    try:
        scn = apply_overrides(load_scenario(scenario, skip_kernel_checks=True),
                              parse_overrides(sets))
    except ScenarioError as exc:
        fail(str(exc))
    if scn.accelerator is None:
        fail(f"{scenario}: no accelerator: block (the paced simulation needs a profile)")
    try:
        return paced_configs(scn, parse_paced_methods(methods) if methods
                             else list(scn.methods))
    except accelerator.ProfileError as exc:
        fail(f"accelerator.profile: {exc}")


def paced_configs(scn: Any, methods: list[str]) -> list[dict[str, Any]]:
    """What a run of the loaded scenario ``scn`` (with an ``accelerator:`` block) would
    write in its config.json, one per method: its profile entry's timing, the dilation
    factor its rule sets (a number, or the estimate of ``auto``, testbed.config.estimate).
    ``accelerator.ProfileError`` where the profile has no entry for the workload."""
    from testbed.config.estimate import estimate

    acc, wl = scn.accelerator, scn.workload
    timing = acc.timing(wl.model, wl.knobs(), wl.batch_size)
    out = []
    for m in methods:
        k = float(acc.dilation) if acc.dilation != "auto" else float(estimate(scn, m)["k"])
        out.append({"scenario": scn.model_dump(mode="json"), "method": m,
                    "world_size": scn.world_size,
                    "accelerator": {"mode": "paced", "timing": timing.to_json(),
                                    "profile": acc.profile, "dilation": k}})
    return out


def parse_paced_methods(text: str) -> list[str]:
    """``--methods`` of ``simulate paced``: each one the paced simulation can run."""
    from testbed.simulation.paced import check_method

    out = []
    for m in (p.strip() for p in text.split(",") if p.strip()):
        try:
            check_method(m)
        except ValueError as exc:
            fail(f"--methods: {exc}")
        out.append(m)
    if not out:
        fail("--methods: empty")
    return out


def _scenario_and_calibration(scenario: str, calibration: list[Path],
                              jobs: int) -> tuple[Any, Any]:
    """The scenario and the fit, which must be of the same workload (model, dataset,
    batch size); one error line and exit 2 otherwise."""
    from testbed.config.scenario import ScenarioError, load_scenario

    try:
        scn = load_scenario(scenario, skip_kernel_checks=True)
    except ScenarioError as exc:
        fail(str(exc))
    cal = _calibration(calibration, jobs)
    wl = scn.workload
    mine = (wl.model, wl.dataset, wl.batch_size)
    theirs = (cal.workload.get("model"), cal.workload.get("dataset"),
              cal.workload.get("batch_size"))
    if mine != theirs:
        fail(f"scenario: workload (model, dataset, batch_size) {mine} is not the "
             f"calibration's {theirs}; calibrate on runs of this workload")
    return scn, cal


def _draw(table: Path, figure: Path, title: str) -> None:
    """The prediction's figure, drawn from its CSV."""
    from testbed.simulation.figure import figure as draw

    _check(figure, "--figure")
    draw(table, figure, title)
    typer.echo(f"wrote {figure}")


def register(parent: typer.Typer) -> None:
    """Add ``simulate`` to the ``netsense`` command."""
    parent.add_typer(app, name="simulate")
