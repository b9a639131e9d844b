"""The adaptive policies decide as they did: three committed run traces, replayed, against a
golden file of the decisions the code made before the step loop was written once.

Why: the step loop (observation, one-step delay, RTT-probe schedule, the monitor's restart)
moved out of the hook, the replay and the simulation into ``netsenseml.loop``, and the
policy's parts were cut apart; none of that may change a decision. The traces are the
on/off runs in ``data/eval-onoff-legacy`` (s0, s1, s2). For each:

* ``replay``: a link fitted from that run alone (``replay.fit_runs``), an idle-congested-idle
  schedule replayed with the run's noise through NetSenseML and through the prototype's rule
  (the whole loop: monitor, RTT probes, the delay);
* ``trace``: the run's own steps (rank means) fed as observations to a NetSenseML policy
  calibrated on the fitted idle link (the policy alone, on measured numbers).

``NETSENSE_WRITE_GOLDEN=1`` rewrites the golden file (only ever from the code to compare
against, never to make a failing test pass).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from netsenseml import replay
from netsenseml.paper_rule import PaperRule
from netsenseml.policy import Decision, NetSensePolicy, Observation

DATA = Path(__file__).parent / "data"
RUNS = [DATA / "eval-onoff-legacy" / s for s in ("s0", "s1", "s2")]
GOLDEN = DATA / "decisions.json"
SCHEDULE = [("idle", 40), ("congested", 40), ("idle", 40)]


def _d(d: Decision) -> list:
    return [d.level, repr(d.ratio), int(d.probe)]


def _trace(run: Path, model: replay.ReplayModel) -> list[list]:
    """The run's steps as mean-over-ranks observations through a calibrated policy."""
    steps: dict[int, list[dict[str, str]]] = {}
    with open(run / "steps.csv") as fh:
        for row in csv.DictReader(fh):
            steps.setdefault(int(row["step"]), []).append(row)
    policy = NetSensePolicy()
    out = [_d(policy.calibrate(replay.calibration(model.job, model.idle)))]

    def mean(rows: list[dict[str, str]], key: str) -> float:
        return sum(float(r.get(key) or 0.0) for r in rows) / len(rows)

    for _, rows in sorted(steps.items()):
        r0 = rows[0]
        level = r0["level"]
        d = Decision(level, float(r0["ratio"]) if level == "topk" else 1.0, r0.get("probe") == "1")
        comm, compute = mean(rows, "comm_s"), mean(rows, "compute_s")
        rate = min(float(r.get("est_rate_Bps") or 0.0) for r in rows)
        obs = Observation(decision=d, comm_s=comm, exposed_s=comm, compute_s=compute,
                          codec_s=mean(rows, "codec_s"), bytes_sent=mean(rows, "bytes_sent"),
                          collectives=mean(rows, "collectives"), rate_Bps=rate,
                          min_rtt_s=mean(rows, "est_min_rtt_s"))
        out.append(_d(policy.observe(obs)))
    return out


def _runs(seq: list[list]) -> list[list]:
    """Run-length encoded: ``[level, repr(ratio), probe, count]``."""
    out: list[list] = []
    for d in seq:
        if out and out[-1][:3] == d:
            out[-1][3] += 1
        else:
            out.append([*d, 1])
    return out


def decisions() -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for run in RUNS:
        model = replay.fit_runs([run])
        links = model.links(SCHEDULE)
        got = {}
        for name, make in (("netsenseml", NetSensePolicy), ("paper", PaperRule)):
            steps = replay.replay(make(), model.job, links, seed=1, **model.noise)
            got[f"replay-{name}"] = _runs([_d(s.decision) for s in steps])
        got["trace-netsenseml"] = _runs(_trace(run, model))
        out[run.name] = got
    return out


def test_decisions_match_the_golden_file() -> None:
    got = decisions()
    if os.environ.get("NETSENSE_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=0, separators=(",", ":")) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(got) == set(want)
    for run, series in want.items():
        for name, seq in series.items():
            assert got[run][name] == seq, f"{run} {name}: decisions changed"
