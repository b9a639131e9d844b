"""Every benchmark in ``benchmarks/`` runs at a tiny size and prints the figures it exists for.

Why: ``test_documented_benchmarks.py`` starts each benchmark with ``--help``, which reaches
its imports and its argument parser but none of its measuring code. A benchmark is run by
hand, months after it was written; a call into the library that has changed since
(``convergence.py --priors`` once called a function the policy had lost) or a size nobody
tried surfaces only then, in front of a reader. So each one is run here as a reader runs it,
``python benchmarks/<name>.py`` from the repository root, at the smallest size its arguments
allow, and must exit 0 *and* print its table: the header and a row whose cells are numbers
(or write the file it is asked for, with its columns). The figures' values are not judged:
at this size, on a shared machine, they mean nothing.

The benchmarks that build no network start together, one process each (the module's
``started`` fixture), so the module costs about what its slowest one costs. The ones that
build emulated networks need root and are marked ``emulation`` (skipped where the machine
cannot emulate, ``tests/conftest.py``); they run one at a time, each with a second or so
of traffic and one repeat. ``gpu_smoke.sh`` needs a GPU, which nothing in ``make test``
may: only its refusal without one is checked.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.common.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
ACCEL = "results/runs/accel-policy"  # committed run folders: the analysers read these
D70_NETSENSEML = f"{ACCEL}/d70/netsenseml"
ONE_RUN = f"{D70_NETSENSEML}/accel-d70/20261207-013848-netsenseml-s4"
NUM = r"-?\d+(?:\.\d+)?"


@dataclass
class Tiny:
    """One benchmark at a tiny size: its arguments (``{tmp}``: a folder of its own), the
    lines its output must hold (regular expressions, each matching one line), the CSV files
    it must write with the columns they must have, and what exit status counts as done."""

    script: str
    args: list[str]
    expect: list[str]
    written: dict[str, list[str]] = field(default_factory=dict)
    exit_ok: Callable[[int, str], bool] = lambda code, out: code == 0


def _compressors_verdict(code: int, out: str) -> bool:
    """Its exit status is its speed target's verdict (sampled top-k >= 4x exact), which a
    tiny tensor on a shared machine need not meet: the status must agree with the verdict
    it printed, and a crash (no verdict) fails."""
    verdicts = re.findall(r"-> (MET|NOT MET) \(", out)
    return bool(verdicts) and code == (0 if all(v == "MET" for v in verdicts) else 1)


#: The benchmarks that need no network (no root), each at its smallest useful size.
CPU: dict[str, Tiny] = {
    "convergence-priors": Tiny("convergence.py", ["--priors"], [
        r"^prior: .+\(resolution", rf"^int8\s+{NUM}$", rf"^topk:0\.05\s+{NUM}\s+\(interpolated\)$"]),
    # the smallest workload (digits, target 0.75) with one method and seed: two real ranks
    "convergence-table": Tiny("convergence.py", [
        "--workload", "digits", "--methods", "allreduce", "--seeds", "0", "--out", "{tmp}"], [
        r"^workload digits: mlp", rf"^allreduce\s+\d/1\s+.*\s{NUM}\s*$"],
        written={"runs.csv": ["workload", "method", "seed", "steps"]}),
    # one model at one size, one try: the whole command as a user runs it
    "advise_speed": Tiny("advise_speed.py", ["--workers", "8", "--repeat", "1",
                                             "--models", "resnet18-imagenet"], [
        rf"^\| resnet18-imagenet \| 8 \| {NUM} \| {NUM} \| {NUM} \|$",
        rf"^worst answer {NUM} s; target <= 10 s: (met|MISSED)$"]),
    # the committed paper-grid runs at one rate: a run's row, a family's spread, the files
    "advise_validation": Tiny("advise_validation.py", [
        "results/runs/paper-grid", "--only", "rate_mbit=300/", "--out", "{tmp}"], [
        rf"^\| resnet18-star/rate_mbit=300/fp16-s0 \| resnet18-imagenet \| star \| 8 \| 300 \| "
        rf"{NUM} \| fp16 \| allreduce \| {NUM} \| {NUM} \| [+-]{NUM} \|$",
        rf"^\| resnet18-imagenet \| all-gather \(int8, top-k, DGC\) \| \d+ \| {NUM} \| "
        rf"{NUM} \| \S+ \| [+-]{NUM} \|$",
        rf"^all: \d+ held-out runs, \|error\| median {NUM} %, worst {NUM} %$"],
        written={"advise-validation.csv": ["run", "model", "method", "family", "measured",
                                           "predicted", "error_pct", "held_out"]}),
    # one model, one rate, two worker counts: the CSV and the figure drawn from it
    "advise_scale": Tiny("advise_scale.py", [
        "--models", "resnet18-imagenet", "--rates", "1000", "--workers", "8,16",
        "--methods", "allreduce,topk:0.01", "--out", "{tmp}"], [
        r"^resnet18-imagenet at 1000 Mbit/s: best 8: \S+, 16: \S+$", r"scale-advise\.png$"],
        written={"scale-advise.csv": ["model", "rate_mbit", "workers", "method",
                                      "samples_per_s", "best"]}),
    "policy_cost": Tiny("policy_cost.py", ["--steps", "30", "--repeats", "1"], [
        rf"observations, 1 passes: per observation fastest {NUM} ms, median {NUM} ms"]),
    # one job, one rate, one seed of the noisy sections: every section still runs
    "policy_response": Tiny("policy_response.py", [
        "--jobs", "mlp", "--rates", "100", "--seeds", "1"], [
        r"^mlp at 100 Mbit/s -- response", rf"^\s+50\s+{NUM}\s+\S+.*\s{NUM}$",
        r"^mlp at 100 Mbit/s -- recovery .*reacts", r"changes in 500 steady steps: 0 streams",
        r"^\s+seed 0: idle \[.+\]\s+8 streams \[", rf"idle step time / allreduce {NUM}$"]),
    # --real on one committed run (0.23 s of virtual time: segments of 0.1 s)
    "policy_response-real": Tiny("policy_response.py", [
        "--real", ONE_RUN, "--segments", "0,0.1,0.2,0.3", "--settle", "0"], [
        rf"^\s+0\.0-\s+0\.1 s:\s+\d+ steps, median step\s+{NUM} ms, level changes \d+"]),
    "policy_targets": Tiny("policy_targets.py", [
        "--timeline", f"{ACCEL}/d70", "--static", f"{ACCEL}/static5"], [
        rf"^\s+allreduce / netsenseml\s+{NUM} \[{NUM}, {NUM}\]",
        rf"ideal TTA / netsenseml TTA .*{NUM} \[", rf"^\s+idle\s+mean {NUM}",
        rf"^\s+topk:0\.01 / netsenseml\s+{NUM} \["]),
    # the committed paper-grid runs at one rate and method: every column, the summary
    "sim_paper_grid": Tiny("sim_paper_grid.py", [
        "results/runs/paper-grid", "--only", "resnet18-star/rate_mbit=1000/fp16-s0", "--out", "{tmp}"], [
        rf"^\| resnet18-star/rate_mbit=1000/fp16-s0 \| fp16 \| 1000 \| {NUM} \| {NUM} \| "
        rf"{NUM} \| {NUM} \| [+-]{NUM} \| {NUM} \| {NUM} \| - \|$",
        rf"^all: 1 points, \|error\| median {NUM} %, worst {NUM} %"],
        written={"paper-grid-validation.csv": ["point", "emulated", "simulated", "error_pct"]}),
    # one model and method, the ramp's first 15 s (idle, then 1 stream): both CSVs, the figure
    "sim_ramp": Tiny("sim_ramp.py", [
        "--models", "resnet18-imagenet", "--methods", "netsenseml", "--time-limit", "15",
        "--out", "{tmp}"], [
        rf"^\| resnet18-imagenet \| netsenseml \| {NUM} \| {NUM} \| {NUM} \|$",
        r"^\| resnet18-imagenet \| netsenseml: level \| \| topk:\S+ \| topk:\S+ \|$",
        r"^PREDICTION, held out: made at commit \S+ on \d{4}-\d\d-\d\d", r"ramp-prediction\.png$"],
        written={"ramp-prediction.csv": ["model", "method", "window", "samples_per_s", "level"],
                 "ramp-prediction-levels.csv": ["model", "method", "start_s", "end_s", "level"]}),
    # --runs on the committed accel-ramp runs of one arm (NetSenseML, six seeds)
    "sim_ramp-runs": Tiny("sim_ramp.py", [
        "--runs", "results/runs/policy-changes/sustained-filter/accel-ramp/netsenseml",
        "--out", "{tmp}"], [
        rf"^\| accel-ramp/\S+-s0 \| netsenseml \| {NUM} \| idle \(0 s\) \| {NUM} \| {NUM} \| "
        rf"[+-]{NUM} \| - \| - \| 1\.00/1\.00 \| {NUM} \|$",
        rf"^throughput per window: \d+ windows, \|error\| median {NUM} %",
        rf"^levels same: 6 adaptive runs, median {NUM} %, lowest {NUM} %"],
        written={"ramp-validation.csv": ["run", "window", "emulated", "simulated", "error_pct",
                                          "levels_same"]}),
    "sim_scale": Tiny("sim_scale.py", ["--workers", "8", "--steps", "2", "--repeat", "1"], [
        rf"^allreduce on a congested fattree of 8 workers, 2 steps: {NUM} s wall.*step {NUM} s"]),
    "compressors": Tiny("compressors.py", ["--sizes", "100000", "--reps", "1"], [
        rf"^topk:0\.01\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$", rf"^auto:0\.01\s+{NUM}",
        rf"^one pass over the tensor .* {NUM} passes$"], exit_ok=_compressors_verdict),
    "compute_step": Tiny("compute_step.py", ["--only", "gpt", "--steps", "1", "--batch-size", "2"], [
        rf"^gpt\s+\{{'layers': 2, 'd_model': 64\}}\s+text\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$"]),
    # the smallest of the paper's models, one sample, one timed step
    "paper_models": Tiny("paper_models.py", [
        "--models", "resnet18-imagenet", "--batch-size", "1", "--steps", "1"], [
        rf"^resnet18-imagenet\s+params\s+[\d,]+\s+build {NUM} s\s+real step: forward {NUM} s"
        rf".* then forward {NUM} ms backward {NUM} ms a step$"]),
    "collective_floor": Tiny("collective_floor.py", ["--iters", "20", "--port", "{port}"], [
        rf"^\s+rank {r}: collective min {NUM} us, median {NUM} us; kernel tcpi_min_rtt {NUM} us"
        for r in (0, 1)]),
    "hook_overhead": Tiny("hook_overhead.py", [
        "--steps", "5", "--rounds", "1", "--levels", "fp16"], [
        rf"^fp16 fixed\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
        rf"^fp16 pinned netsenseml\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$"]),
    "rank_stagger": Tiny("rank_stagger.py", [f"{ACCEL}/static5", "--skip-s", "0"], [
        r"^\| method \| W \|", r"^\| netsenseml \| 2 \| idle \| \d+ \| 1: [+-]\d+ \([+-]\d+%\) \|$"]),
    "sensing_error": Tiny("sensing_error.py", [D70_NETSENSEML], [
        r"^\| accel-d70/\S+-netsenseml-s0 \| \d+ % \| \d+ % \|",
        r"^segments with more than one label change: \d+ of \d+"]),
    "rate_filters": Tiny("rate_filters.py", [D70_NETSENSEML], [
        r"^\| sustained \| \d+ % \| \d+ % \|$", r"^\| max \| \d+ % \| \d+ % \|$"]),
    "fair_share_estimators": Tiny("fair_share_estimators.py", [
        D70_NETSENSEML, "--fixed", "results/runs/sensing-dilation/s1-k450"], [
        r"^1 fixed-level runs \(--fixed\)", rf"^8\s+default\s+450\.0\s+>=6\s+\d+(\s+{NUM}){{4}}$",
        rf"^\s*accel-d70/\S+-int8-s1\s+default\s+450\.0(\s+{NUM}){{6}}\s+0\s+{NUM}(\s+{NUM}){{3}}$",
        r"^6 runs, window 8;",
        r"^\| sustained \| \d+ % \(\d+ %\) \| \d+/6 \| \d+ % \(\d+ %\) \| \d+/6 \| [\d.]+ \|$",
        rf"^62\s+\d+\s+{NUM}\s+{NUM}$", rf"^8\s+default\s+140\.0\s+1\s+\d+(\s+{NUM}){{4}}$"]),
    "sim_seed_spread": Tiny("sim_seed_spread.py", [
        "results/simulation/validation.csv", f"{ACCEL}/static5", "-o", "{tmp}/spread.csv"], [
        rf"^netsenseml,2,idle,\d+,.*,{NUM}$", rf"^netsenseml: seed spread median {NUM} %"],
        written={"spread.csv": ["method", "workers", "condition", "seeds", "spread_pct",
                                "err_vs_mean_pct"]}),
}


def test_every_benchmark_has_a_tiny_run() -> None:
    """A benchmark added to ``benchmarks/`` without a tiny run here would be the one that
    rots unseen: every script must be in ``CPU`` or ``EMULATED`` (or be gpu_smoke.sh)."""
    scripts = {p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh")}
    covered = {t.script for t in (*CPU.values(), *EMULATED.values())} | {"gpu_smoke.sh"}
    assert scripts - covered == set(), "give these a tiny run in this module"


def _argv(tiny: Tiny, tmp: Path) -> list[str]:
    port = str(free_port())
    return [sys.executable, f"benchmarks/{tiny.script}",
            *(a.replace("{tmp}", str(tmp)).replace("{port}", port) for a in tiny.args)]


def _start(tiny: Tiny, tmp: Path) -> subprocess.Popen[str]:
    """The benchmark in a process group of its own (its children: simulations, ranks)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(_argv(tiny, tmp), cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _check(tiny: Tiny, code: int, out: str, err: str, tmp: Path) -> None:
    said = f"\n--- stdout (end) ---\n{out[-1500:]}\n--- stderr (end) ---\n{err[-1500:]}"
    assert tiny.exit_ok(code, out), f"benchmarks/{tiny.script}: exit {code}{said}"
    missing = [p for p in tiny.expect if not re.search(p, out, re.MULTILINE)]
    assert not missing, f"benchmarks/{tiny.script} printed no line like {missing}{said}"
    for name, columns in tiny.written.items():
        with open(tmp / name, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and set(columns) <= set(rows[0]), (name, columns, rows[:1])


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, tuple]]:
    """Every selected CPU benchmark started at once: the module waits for the slowest, not
    the sum (``-k`` one of them and only that one starts)."""
    selected = {item.callspec.params["key"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_benchmark_runs_at_a_tiny_size"}
    base = tmp_path_factory.mktemp("bench")
    procs = {key: (_start(CPU[key], base / key), base / key) for key in CPU if key in selected}
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:  # run here but tested on another xdist worker, or timed out:
            os.killpg(proc.pid, signal.SIGKILL)  # its forked children hold its stdout too
            proc.communicate()


@pytest.mark.parametrize("key", list(CPU))
def test_benchmark_runs_at_a_tiny_size(key: str, started: dict[str, tuple]) -> None:
    proc, tmp = started[key]
    out, err = proc.communicate(timeout=240)
    _check(CPU[key], proc.returncode, out, err, tmp)


#: The benchmarks that build emulated networks, each at its smallest size: one repeat, a
#: second of traffic, the fewest workers and steps. One at a time (they share the cores
#: with the emulation they measure). The slowest are bound by starting Python workers, not
#: by traffic: faithful_range (~13 s: the compute load's imports, twice) and run_overhead
#: (~17 s: twelve `netsense` invocations, three worker launches, torchrun; its --train-s
#: exists for this test).
EMULATED: dict[str, Tiny] = {
    "emulation": Tiny("emulation.py", ["--repeat", "1"], [
        rf"^{label}\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}$"
        for label in ("star-8", "dumbbell-4\\+4", "leafspine-2x2x2")]),
    # the socket capture (a thread of the benchmark) needs no tool beyond the emulation's
    "capture_overhead": Tiny("capture_overhead.py", [
        "--rates", "100", "--seconds", "1", "--repeats", "1", "--modes", "none", "socket"], [
        rf"^\s+100\s+none\s+{NUM}\s+0\.00\s", rf"^\s+100\s+socket\s+{NUM}\s+{NUM}\s+[1-9]\d*\s"]),
    "faithful_range": Tiny("faithful_range.py", [
        "--rates", "100", "--seconds", "1", "--workers", "1", "--csv", "{tmp}/range.csv"], [
        rf"^\s+100\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+(yes|NO)$",
        rf"^highest faithful rate .*: {NUM} Mbit/s$"],
        written={"range.csv": ["rate_mbit", "idle_mbit", "loaded_mbit", "faithful"]}),
    # gap 1's harness: 4 bare gloo ranks, one 2 MB allreduce; one flow each way for 1 s
    "ring_idle": Tiny("ring_idle.py", ["--rate", "100", "--mb", "2", "--iters", "1",
                                       "--workers", "4", "--ack-first"], [
        rf"^\s+rate 100 cc default q 100 ack-first: eff {NUM} idle {NUM}",
        rf"^  rank 0: span {NUM} busy .* cwnd \d+ rtt {NUM}"]),
    "two_way": Tiny("two_way.py", ["--rate", "50", "--seconds", "1"], [
        rf"^rate 50 cc default one: {NUM}$", rf"^rate 50 cc default two: {NUM} {NUM}$"]),
    "own_job_overhead": Tiny("own_job_overhead.py", ["--runs", "1", "--steps", "2"], [
        rf"^{kind}\s+{NUM}\s+{NUM}\s+\w" for kind in (
            "built-in, zygote", "own job", "own job, fresh interpreter")] + [
        rf"^own job\s+[+-]{NUM} s\s+\(n=1\)$"]),
    # the static scenario's run, cut to 0.01 s of virtual time (seconds of real time)
    "accelerator_targets": Tiny("accelerator_targets.py", [
        "repeat", "--repeats", "1", "--scenario", "accel-static",
        "--set", "workload.time_limit_s=0.01", "--out", "{tmp}"], [
        r"^\s+\[1/1\] run: ok \d+ samples/s", rf"^\s+run throughput: n=1 mean {NUM}"]),
    "run_scale": Tiny("run_scale.py", ["--out", "{tmp}"], [
        rf"^{name}\s+ok\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+0$"
        for name in ("scale-star8", "scale-dumbbell44")]),
    # payload mode alone (the recorded arm costs minutes), 2 workers, 2 steps
    "payload_agreement": Tiny("payload_agreement.py", [
        "--rates", "1000", "--seeds", "0", "--methods", "topk:0.01", "--arms", "payload",
        "--set", "topology.n_workers=2", "--set", "workload.steps=2", "--out", "{tmp}"], [
        rf"^\s+1000 Mbit/s topk:0.01 s0 payload: ok {NUM} samples/s, {NUM} B/sample, k {NUM}",
        rf"^\| 1000 \| topk:0.01 \| {NUM} \+- - \(n 1\) \[k {NUM}\]"],
        written={"agreement.csv": ["rate_mbit", "method", "payload_samples_s"]}),
    "run_overhead": Tiny("run_overhead.py", [
        "--runs", "1", "--no-8", "--train-s", "0.5", "--out", "{tmp}"], [
        rf"^netsense run smoke -m bogus\s+2\s+{NUM}\s+{NUM}$",
        rf"^\s+1 ok\s+fork\s+{NUM}\s+{NUM}\s+{NUM}", rf"^\s+1 ok\s+process\s+{NUM}",
        rf"^overhead 2 workers, first run\s+{NUM} s$"]),
}


@pytest.mark.emulation
@pytest.mark.slow  # ~1 min of emulations together: make test-all and .ci/run
@pytest.mark.parametrize("key", list(EMULATED))
def test_emulated_benchmark_runs_at_a_tiny_size(key: str, tmp_path: Path) -> None:
    proc = _start(EMULATED[key], tmp_path)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    _check(EMULATED[key], proc.returncode, out, err, tmp_path)


def _path_with(tmp: Path, tools: dict[str, str]) -> str:
    """A PATH of one folder holding just ``tools`` (name -> a real binary or a script)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, target in tools.items():
        if target.startswith("#!"):
            (bin_dir / name).write_text(target)
            (bin_dir / name).chmod(0o755)
        else:
            (bin_dir / name).symlink_to(target)
    return str(bin_dir)


@pytest.mark.parametrize("nvidia_smi, says", [
    (None, "no GPU here (nvidia-smi not found)"),
    ("#!/bin/sh\nexit 0\n", "no GPU here (nvidia-smi lists none)"),
])
def test_gpu_smoke_refuses_without_a_gpu(tmp_path: Path, nvidia_smi: str | None, says: str
                                         ) -> None:
    """gpu_smoke.sh needs a GPU (nothing in ``make test`` may): on a PATH that has no
    ``nvidia-smi``, or one that lists no GPU, it must stop before any run with exit 2 and
    say why, not fail halfway or pass silently."""
    tools = {"dirname": _which("dirname"), "grep": _which("grep")}
    if nvidia_smi:
        tools["nvidia-smi"] = nvidia_smi
    env = {**os.environ, "PATH": _path_with(tmp_path, tools)}
    proc = subprocess.run([_which("bash"), "benchmarks/gpu_smoke.sh", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, (proc.returncode, proc.stderr)
    assert not (tmp_path / "out").exists()


def _which(tool: str) -> str:
    found = shutil.which(tool)
    assert found, f"{tool} is not installed"
    return found
