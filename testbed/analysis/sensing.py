"""Sensing validation: the network monitor's estimates against the bottleneck's truth.

Inputs, all from one run folder: ``steps.csv`` (the hooks' ``est_*`` columns, the monitor's
estimate at each step: ``netsenseml.monitor``), ``bottleneck.csv`` (the qdisc truth at
10 Hz: ``testbed.emulation.bottleneck``) and ``config.json``/``summary.json`` (world size,
cross-traffic endpoints).

What is compared, and why so:

* **The bottleneck end.** The watched link end whose egress the training traffic shares
  with the cross traffic: the end toward a worker that cross traffic targets (star: the
  switch's end of ``w1``); else the dumbbell's busier ``bottleneck`` direction; else the
  end toward a link a ``set_rate`` event changes; else the busiest end toward a worker.
* **Available rate** = configured rate - the cross traffic's delivered rate: what its
  iperf3 servers received (their interval reports, ``network.cross_traffic``), or, in runs
  without them, what its sources sent (the egress of each cross source's own access link;
  an upper bound: it includes what the bottleneck dropped); floored at 0, smoothed over
  ``SMOOTH_S`` (a 10 Hz rate of a bursty flow swings).
* **The monitor's rate on the link.** The monitor measures one rank's payload per second
  of its collectives' service time, in fp32-allreduce-equivalent bytes (an all-gather's
  input counts W/2 times: ``netsenseml.comm``); a ring all-reduce puts ``2(W-1)/W`` of
  them on each link, so the estimate is multiplied by that, and both sides are link
  Mbit/s. Steps without an estimate (no rate sample since the policy's last regime change)
  are left out of the errors and counted (``coverage``).
* **Fair share** = the max-min share of one more TCP flow beside the cross streams running
  at that time (``events.csv``'s applied starts and stops, each stream capped at its
  group's ``bitrate_mbit``): what a job whose collectives kept one flow busy across the
  bottleneck would get. The available rate is what the job could get with the link to
  itself; under congestion the two differ by the stream count (8 streams on 500 Mbit/s:
  available 0-60, fair 56), and the summary gives the error against both
  (``rate_medae_rel_<phase>`` and ``rate_medae_rel_<phase>_fair``).
* **Phases.** A step is *congested* while cross streams run (the applied ``cross_start``
  / ``cross_stop`` of ``events.csv``; without it, where the cross traffic delivers more
  than 5 % of the configured rate), *idle* otherwise; the summary gives the median
  absolute error relative to the available rate per phase (``rate_medae_rel_idle`` /
  ``_congested``), to the fair share (``..._fair``), and to the truth the policy needs
  (:data:`NEEDED`; ``..._needed``, with its signed median ``rate_bias_rel_<phase>_needed``).
* **At the steps' own times.** The configured rate is a step function (each sampler
  reading and each applied ``set_rate`` holds until the next: :func:`configured_at`), the
  cross traffic its servers' reports read at the step's time; neither is interpolated
  between the sampler's readings, which in a dilated run may be a real second apart.
* **Min RTT.** The monitor's min RTT (from its tiny collectives) against the kernel's own
  ``tcpi_min_rtt`` of the same ranks' sockets (``tcp_min_rtt_s`` in steps.csv, the
  hooks' second sensor): the path's base RTT as TCP sees it, without gloo's software
  time; ``min_rtt_ratio`` is their ratio (medians over the run). The kernel's clock is not
  dilated: its RTT is divided by ``k`` and its delivery rate multiplied by ``k`` here.
* **The training traffic's share** = what the bottleneck end delivered - the cross traffic.
* **Level changes per segment**: rank 0's level (probe steps left out: a one-step probe
  and its return are not a change) over every step, cut into segments at the applied
  ``cross_start`` / ``cross_stop`` events of ``events.csv`` (idle and congested
  segments, I C I ... for an on/off scenario; a ramp's levels are segments of their own);
  a change is counted inside a segment only: the first step of a segment is compared with
  none (as ``netsenseml.replay.segment_changes`` counts the replays), so the reaction to
  the edge itself is not a change, a second decision later in the segment is.
  ``changes`` counts level labels (fp16 -> top-k), ``ladder_changes`` rungs of the ladder
  (a top-k ratio move too).
* **Queueing delay**: truth = backlog bytes / configured rate; the monitor's
  ``est_queue_delay_s`` is its latest sample's delay beyond the ideal at its extremes.

The error is ``estimate - available`` at every rank-0 step that has an estimate (truth
interpolated at the step's time); the table is ``sensing.csv`` and the figure
``sensing.png``; ``summary`` holds the mean absolute error of the rate estimate (Mbit/s
and relative to the mean available rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from netsenseml.dilation import NONE, Dilation
from testbed.analysis import loading
from testbed.common import files

#: The truth's smoothing window, real seconds: in a time-dilated run (k) the flows are k
#: times slower and its records k times denser in virtual time, so the window is SMOOTH_S / k
#: of virtual time (a fixed virtual 0.5 s would span whole phases of a dilated timeline).
SMOOTH_S = 0.5
COLUMNS = ["t", "step", "level", "est_rate_mbit", "est_link_mbit", "configured_mbit",
           "cross_mbit", "available_mbit", "fair_mbit", "training_mbit", "error_mbit", "est_queue_ms", "truth_queue_ms",
           "backlog_bytes", "drops_per_s", "est_min_rtt_ms", "est_bdp_kB", "tcp_min_rtt_ms",
           "tcp_rate_mbit", "phase"]


#: The truth the policy needs per phase. Idle: the available rate (nothing else is on the
#: path; the job gets what the link leaves). Congested: the fair share of one more flow
#: beside the cross streams -- the policy picks a level for the steps to come, and a level
#: that sends every step keeps its flow busy, so over the phase TCP gives it its share;
#: the available rate (configured - cross delivered) is what the cross flows *left*,
#: which under drop-tail is whatever their windows did not fill (0-60 Mbit/s of 500 on
#: eval-onoff), not what the job would get by sending.
NEEDED = {"idle": "available", "congested": "fair"}


class SensingError(ValueError):
    """The run folder lacks what the validation needs; the message says what."""


def _why_no_rate(steps: pd.DataFrame) -> str:
    """Why a run has no rate estimate, where steps.csv says: the monitor takes rate samples
    only from payloads long enough to hold a rate (``netsenseml.monitor``), so a run whose
    collectives were all short (a fixed top-k on a fast link) never gives one."""
    if "est_min_rtt_s" not in steps.columns or "level" not in steps.columns:
        return " (steps.csv has no est_* columns: not a NetSenseML-monitored run?)"
    levels = sorted(steps.loc[steps["rank"] == 0, "level"].dropna().astype(str).unique())
    return (f" (rank 0's levels: {', '.join(levels)}; the monitor discards payloads below "
            "its min_rate_bytes or 4 BDP, and samples whose transfer time is under one min "
            "RTT; its min RTT is in steps.csv, est_min_rtt_s)")


def _read(run_dir: Path, estimate: bool = True) -> tuple[loading.RunData, pd.DataFrame, pd.DataFrame]:
    """(the run folder as the run reader loaded it, its steps, bottleneck.csv); ``estimate``:
    refuse a run without the monitor's rate estimate."""
    for name in ("steps.csv", "bottleneck.csv", "config.json"):
        if not (run_dir / name).exists():
            raise SensingError(f"{run_dir}: no {name} (a run of this testbed version "
                               f"writes it)")
    try:
        folder = loading.open_folder(run_dir)  # whatever its status: a failed run's too
        steps = folder.steps
        truth = folder.csv("bottleneck.csv")
    except loading.Damaged as exc:
        raise SensingError(f"{run_dir}: {exc}") from None
    if estimate and ("est_rate_mbit" not in steps.columns or steps["est_rate_mbit"].isna().all()):
        raise SensingError(f"{run_dir}: the monitor gave no rate estimate in this run" + _why_no_rate(steps))
    if truth.empty:
        raise SensingError(f"{run_dir}: bottleneck.csv has no samples")
    return folder, steps, truth


