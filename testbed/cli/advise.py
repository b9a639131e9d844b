"""``netsense advise MODEL --workers N --rate MBIT``: will compression pay for my job?

Predicts throughput per method for a model (a built-in with an entry in the accelerator
profile), a worker count, a topology and a network, names the best method with its margin
over the runner-up and the uncertainty, finds the rates at which the best method changes,
and lists every input it assumed. The prediction is ``testbed.simulation.advise`` (the
closed form, fed by the profile, DDP's bucket layout and the method registry; its module
docstring says why not SimGrid: the 10 s answer). Every refusal is one line naming the
option and what is allowed, exit 2, before anything is computed.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli.common import fail

MAX_WORKERS = 4096
TOPOLOGIES = ("star", "dumbbell", "fattree")

ModelArg = Annotated[str, typer.Argument(
    metavar="MODEL", help="a model with an entry in the profile (mlp, resnet18-imagenet, "
    "vgg16, gpt2-small in a100-estimated)")]
WorkersOption = Annotated[int, typer.Option("--workers", "-w", help="data-parallel workers")]
RateOption = Annotated[float, typer.Option(
    "--rate", metavar="MBIT", help="the ring's bottleneck rate, Mbit/s (star: each access "
    "link; dumbbell: the bottleneck; fattree: every link)")]
TopologyOption = Annotated[str, typer.Option(
    "--topology", "-t", help="star, dumbbell or fattree (over-subscribed 4:1 leaf uplinks, "
    "16 hosts and 8 workers a leaf)")]
StreamsOption = Annotated[int, typer.Option(
    "--streams", metavar="K", help="competing bulk TCP streams on the ring's bottleneck "
    "(fattree: another job's flows per leaf through the uplinks)")]
MethodsOption = Annotated[str | None, typer.Option(
    "--methods", "-m", metavar="M,M,...", help="methods to compare (default: every fixed "
    "level of the paper grid, PowerSGD 4, NetSenseML, StellaTrain)")]
LatencyOption = Annotated[float, typer.Option(
    "--latency-us", metavar="US", help="per-message latency of one ring step, microseconds "
    "(assumed: a cluster's TCP with gloo)")]
ProfileOption = Annotated[str, typer.Option(
    "--profile", metavar="NAME|FILE", help="accelerator profile: compute and codec times")]
BatchOption = Annotated[int | None, typer.Option(
    "--batch-size", "-b", help="per-worker batch (default: the profile entry's)")]
DatasetOption = Annotated[str | None, typer.Option(
    "--dataset", help="the model's dataset (default: the one its profile entry was made for)")]
CrossoverOption = Annotated[bool, typer.Option(
    "--crossover/--no-crossover", help="search rates 1 Mbit/s - 400 Gbit/s for where the "
    "best method changes")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
CheckOption = Annotated[bool, typer.Option(
    "--check", help="verify the best method and the runner-up with short emulated runs "
    "(payload mode, the model's paper-*-star scenario; star, <= 8 workers, no streams; "
    "minutes, under the heavy lock) and print both")]
ResultsOption = Annotated[Path | None, typer.Option(
    "--results", "-r", metavar="DIR", help="--check: keep its run folders here (default: "
    "a temporary folder, removed)")]

#: The emulated scenario of each model ``--check`` can run (testbed/scenarios/).
CHECK_SCENARIOS = {"resnet18-imagenet": "paper-resnet18-star", "vgg16": "paper-vgg16-star",
                   "gpt2-small": "paper-gpt2-star"}
CHECK_MAX_WORKERS = 8
#: The lock every command that builds emulated networks on this machine takes (one at a
#: time: two emulations on 2 cores would each measure the other's load).
HEAVY_LOCK = Path(os.environ.get("NETSENSE_HEAVY_LOCK", "/tmp/netsense-heavy.lock"))


def advise(
    model: ModelArg,
    workers: WorkersOption = 8,
    rate: RateOption = 1000.0,
    topology: TopologyOption = "star",
    streams: StreamsOption = 0,
    methods: MethodsOption = None,
    latency_us: LatencyOption = 50.0,
    profile: ProfileOption = "a100-estimated",
    batch_size: BatchOption = None,
    dataset: DatasetOption = None,
    crossover: CrossoverOption = True,
    as_json: JsonOption = False,
    check: CheckOption = False,
    results: ResultsOption = None,
) -> None:
    """Predict throughput per method for MODEL on N workers at a rate; name the best, its
    margin and uncertainty, the crossover rates, and what is assumed."""
    if topology not in TOPOLOGIES:
        fail(f"--topology: {topology!r} unknown; allowed: {', '.join(TOPOLOGIES)}")
    if not 1 <= workers <= MAX_WORKERS:
        fail(f"--workers: {workers} out of range; allowed: 1..{MAX_WORKERS}")
    if not (math.isfinite(rate) and 0 < rate <= 1e9):
        fail(f"--rate: {rate:g} Mbit/s out of range; allowed: > 0 and <= 1e9")
    if not (math.isfinite(latency_us) and 0 <= latency_us <= 1e6):
        fail(f"--latency-us: {latency_us:g} out of range; allowed: 0..1000000")
    if not 0 <= streams <= 1000:
        fail(f"--streams: {streams} out of range; allowed: 0..1000")
    if check:
        _check_checkable(model, topology, workers, streams, profile, batch_size, dataset)
    from testbed.simulation import advise as adv

    try:
        method_list = adv.check_methods(methods) if methods else list(adv.DEFAULT_METHODS)
        work = adv.load_workload(model, profile=profile, dataset=dataset,
                                 batch_size=batch_size)
    except adv.AdviseError as exc:
        fail(str(exc))
    if not all(b.shapes for b in work.buckets):  # a low-rank method's sizes need them
        method_list = [m for m in method_list if not adv.needs_shapes(m)]
    weight = adv.stream_weight()
    net = adv.Network(topology, workers, rate, streams, alpha_s=latency_us * 1e-6,
                      stream_weight=weight)
    rows = adv.predict(work, net, method_list)
    best = adv.best_of(rows, method_list)
    runner = next(r for r in rows if r.method != best.method)
    xs = adv.crossovers(work, net, method_list) if crossover else []
    answer = _answer(adv, work, net, rows, best, runner, xs, crossover)
    if check:
        answer["check"] = _emulate(model, workers, rate, [best, runner], adv, results)
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
        return
    typer.echo(_text(answer))


def _answer(adv: Any, work: Any, net: Any, rows: list[Any], best: Any, runner: Any,
            xs: list[Any], searched: bool) -> dict[str, Any]:
    """Everything printed, as one JSON-able dict."""
    margin = best.throughput / runner.throughput - 1
    # the call holds if the best's pessimistic throughput still beats the runner-up's
    # optimistic one
    firm = bool(best.throughput * (1 - best.uncertainty_pct / 100)
                > runner.throughput * (1 + runner.uncertainty_pct / 100))  # NaN: not firm
    base = next((r.throughput for r in rows if adv.is_reference(r.method)), None)
    t = work.timing
    free = [r.method for r in rows if r.method not in adv.ADAPTIVE
            and not adv.is_reference(r.method)
            and adv.codec_label(r.method) not in t.codec_s_per_mb]
    return {
        "model": work.model, "dataset": work.dataset, "batch_size": work.batch_size,
        "workers": net.workers, "topology": net.topology, "rate_mbit": net.rate_mbit,
        "streams": net.streams,
        "rows": [{"method": r.method, "throughput": round(r.throughput, 1),
                  "step_ms": round(r.step_s * 1e3, 3),
                  "exposed_comm_ms": None if math.isnan(r.exposed_s)
                  else round(r.exposed_s * 1e3, 3),
                  "x_allreduce": round(r.throughput / base, 3) if base else None,
                  "uncertainty_pct": None if math.isnan(r.uncertainty_pct)
                  else r.uncertainty_pct, "uncertainty_from": r.uncertainty_from,
                  "family": r.family, "levels": r.levels} for r in rows],
        "best": best.method, "runner_up": runner.method, "margin_pct": round(100 * margin, 1),
        "firm": firm,
        "crossovers": [{"rate_mbit": round(x.rate_mbit, 1), "below": x.below, "above": x.above}
                       for x in xs] if searched else None,
        "assumed": [
            f"compute and codec: profile {work.profile!r}, entry {work.model} batch "
            f"{work.batch_size} (origin: {t.origin}): forward {t.forward_s * 1e3:g} ms, "
            f"backward {t.backward_s * 1e3:g} ms, optimizer {t.optimizer_s * 1e3:g} ms",
            f"buckets: {len(work.buckets)}, {work.layout_origin}; {work.params / 1e6:.1f} M "
            "parameters (workloads.registry.param_count)",
            "bytes: the method registry's wire factor x each bucket's fp32 bytes (top-k, DGC: "
            "value + int32 index per kept element; PowerSGD: torch's P, Q and uncompressed "
            "tensors); steady state (PowerSGD's and DDP's first steps left out)",
            f"network: ring collectives, per-message latency {net.alpha_s * 1e6:g} us "
            f"({'assumed' if math.isclose(net.alpha_s, adv.ALPHA_S) else 'given'}), goodput {net.eta:g} of the rate (fitted on the paper-scale "
            f"allreduce runs); {net.streams} competing stream(s) weighted {net.stream_weight:g} "
            "of a ring flow each (simcal.json's cross_weight); the ring's share of its "
            f"bottleneck {net.share():.3g}",
            "codec time a profile does not name is free on the device: "
            + (", ".join(free) if free else "none here"),
            "one machine per worker (no CPU sharing); communication overlaps the backward "
            "as DDP's buckets are released (the pacer's schedule)",
            "uncertainty (the +- column): per method family, the worst held-out |throughput "
            "error| of this closed form against the emulated paper grid "
            "(results/simulation/advise-validation.csv, benchmarks/advise_validation.py; "
            "the 'uncertainty' lines say which runs), where the grid has none the SimGrid "
            "model's on the small MLP (validation-summary.csv)",
            "engine: the closed form (testbed.simulation.advise), not SimGrid: one SimGrid "
            "point at 1024 workers takes 12-21 s; not simulated: "
            + "; ".join(f"{k} ({v})" for k, v in adv.NOT_SIMULATED.items()),
        ],
    }


def _check_checkable(model: str, topology: str, workers: int, streams: int, profile: str,
                     batch_size: int | None, dataset: str | None) -> None:
    """--check runs only what a paper-*-star scenario on this machine can emulate."""
    if model not in CHECK_SCENARIOS:
        fail(f"--check: no emulated scenario for {model!r}; allowed models: "
             f"{', '.join(CHECK_SCENARIOS)}")
    if topology != "star":
        fail(f"--check: emulates the star only; allowed: --topology star, got {topology!r}")
    if not 2 <= workers <= CHECK_MAX_WORKERS:
        fail(f"--check: emulates 2..{CHECK_MAX_WORKERS} workers on this machine; got {workers}")
    if streams:
        fail("--check: emulates an idle network only; allowed: --streams 0")
    if profile != "a100-estimated" or batch_size not in (None, 32) or dataset is not None:
        fail("--check: the scenarios' workload only; allowed: --profile a100-estimated, "
             "--batch-size 32, no --dataset")


def _emulate(model: str, workers: int, rate: float, rows: list[Any], adv: Any,
             results: Path | None) -> list[dict[str, Any]]:
    """Each row's method run emulated (payload mode: DDP's buckets, each method's real
    bytes, the profile's compute; 8 steps fixed, 40 adaptive, as the paper grid), under
    the heavy lock; measured throughput beside the prediction.

    SIGTERM while waiting or running becomes an exit (143) that unwinds: the temporary
    folder is removed, and a run in flight gets SIGTERM in turn and is waited for, so its
    own teardown removes its emulated network (a kill would leave it)."""
    previous = signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        with HEAVY_LOCK.open("a") as lock:
            if not _held_by_ancestor(HEAVY_LOCK):  # `flock LOCK netsense advise --check`
                typer.echo(f"--check: waiting for {HEAVY_LOCK} ...", err=True)
                fcntl.flock(lock, fcntl.LOCK_EX)
            with tempfile.TemporaryDirectory(prefix="netsense-advise-") as tmp:
                where = results if results is not None else Path(tmp)
                return [_one_check(model, workers, rate, r, adv, where) for r in rows]
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_term(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _one_check(model: str, workers: int, rate: float, r: Any, adv: Any,
               where: Path) -> dict[str, Any]:
    steps = 40 if r.method in adv.ADAPTIVE else 8
    typer.echo(f"--check: emulating {r.method} ({steps} steps) ...", err=True)
    cmd = [sys.executable, "-m", "testbed.cli", "run", CHECK_SCENARIOS[model],
           "-m", r.method, "-s", "0", "-r", str(where), "-q",
           "--set", f"topology.n_workers={workers}", "--set", f"topology.rate_mbit={rate:g}",
           "--set", "workload.grads=payload", "--set", f"workload.steps={steps}"]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err_text = child.communicate()
    except BaseException:
        child.terminate()  # its run's teardown removes what it built
        child.wait(timeout=300)
        raise
    measured = _measured(where / CHECK_SCENARIOS[model], r.method)
    if measured is None:
        last = (err_text.strip().splitlines() or ["no output"])[-1]
        fail(f"--check: the emulated run of {r.method} did not finish ok: {last}", code=1)
    err = 100 * (r.throughput / measured - 1)
    return {"method": r.method, "predicted": round(r.throughput, 1),
            "measured": round(measured, 1), "error_pct": round(err, 1),
            "within": abs(err) <= r.uncertainty_pct}


def _held_by_ancestor(path: Path) -> bool:
    """Whether a process this one descends from holds the flock on ``path`` (run as
    ``flock /tmp/netsense-heavy.lock netsense advise --check``, taking it again would wait
    for ever). Read from /proc/locks: a holder's line names its PID and the file's inode."""
    try:
        inode = os.stat(path).st_ino
        holders = set()
        for line in Path("/proc/locks").read_text().splitlines():
            f = line.split()
            if len(f) >= 6 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(inode):
                holders.add(int(f[4]))
        pid = os.getpid()
        while pid > 1:
            if pid in holders:
                return True
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return False


def _measured(folder: Path, method: str) -> float | None:
    """The throughput of the newest ok run of ``method`` under ``folder``."""
    best: tuple[float, float] | None = None
    for summary in folder.glob("*/summary.json"):
        try:
            s = json.loads(summary.read_text())
            cfg = json.loads((summary.parent / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if cfg.get("method") != method or s.get("status") != "ok":
            continue
        thr = s.get("throughput_samples_per_s")
        if isinstance(thr, int | float) and (best is None or summary.stat().st_mtime > best[0]):
            best = (summary.stat().st_mtime, float(thr))
    return None if best is None else best[1]


def _text(a: dict[str, Any]) -> str:
    """The answer as a table and lines."""
    head = (f"{a['model']} (batch {a['batch_size']}/worker) on {a['workers']} workers, "
            f"{a['topology']} at {a['rate_mbit']:g} Mbit/s"
            + (f", {a['streams']} competing stream(s)" if a["streams"] else ""))
    lines = [head, "",
             "| method | samples/s | step ms | exposed comm ms | x allreduce | uncertainty |",
             "|---|---|---|---|---|---|"]
    for r in a["rows"]:
        lvl = _levels(r["levels"])
        exp = "" if r["exposed_comm_ms"] is None else f"{r['exposed_comm_ms']:.1f}"
        xa = "" if r["x_allreduce"] is None else f"{r['x_allreduce']:.2f}"
        unc = "" if r["uncertainty_pct"] is None else f"+-{r['uncertainty_pct']:g} %"
        lines.append(f"| {r['method']}{lvl} | {r['throughput']:.0f} | {r['step_ms']:.1f} | "
                     f"{exp} | {xa} | {unc} |")
    lines += ["", f"best: {a['best']}, {a['margin_pct']:g} % over {a['runner_up']} "
              + ("(beyond both uncertainties)" if a["firm"] else
                 "(within the uncertainty: the two are not told apart)")]
    if a["crossovers"] is not None:
        if a["crossovers"]:
            lines.append("crossovers (1 Mbit/s - 400 Gbit/s): " + "; ".join(
                f"{x['below']} -> {x['above']} at {x['rate_mbit']:g} Mbit/s"
                for x in a["crossovers"]))
        else:
            lines.append("crossovers (1 Mbit/s - 400 Gbit/s): none; "
                         f"{a['best']} is best at every rate searched")
    lines += ["", "uncertainty (+-), per method family:"] + [
        f"  - {', '.join(ms)}: +-{pct} %, {src}" for (pct, src), ms in _sources(a["rows"])]
    if a.get("check"):
        lines += ["", "check (emulated, payload mode, seed 0):", "",
                  "| method | predicted | measured | error | within the uncertainty |",
                  "|---|---|---|---|---|"]
        for c in a["check"]:
            lines.append(f"| {c['method']} | {c['predicted']:.0f} | {c['measured']:.0f} | "
                         f"{c['error_pct']:+.1f} % | {'yes' if c['within'] else 'no'} |")
    lines += ["", "assumed:"] + [f"  - {s}" for s in a["assumed"]]
    return "\n".join(lines)


def _sources(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, str], list[str]]]:
    """The rows' uncertainty figures and sources, each with its methods (first seen first)."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        pct = "?" if r["uncertainty_pct"] is None else f"{r['uncertainty_pct']:g}"
        out.setdefault((pct, r["uncertainty_from"]), []).append(r["method"])
    return list(out.items())


def _levels(levels: dict[str, int], most: int = 3) -> str:
    """An adaptive method's levels, the most sent first: `` (topk:0.005 39)``."""
    if not levels:
        return ""
    ranked = sorted(levels.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{_short(k)} {v}" for k, v in ranked[:most])
    more = len(ranked) - most
    return f" ({text}{f', {more} more' if more > 0 else ''})"


def _short(level: str) -> str:
    name, _, r = level.partition(":")
    return f"{name}:{float(r):.3g}" if r else level


def register(parent: typer.Typer) -> None:
    """Add ``advise`` to the ``netsense`` command."""
    parent.command("advise")(advise)
