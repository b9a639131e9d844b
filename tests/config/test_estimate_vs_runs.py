"""The ``--dry-run`` estimate against the real time of every committed run tree.

Why: a sweep is planned from its estimate (the paper-scale one: hundreds of hours on a
2-core host), so the estimate is a figure users act on; the committed runs (every tree
under ``results/runs`` whose scenario ships: paper-scale and paper-grid on ResNet-18,
recorded and payload mode; accel-crossover and accel-policy on the crossover MLP, which
stops at its target; payload-agreement) carry what each really took (``summary.json``'s
``wall_s`` and the ``auto`` host timing's seconds before it: ``host_timing_s``, ``probe_s``
in runs recorded before issue 51) and the scenario each ran, so the
estimate is checked on them, on the host they ran on (its core count from their host
timing), not
on whichever machine runs this test. A run's factor ``k`` is checked too: the estimate's
``k`` drives most of its time. ``ESTIMATE_RUNS=<a sweep's folder>`` checks another set
(a sweep just run on another host, say). Native (unpaced) scenarios are held to measured
runs kept under ``tests/config/data/native-runs`` (none is committed as an evaluation).

The accel-crossover and accel-policy runs came from code older than 46dc3f6 (commits
6252552, ded9c1b, 104f932, 42898967, 6361c91, 634d5a8): their host timing's time was not
recorded, so they are held to the estimate without it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from netsenseml import accelerator, methods
from testbed.config import estimate
from testbed.config.accelerator import Accelerator
from testbed.config.scenario import list_scenarios, validate_scenario
from testbed.orchestration.dilation import host_timing_s_in
from testbed.simulation import paced_validation

ROOT = Path(__file__).resolve().parents[2]
#: every committed run tree (those whose scenario ships are checked)
ESTIMATE_ENV = bool(os.environ.get("ESTIMATE_RUNS"))
RUNS = ([Path(os.environ["ESTIMATE_RUNS"])] if os.environ.get("ESTIMATE_RUNS") else
        sorted(p for p in (ROOT / "results" / "runs").iterdir() if p.is_dir()))
#: How far one run's estimate may be from its real time (either way): the estimate knows
#: the host only by constants measured on the build machine, and not the seed (two seeds of
#: the prototype's rule on accel-d70 took 46 and 63 s at the same k) ...
WITHIN = 1.6
#: ... or this many seconds (runs of 2-6 s: the per-run overhead alone moved 1.4-4.8 s).
WITHIN_S = 3.0
#: How far the estimate of a whole tree (what a user plans: one experiment of a sweep, the
#: tree's first two folders) may be from its runs' real time: issue 50's target.
TREE_WITHIN = 1.5
#: The same for ``k``, wider: ``auto``'s own factor moves between runs of one configuration
#: (its host timing runs on a shared host: top-k 0.01 at 300 Mbit/s and 1 Gbit/s took 160-230),
#: and the estimate knows one figure per codec level (top-k 0.001 and 0.01 alike).
K_WITHIN = 2.1


def committed_runs() -> list[Path]:
    shipped = {name for name, _ in list_scenarios()}
    return sorted(p.parent for runs in RUNS if runs.is_dir() for p in runs.rglob("summary.json")
                  if json.loads((p.parent / "config.json").read_text())["scenario"].get("name")
                  in shipped)


def _timed_and_paced(run: Path) -> bool:
    """Finished, its host timing timed (runs before that have part of their time unknown), and
    held to the accelerator: a run whose lateness added more than ``HOST_BOUND`` took the
    host's time (PowerSGD's codec is not paced), which no estimate of a paced run models."""
    summ = json.loads((run / "summary.json").read_text())
    late = (summ.get("overruns") or {}).get("late_share") or 0.0
    acc = json.loads((run / "config.json").read_text())["accelerator"]
    # a paced run from before the host timing's time was recorded: only if the timing ran
    # (k measured, not cached: older code recorded no probe_cached either)
    return (summ.get("status") == "ok" and late <= HOST_BOUND and not _dense_start(run)
            and (host_timing_s_in(acc) is not None or "host_real_s" in acc)
            and (acc.get("host_busy_pct") or 0.0) <= QUIET_PCT)


HOST_BOUND = 0.1


def _dense_start(run: Path) -> bool:
    """A payload run that sent PowerSGD's dense start (torch's two dense steps): payload
    mode's stand-in has been low-rank from the first step since
    (``methods.PAYLOAD_DENSE_STEPS``), a schedule the estimate no longer knows; at its k of 1 its two dense
    steps were most of its time."""
    cfg = json.loads((run / "config.json").read_text())
    if (cfg["accelerator"] or {}).get("host_rule") != "payload" or not methods.parse(
            cfg["method"]).dense_steps:
        return False
    rows = paced_validation.rank0_steps(run)
    return bool(rows) and rows[0]["bytes_sent"] == rows[0]["bytes_dense"]
#: The estimate plans for this host as the host timing finds it; a run whose factor ``auto`` chose
#: with other work saturating the host (``accelerator.host_busy_pct`` above this; the
#: sustained-filter A/B of
#: results/runs/policy-changes ran beside 4 test suites at 100 %: k 450-570 where a quiet
#: host picks ~130) took a factor no plan can know, as ``dilation.choose`` intends.
QUIET_PCT = 90.0


def _estimate_and_real(run: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, float, dict]:
    cfg = json.loads((run / "config.json").read_text())
    summ = json.loads((run / "summary.json").read_text())
    acc = cfg["accelerator"]
    cores = (acc.get("host_real_s") or {}).get("cores") or cfg["host"]["cpus"]  # payload: no host timing
    monkeypatch.setattr(estimate, "cores", lambda: int(cores))
    # the profile as the run had it (a shipped profile's figures may have moved since)
    ran = accelerator.Timing.from_json(acc["timing"])
    monkeypatch.setattr(Accelerator, "timing", lambda self, *_a: ran)
    if acc.get("host_rule") == "payload":
        # payload mode's k is a rule, not a host timing (auto and the estimate share it:
        # tests/orchestration/test_dilation.py), and the rule has moved since some runs: their
        # time is estimated at the k they ran with
        cfg["scenario"]["accelerator"]["dilation"] = acc["dilation"]
    scn = validate_scenario(cfg["scenario"], base_dir=ROOT, skip_kernel_checks=True,
                            label=str(run.name))
    est = estimate.estimate(scn, cfg["method"])
    timing = host_timing_s_in(acc)
    if timing is None:  # older code: the host timing's time unknown, held without it
        est = {**est, "seconds": est["seconds"] - est.get("host_timing_s", 0.0)}
    return est, summ["wall_s"] + (timing or 0.0), acc


@pytest.mark.skipif(not any(r.is_dir() for r in RUNS), reason="no committed paper-scale runs")
def test_the_dry_run_estimate_is_within_its_stated_factor_of_each_runs_real_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = []
    for run in committed_runs():
        if not _timed_and_paced(run):
            continue
        est, real, acc = _estimate_and_real(run, monkeypatch)
        rows.append((run.relative_to(ROOT / "results" / "runs") if run.is_relative_to(
            ROOT / "results" / "runs") else run, est["seconds"], real, est["k"], acc["dilation"]))
    assert rows, "no run folders under results/runs"
    assert ESTIMATE_ENV or {str(r[0]).split("/")[0] for r in rows} >= {
        "paper-scale", "paper-grid", "accel-crossover", "accel-policy"}
    for name, est_s, real_s, est_k, k in rows:
        print(f"{name}: estimated {est_s:.0f} s (k {est_k:g}), took {real_s:.0f} s (k {k:g})")
    off = [(str(n), round(e / r, 2)) for n, e, r, _, _ in rows
           if not 1 / WITHIN <= e / r <= WITHIN and abs(e - r) > WITHIN_S]
    assert not off, f"estimate / real outside [1/{WITHIN}, {WITHIN}]: {off}"
    trees: dict[str, list[float]] = {}
    for name, est_s, real_s, _, _ in rows:
        tree = trees.setdefault("/".join(Path(name).parts[:2]), [0.0, 0.0])
        tree[0] += est_s
        tree[1] += real_s
    for tree, (est_s, real_s) in sorted(trees.items()):
        print(f"{tree}: estimated {est_s / 60:.1f} min, took {real_s / 60:.1f} min")
    tree_off = {t: round(e / r, 2) for t, (e, r) in trees.items()
                if not 1 / TREE_WITHIN <= e / r <= TREE_WITHIN}
    assert not tree_off, f"a tree's estimate / real outside 1.5x: {tree_off}"
    k_off = [(str(n), ek, k) for n, _, _, ek, k in rows
             if not 1 / K_WITHIN <= ek / k <= K_WITHIN]
    assert not k_off, f"estimated k / the run's k outside [1/{K_WITHIN}, {K_WITHIN}]: {k_off}"
    total_est, total_real = sum(r[1] for r in rows), sum(r[2] for r in rows)
    assert 1 / 1.25 <= total_est / total_real <= 1.25, (total_est, total_real)


# ------------------------------------------------------------------------ native runs
#: Native (unpaced) runs of shipped scenarios and a sweep, measured for this test: no native
#: tree is committed under results/runs (the evaluation moved onto the emulated accelerator),
#: so their config.json and summary.json are kept here (``README.md`` beside them says how
#: they were made). One run each of smoke, xover-static, scale-star8, eval-onoff, xover-d70
#: (stops at its target under cross traffic), the tiny sweep and examples/my_job.yaml (an
#: own job: its estimate is a bound).
NATIVE = ROOT / "tests" / "config" / "data" / "native-runs"


def _native_runs() -> list[tuple[Path, dict, dict]]:
    out = []
    for s in sorted(NATIVE.rglob("summary.json")):
        cfg = json.loads((s.parent / "config.json").read_text())
        assert (cfg.get("accelerator") or {}).get("mode", "native") == "native", s.parent
        out.append((s.parent, cfg, json.loads(s.read_text())))
    return out


def test_native_estimates_are_within_their_factor_of_the_measured_runs() -> None:
    """Every native run's estimate within ``WITHIN`` (or ``WITHIN_S``) of its real time and
    every scenario's (sweep's) total within ``TREE_WITHIN``; an own job's estimate is its
    deadline, said as a bound, and the job took less. Before: xover-d70's NetSenseML run
    (stops at its target, 8 cross streams 70 % of the time) was estimated at 8.2 s and took
    19.4 (its steps at top-k's share, no queue)."""
    rows = _native_runs()
    assert {p.relative_to(NATIVE).parts[0] for p, _, _ in rows} >= {
        "smoke", "xover-static", "scale-star8", "eval-onoff", "xover-d70", "tiny", "my-job"}
    trees: dict[str, list[float]] = {}
    off, bounds = [], []
    for run, cfg, summ in rows:
        scn = validate_scenario(cfg["scenario"], base_dir=ROOT, skip_kernel_checks=True,
                                label=run.name)
        est, real = estimate.estimate(scn, cfg["method"]), summ["wall_s"]
        name = str(run.relative_to(NATIVE))
        print(f"{name}: estimated {est['seconds']:.1f} s"
              f"{' (bound)' if est.get('bound') else ''}, took {real:.1f} s")
        if est.get("bound"):
            bounds.append((name, est["seconds"], real))
            continue
        if not 1 / WITHIN <= est["seconds"] / real <= WITHIN and \
                abs(est["seconds"] - real) > WITHIN_S:
            off.append((name, round(est["seconds"] / real, 2)))
        tree = trees.setdefault(run.relative_to(NATIVE).parts[0], [0.0, 0.0])
        tree[0] += est["seconds"]
        tree[1] += real
    assert not off, f"estimate / real outside [1/{WITHIN}, {WITHIN}]: {off}"
    tree_off = {t: round(e / r, 2) for t, (e, r) in trees.items()
                if not 1 / TREE_WITHIN <= e / r <= TREE_WITHIN}
    assert not tree_off, f"a scenario's estimate / real outside 1.5x: {tree_off}"
    assert bounds and all(real < est for _, est, real in bounds), bounds


def test_every_shipped_native_scenario_is_estimated_on_a_basis_the_runs_checked() -> None:
    """What the native estimate rests on, per shipped native scenario: its time limit
    (smoke, xover-static, eval-onoff checked), steps x ``FALLBACK_STEP_S`` (scale-star8),
    the steps to its target (xover-d70, the tiny sweep's scenario has a limit), or an own
    job's deadline (a bound). A native scenario resting on anything else would be
    unchecked."""
    from testbed.config.scenario import load_scenario

    for name, _ in list_scenarios():
        scn = load_scenario(name, skip_kernel_checks=True)
        if scn.accelerator is not None:
            continue
        wl = scn.workload
        stops = bool((wl.args or {}).get("stop-at-target") or (wl.args or {}).get(
            "stop_at_target"))
        assert wl.command or wl.time_limit_s or wl.steps, name
        for m in scn.methods:
            est = estimate.estimate(scn, m)
            if wl.command:
                assert est.get("bound"), name
            elif stops and estimate._native_to_target(scn, methods.as_spec(m)) is not None:
                assert est["virtual_s"] <= (wl.time_limit_s or math.inf), (name, m)
            else:
                want = wl.time_limit_s or wl.steps * estimate.FALLBACK_STEP_S
                assert est["virtual_s"] == pytest.approx(want), (name, m)