def _cross_pairs(config: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for ev in config.get("scenario", {}).get("timeline", []):
        if ev.get("src") and ev.get("dst"):
            pairs.append((ev["src"], ev["dst"]))
    return pairs


def bottleneck_end(truth: pd.DataFrame, config: dict[str, Any]) -> tuple[str, str]:
    """(link, toward) of the end the comparison uses (module doc)."""
    ends = truth.groupby(["link", "toward"])["sent_bytes"].agg(lambda s: s.max() - s.min())
    workers = {t for t in truth["toward"].unique() if str(t).startswith("w")}
    for _src, dst in _cross_pairs(config):
        # a cross flow *to a worker* shares that worker's access link with the training;
        # one to a cross host (a dumbbell's x1) shares only the bottleneck, below
        if dst in workers and (dst, dst) in ends.index:
            return dst, dst
    if "bottleneck" in ends.index.get_level_values(0):
        sub = ends.loc["bottleneck"]
        return "bottleneck", str(sub.idxmax())
    for ev in config.get("scenario", {}).get("timeline", []):
        link = ev.get("link")
        if ev.get("kind") == "set_rate" and (link, link) in ends.index:
            return link, link
    toward_workers = ends[[t in workers for _, t in ends.index]]
    if toward_workers.empty:
        raise SensingError("bottleneck.csv watches no link end toward a worker")
    link, toward = toward_workers.idxmax()
    return str(link), str(toward)


def _series(rows: pd.DataFrame, column: str) -> pd.Series:
    return rows.set_index("t")[column].astype(float).sort_index()


def _smooth(s: pd.Series, period: float, dilation: Dilation | float = NONE) -> pd.Series:
    window = max(1, int(round(Dilation.of(dilation).virtual_s(SMOOTH_S) / period)))
    return s.rolling(window, min_periods=1, center=True).mean()


def _at(s: pd.Series, t: np.ndarray) -> np.ndarray:
    return np.interp(t, s.index.to_numpy(float), s.to_numpy(float)) if len(s) else np.full(
        len(t), np.nan)


def _received(run: loading.RunData | Path, times: np.ndarray, index: pd.Index
              ) -> pd.Series | None:
    """The cross traffic's received rate at ``times``: the sum of every iperf3 server's
    interval reports (summary.json ``network.cross_traffic``), 0 outside them."""
    summary = loading.folder_of(run).summary
    flows = (summary.get("network") or {}).get("cross_traffic") or []
    if not flows or not all("received_intervals" in f for f in flows):
        return None
    total = np.zeros(len(times))
    for f in flows:
        t0 = f.get("started_t")
        if t0 is None:
            continue
        for start, end, mbit in f["received_intervals"]:
            total += np.where((times >= t0 + start) & (times < t0 + end), mbit, 0.0)
    return pd.Series(total, index=index)


def _water_fill(capacity: float, caps: list[float | None]) -> list[float]:
    """Max-min fair shares of ``capacity`` among flows with rate caps (None: uncapped)."""
    share = [0.0] * len(caps)
    left, open_ = capacity, list(range(len(caps)))
    while open_ and left > 1e-12:
        each = left / len(open_)
        capped = [i for i in open_ if caps[i] is not None and caps[i] - share[i] <= each]
        if not capped:
            for i in open_:
                share[i] += each
            break
        for i in capped:
            left -= caps[i] - share[i]  # type: ignore[operator]
            share[i] = caps[i]  # type: ignore[assignment]
        open_ = [i for i in open_ if i not in capped]
    return share


def _events(run: loading.RunData | Path) -> pd.DataFrame | None:
    """The run's events.csv as the run reader read it; None when it has none (or a damaged
    one)."""
    try:
        return loading.folder_of(run).csv("events.csv")
    except loading.Damaged:
        return None


def _cross_edges(run: loading.RunData | Path) -> list[tuple[float, dict[str, int]]] | None:
    """``(t, {group: streams running})`` after each applied cross_start / cross_stop of
    events.csv, in time order; None without events.csv."""
    ev = _events(run)
    if ev is None:
        return None
    ev = ev[ev["kind"].isin(["cross_start", "cross_stop"])]
    at = pd.to_numeric(ev["t_applied"], errors="coerce").fillna(
        pd.to_numeric(ev["t_scheduled"], errors="coerce"))
    ev = ev.assign(t=at).dropna(subset=["t"]).sort_values("t", kind="stable")
    edges: list[tuple[float, dict[str, int]]] = []
    running: dict[str, int] = {}
    for row in ev.itertuples():
        group = str(row.target)
        if row.kind == "cross_start":
            running[group] = running.get(group, 0) + int(pd.to_numeric(row.value, errors="coerce") or 1)
        else:
            running.pop(group, None)
        edges.append((float(row.t), dict(running)))
    return edges


def _running_at(edges: list[tuple[float, dict[str, int]]], t: float) -> dict[str, int]:
    starts = [e[0] for e in edges]
    k = int(np.searchsorted(np.asarray(starts), t, side="right"))
    return edges[k - 1][1] if k else {}


def fair_share(run: loading.RunData | Path, config: dict[str, Any], times: np.ndarray,
               configured: np.ndarray) -> np.ndarray:
    """The job's max-min share (one flow) beside the cross streams running at ``times``
    (module doc); the configured rate where events.csv is missing."""
    edges = _cross_edges(run)
    if edges is None:
        return np.asarray(configured, float)
    caps = {ev.get("id"): ev.get("bitrate_mbit")
            for ev in config.get("scenario", {}).get("timeline", []) if ev.get("id")}
    out = np.empty(len(times))
    for i, (t, c) in enumerate(zip(times, configured, strict=True)):
        flows: list[float | None] = [None]  # the job
        for group, n in _running_at(edges, t).items():
            flows += [caps.get(group)] * n
        out[i] = _water_fill(float(c), flows)[0]
    return out


def cross_running(run: loading.RunData | Path, times: np.ndarray) -> np.ndarray | None:
    """Cross streams running at ``times`` by events.csv's applied edges (None without it, or
    where the run had no cross traffic events)."""
    edges = _cross_edges(run)
    if not edges:
        return None
    return np.asarray([sum(_running_at(edges, t).values()) for t in times], int)


def configured_at(run: loading.RunData | Path, link: str, samples: pd.Series,
                  times: np.ndarray) -> np.ndarray:
    """The configured rate of ``link`` at ``times``, as a step function: each sample of
    bottleneck.csv and each applied ``set_rate`` of events.csv on that link holds until the
    next. Not interpolated: the committed accel-d70 runs' readings are 7 ms of virtual time
    apart (about a real second at k = 140), and a line drawn between 40000 before a drop and 8000 after it put the
    d70 runs' "congested" truth at 11-35 Gbit/s for the 10 steps before the drop, where the
    link was still at 40000 and the job measured 30-36 Gbit/s."""
    points = [(float(t), float(v)) for t, v in samples.items()]
    ev = _events(run)
    if ev is not None:
        ev = ev[(ev["kind"] == "set_rate") & (ev["target"].astype(str) == link)]
        at = pd.to_numeric(ev["t_applied"], errors="coerce").fillna(
            pd.to_numeric(ev["t_scheduled"], errors="coerce"))
        for t, v in zip(at, pd.to_numeric(ev["value"], errors="coerce"), strict=True):
            if np.isfinite(t) and np.isfinite(v):
                points.append((float(t), float(v)))
    if not points:
        return np.full(len(times), np.nan)
    # a sample at the same time as an event follows it (the sampler read the new rate)
    points.sort(key=lambda p: p[0])
    ts = np.asarray([p[0] for p in points])
    vs = np.asarray([p[1] for p in points])
    k = np.searchsorted(ts, np.asarray(times, float), side="right") - 1
    return vs[np.clip(k, 0, None)]


def segment_changes(run: loading.RunData | Path, steps: pd.DataFrame) -> list[dict[str, Any]]:
    """Level changes per cross-traffic segment of rank 0 (module doc); [] without events.csv."""
    events = _events(run)
    r0 = steps[steps["rank"] == 0].sort_values("step")
    if events is None or r0.empty or "level" not in r0:
        return []
    if "probe" in r0:
        r0 = r0[pd.to_numeric(r0["probe"], errors="coerce").fillna(0) == 0]
    events = events[events["kind"].isin(["cross_start", "cross_stop"])]
    applied = pd.to_numeric(events["t_applied"], errors="coerce").fillna(
        pd.to_numeric(events["t_scheduled"], errors="coerce"))
    events = events.assign(t=applied).dropna(subset=["t"]).sort_values("t", kind="stable")
    edges = events["t"].astype(float).tolist()
    # cross flows running after each edge
    active = events["kind"].map({"cross_start": 1, "cross_stop": -1}).cumsum().clip(lower=0).tolist()
    t = r0["t"].to_numpy(float)
    seg = np.searchsorted(np.asarray(edges), t, side="right")
    levels = r0["level"].astype(str).to_numpy()
    # the ladder's rung: the level and, for top-k, its kept fraction
    ratios = (pd.to_numeric(r0["ratio"], errors="coerce").fillna(1.0).round(6).astype(str).to_numpy()
              if "ratio" in r0 else np.full(len(levels), ""))
    rungs = np.char.add(np.char.add(levels.astype(str), ":"), ratios.astype(str))
    out = []
    for i in range(len(edges) + 1):
        mask = seg == i
        if not mask.any():
            continue
        lv = levels[mask]
        out.append({
            "phase": "congested" if i > 0 and active[i - 1] > 0 else "idle",
            "t0": round(edges[i - 1], 3) if i > 0 else round(float(t[0]), 3),
            "t1": round(edges[i], 3) if i < len(edges) else round(float(t[-1]), 3),
            "steps": int(mask.sum()),
            "changes": int((lv[1:] != lv[:-1]).sum()),
            "ladder_changes": int((rungs[mask][1:] != rungs[mask][:-1]).sum()),
        })
    return out


@dataclass
class _Truth:
    """The bottleneck's truth on the time grid of its samples (``bottleneck.csv``)."""

    link: str
    toward: str
    end: pd.DataFrame  # the bottleneck end's rows
    times: np.ndarray
    configured: pd.Series
    cross: pd.Series  # the cross traffic's rate, smoothed over the sample period
    available: pd.Series
    queue_ms: pd.Series
    training: pd.Series  # what the training flows got: delivered less the cross traffic
    received: bool = False  # the cross rate is its iperf3 servers' reports (a step function)


def _truth(run: loading.RunData, truth: pd.DataFrame, config: dict[str, Any]) -> _Truth:
    link, toward = bottleneck_end(truth, config)
    end = truth[(truth["link"] == link) & (truth["toward"] == toward)]
    times = end["t"].to_numpy(float)
    period = float(np.median(np.diff(times))) if len(times) > 1 else 0.1
    configured = _series(end, "configured_mbit")
    cross = _received(run, times, configured.index)
    received = cross is not None
    if cross is None:  # no receiver reports: what the sources sent (an upper bound)
        cross = pd.Series(0.0, index=configured.index)
        for src, _dst in _cross_pairs(config):
            rows = truth[(truth["link"] == src) & (truth["toward"] != src)]
            if not rows.empty:
                cross = cross.add(pd.Series(_at(_series(rows, "delivered_mbit"), times),
                                            index=configured.index), fill_value=0.0)
    d = Dilation(loading.dilation_of(config))
    cross = _smooth(cross, period, d)
    return _Truth(
        link, toward, end, times, configured, cross,
        available=(configured - cross).clip(lower=0.0),
        queue_ms=_series(end, "backlog_bytes") * 8 / (configured * 1e6) * 1e3,
        training=(_smooth(_series(end, "delivered_mbit"), period, d) - cross).clip(lower=0.0),
        received=received)


def link_factor(world: int) -> float:
    """Link bytes per byte of the monitor's rate: a ring all-reduce puts ``2(W-1)/W`` of
    one rank's payload on each link (module doc)."""
    return 2 * (world - 1) / world if world > 1 else 1.0


def _rates_at(run: loading.RunData, tr: _Truth, config: dict[str, Any], t: np.ndarray,
              index: pd.Index) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(configured, cross, available, fair share) Mbit/s at the times ``t``."""
    configured = configured_at(run, tr.link, tr.configured, t)
    # the servers' reports are a step function in time: read at the steps' own times, not
    # interpolated between the sampler's (a line from 0 to 7000 drawn across the 7 ms
    # before a phase began made the truth congested before the cross traffic was)
    cross = (_received(run, t, index).to_numpy(float) if tr.received
             else _at(tr.cross, t))
    return (configured, cross, np.clip(configured - cross, 0.0, None),
            fair_share(run, config, t, configured))


def _phases(run: loading.RunData, t: np.ndarray, cross: np.ndarray,
            configured: np.ndarray) -> np.ndarray:
    """"congested" or "idle" at the times ``t`` (module doc, "Phases")."""
    running = cross_running(run, t)
    if running is not None:  # the applied edges: congested while cross streams run
        return np.where(running > 0, "congested", "idle")
    return np.where(cross > 0.05 * configured, "congested", "idle")


def steps_with_truth(run_dir: Path) -> pd.DataFrame:
    """Every rank-0 step of a run (steps.csv's columns, by step) with the truths at its
    time, whether or not the monitor had an estimate then: ``configured_mbit``,
    ``cross_mbit``, ``available_mbit``, ``fair_mbit``, ``phase``, ``needed_mbit`` (the
    truth the policy needs: :data:`NEEDED`) and ``link_factor`` (a monitor rate x it is
    link Mbit/s). Any method's run (a fixed level's too: what it got beside the cross
    traffic); for estimators replayed offline from what the job observed
    (``benchmarks/fair_share_estimators.py``)."""
    folder, steps, truth = _read(Path(run_dir), estimate=False)
    config = folder.config
    tr = _truth(folder, truth, config)
    r0 = steps[steps["rank"] == 0].sort_values("step").reset_index(drop=True)
    t = r0["t"].to_numpy(float)
    configured, cross, available, fair = _rates_at(folder, tr, config, t, r0.index)
    phase = _phases(folder, t, cross, configured)
    truths = {"available": available, "fair": fair}
    return r0.assign(
        configured_mbit=configured, cross_mbit=cross, available_mbit=available,
        fair_mbit=fair, phase=phase,
        needed_mbit=np.where(phase == "congested", truths[NEEDED["congested"]],
                             truths[NEEDED["idle"]]),
        link_factor=link_factor(int(config.get("world_size") or 1)))


def _step_table(run: loading.RunData, steps: pd.DataFrame, tr: _Truth, config: dict[str, Any],
                world: int) -> pd.DataFrame:
    """Rank 0's steps with a monitor estimate beside the truth at their times."""
    r0 = steps[(steps["rank"] == 0) & steps["est_rate_mbit"].notna()].copy()
    if r0.empty:
        raise SensingError(f"{run.path}: rank 0 has no step with a monitor estimate"
                           + _why_no_rate(steps))
    t = r0["t"].to_numpy(float)
    levels = r0["level"].astype(str) if "level" in r0 else pd.Series("none", index=r0.index)
    factor = np.full(len(levels), link_factor(world))
    est_mbit = r0["est_rate_mbit"].to_numpy(float)
    d = Dilation(loading.dilation_of(config))
    configured, cross, available, fair = _rates_at(run, tr, config, t, r0.index)
    table = pd.DataFrame({
        "t": t, "step": r0["step"].to_numpy(), "level": levels.to_numpy(),
        "est_rate_mbit": est_mbit.round(3), "est_link_mbit": (est_mbit * factor).round(3),
        "configured_mbit": configured, "cross_mbit": cross.round(3),
        "available_mbit": available.round(3), "fair_mbit": fair.round(3),
        "training_mbit": _at(tr.training, t).round(3),
        "est_queue_ms": (r0["est_queue_delay_s"].to_numpy(float) * 1e3).round(3),
        "truth_queue_ms": _at(tr.queue_ms, t).round(3),
        "backlog_bytes": _at(_series(tr.end, "backlog_bytes"), t).round(0),
        "drops_per_s": _at(_series(tr.end, "drops_per_s"), t).round(2),
        "est_min_rtt_ms": (r0["est_min_rtt_s"].to_numpy(float) * 1e3).round(3),
        "est_bdp_kB": (r0["est_bdp_bytes"].to_numpy(float) / 1e3).round(3),
    })
    # the kernel's clock is not dilated: its RTT in virtual time is 1/k of what it reports,
    # its rate k times (the monitor's are in virtual units already)
    table["tcp_min_rtt_ms"] = (d.virtual_s(r0["tcp_min_rtt_s"].to_numpy(float) * 1e3).round(6)
                               if "tcp_min_rtt_s" in r0 else np.nan)
    table["tcp_rate_mbit"] = (d.virtual_mbit(r0["tcp_delivery_rate_mbit"].to_numpy(float)).round(3)
                              if "tcp_delivery_rate_mbit" in r0 else np.nan)
    table["phase"] = _phases(run, t, table["cross_mbit"].to_numpy(float), configured)
    table["error_mbit"] = (table["est_link_mbit"] - table["available_mbit"]).round(3)
    return table[COLUMNS]


def _phase_errors(table: pd.DataFrame) -> dict[str, Any]:
    """Per phase (idle, congested): the rate error's median relative size and bias, against
    the available rate and against the fair share, and the steps compared."""
    phases: dict[str, Any] = {}
    for ph in ("idle", "congested"):
        sub = table[table["phase"] == ph]
        ok = sub[sub["available_mbit"] > 0]
        rel = (ok["error_mbit"].abs() / ok["available_mbit"]) if len(ok) else pd.Series(dtype=float)
        phases[f"rate_medae_rel_{ph}"] = round(float(rel.median()), 4) if len(rel) else None
        phases[f"rate_bias_rel_{ph}"] = (round(float((ok["error_mbit"] / ok["available_mbit"]).median()), 4)
                                         if len(ok) else None)
        fair = sub[sub["fair_mbit"] > 0]
        rel_fair = (fair["est_link_mbit"] - fair["fair_mbit"]).abs() / fair["fair_mbit"]
        phases[f"rate_medae_rel_{ph}_fair"] = round(float(rel_fair.median()), 4) if len(fair) else None
        # the truth the policy needs (NEEDED): its error and bias
        col = "available_mbit" if NEEDED[ph] == "available" else "fair_mbit"
        need = sub[sub[col] > 0]
        err = (need["est_link_mbit"] - need[col]) / need[col]
        phases[f"rate_medae_rel_{ph}_needed"] = round(float(err.abs().median()), 4) if len(need) else None
        phases[f"rate_bias_rel_{ph}_needed"] = round(float(err.median()), 4) if len(need) else None
        phases[f"steps_{ph}"] = int(len(sub))
    phases["needed"] = dict(NEEDED)
    return phases


def validate(run_dir: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The per-step table and the summary (MAE) of one run folder."""
    run_dir = Path(run_dir)
    folder, steps, truth = _read(run_dir)
    config = folder.config
    world = int(config.get("world_size") or 1)
    tr = _truth(folder, truth, config)
    table = _step_table(folder, steps, tr, config, world)
    all_r0 = steps[steps["rank"] == 0]
    mae = float(table["error_mbit"].abs().mean())
    mean_avail = float(table["available_mbit"].mean())
    rtt = float(table["est_min_rtt_ms"].median())
    tcp_rtt = float(pd.to_numeric(table["tcp_min_rtt_ms"], errors="coerce").median())
    summary = {
        "run_dir": str(run_dir), "bottleneck": {"link": tr.link, "toward": tr.toward},
        # the run's dilation factor: the congested phases' competition depends on it
        # (docs/results-log.md, 2026-12-07: int8 got 1.3-4.0x its fair share at k 140-450)
        "dilation": loading.dilation_of(config),
        "world_size": world, "steps_compared": int(len(table)),
        "rate_mae_mbit": round(mae, 3),
        "rate_mae_relative": round(mae / mean_avail, 4) if mean_avail > 0 else None,
        "rate_bias_mbit": round(float(table["error_mbit"].mean()), 3),
        "mean_available_mbit": round(mean_avail, 3),
        "mean_training_mbit": round(float(table["training_mbit"].mean()), 3),
        "queue_mae_ms": round(float((table["est_queue_ms"] - table["truth_queue_ms"])
                                    .abs().mean()), 3),
        "max_truth_queue_ms": round(float(tr.queue_ms.max()), 3),
        **_phase_errors(table),
        "coverage": round(len(table) / max(1, len(all_r0)), 4),
        "est_min_rtt_ms": round(rtt, 4),
        "tcp_min_rtt_ms": round(tcp_rtt, 7) if np.isfinite(tcp_rtt) else None,
        "min_rtt_ratio": round(rtt / tcp_rtt, 3) if np.isfinite(tcp_rtt) and tcp_rtt > 0 else None,
        "segments": segment_changes(folder, steps),
    }
    return table, summary


def figure(table: pd.DataFrame, summary: dict[str, Any], path: Path) -> Path:
    """Three panels: rates, queueing delay, rate error; written atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ax[0].plot(table["t"], table["configured_mbit"], "k--", lw=1, label="configured")
    ax[0].plot(table["t"], table["available_mbit"], "g-", lw=1.5,
               label="available (configured - cross traffic)")
    ax[0].plot(table["t"], table["fair_mbit"], color="orange", lw=1,
               label="fair share (one flow beside the cross streams)")
    ax[0].plot(table["t"], table["est_link_mbit"], "b.", ms=3,
               label="monitor: windowed delivery rate (link Mbit/s; what the policy uses)")
    if table["tcp_rate_mbit"].notna().any():
        ax[0].plot(table["t"], table["tcp_rate_mbit"], "c.", ms=2, alpha=0.5,
                   label="kernel: tcpi_delivery_rate of the peer sockets")
    ax[0].set_ylabel("Mbit/s (log)")
    ax[0].set_yscale("log")  # an estimate 10x off must not flatten the truth into the axis
    ax[0].legend(fontsize=7, loc="upper right")
    b = summary["bottleneck"]
    ax[0].set_title(f"sensing vs truth at {b['link']} -> {b['toward']}: rate MAE "
                    f"{summary['rate_mae_mbit']:.1f} Mbit/s", fontsize=9)
    ax[1].plot(table["t"], table["truth_queue_ms"], "g-", lw=1.5, label="truth: backlog / rate")
    ax[1].plot(table["t"], table["est_queue_ms"], "b.", ms=3, label="monitor queueing delay")
    ax[1].set_ylabel("queueing delay, ms")
    ax[1].legend(fontsize=7, loc="upper right")
    ax[2].plot(table["t"], table["error_mbit"], "r.", ms=3)
    ax[2].axhline(0, color="k", lw=0.5)
    ax[2].set_ylabel("rate error, Mbit/s")
    ax[2].set_xlabel("seconds since launch")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def write(run_dir: Path, out: Path | None = None) -> tuple[dict[str, Any], list[Path]]:
    """sensing.csv, sensing.json and sensing.png into ``out`` (default: the run folder)."""
    table, summary = validate(run_dir)
    out = Path(out) if out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    files.write_csv(out / "sensing.csv", COLUMNS, table.to_dict("records"))
    files.write_json(out / "sensing.json", summary)
    png = figure(table, summary, out / "sensing.png")
    return summary, [out / "sensing.csv", out / "sensing.json", png]


def cross_per_flow(cross: list[dict[str, Any]]) -> str:
    """Each cross-traffic flow's own achieved rate (its iperf3 report), ``id rate`` joined
    by " · ", the received rate in brackets when the server reported it."""
    out = []
    for c in cross:
        sent, got = c.get("achieved_mbit"), c.get("received_mbit")
        rate = "no report" if sent is None else f"{float(sent):.0f}"
        if got is not None:
            rate += f" ({float(got):.0f} received)"
        out.append(f"{c.get('id', '?')} {rate}")
    return " · ".join(out)


def truth_table(folders: loading.Folders | Path, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: byte conservation (status, link tx / hook bytes per rank), the
    bottleneck sampler's rate, each cross-traffic flow's achieved rate (per flow: flows of a
    timeline run one after another, so a sum is no rate) and the run's warnings.

    For the report: a run whose traffic bypassed the emulated links shows here, beside its
    numbers, whatever its ``status``.
    """
    folders = loading.folders_of(folders)
    rows = []
    for run in runs.get("run", pd.Series(dtype=str)):
        s = folders[run].summary
        net = s.get("network") or {}
        ranks = (net.get("bytes") or {}).get("ranks") or []
        ratios = [r.get("ratio_tx") for r in ranks if r.get("ratio_tx") is not None]
        cross = net.get("cross_traffic") or []
        rows.append({
            "run": run, "method": s.get("method"),
            "bytes": (net.get("bytes") or {}).get("status", "not recorded"),
            "tx/hook min": min(ratios) if ratios else None,
            "tx/hook max": max(ratios) if ratios else None,
            "judged ranks": sum(1 for r in ranks if r.get("judged")),
            "truth Hz": (net.get("bottleneck") or {}).get("rate_hz"),
            # per flow, never summed: a timeline's flows run one after another, and their
            # sum (1400 Mbit/s on a 500 Mbit/s link) is no rate anything ever had
            "cross flows": len(cross) if cross else None,
            "cross Mbit/s per flow": cross_per_flow(cross) if cross else None,
            "warnings": " | ".join(s.get("warnings") or []),
        })
    return pd.DataFrame(rows)
