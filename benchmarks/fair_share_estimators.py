"""Estimators of the job's rate from what it observes, replayed offline against both truths.

    python benchmarks/fair_share_estimators.py RESULTS_DIR [RESULTS_DIR ...] [--window 8] [--runs]
        [--fixed FIXED_DIR ...]

Issue 49 asks the monitor for what the job will get beside competing flows (its max-min fair
share) in congested phases and the available rate in idle ones. This script reads
NetSenseML run folders with cross traffic (the committed ``results/runs/accel-policy/d70``,
``results/runs/policy-changes/sustained-filter`` and ``results/runs/accel-crossover/d70``),
replays each candidate over rank 0's steps in order -- from the columns the job itself
recorded, never the truth -- and prints the median |error| per phase against the truth the
policy needs (``testbed.analysis.sensing.NEEDED``; the truths at every step:
``sensing.steps_with_truth``), per run with ``--runs``. Candidates (``CANDIDATES``):

* ``monitor``: the run's own estimate (``est_rate_mbit``: what its policy read);
* ``sustained``, ``max``, ``median``: the monitor's filters replayed
  (``benchmarks/rate_filters.py``);
* ``dense-min``: the least of the window's rate samples (dense payload periods);
* ``tcp``: the median of the kernel's ``tcpi_delivery_rate`` over the window's readings
  that were not app-limited (each new value once; in virtual units);
* ``min(sustained,tcp)``: the smaller of the two;
* ``goodput``: the window's bytes over its communication seconds, every step;
* ``latest-kind``: ``sustained`` while most of the window's steps sent a dense level, else
  the median bytes / comm seconds of its all-gather (compressed) steps;
* ``two-size``: the slope between the largest and the smallest size of the last 16 steps
  (medians of each; bytes difference / time difference: a fixed cost taken out).

Each window restarts where the run's policy restarted the monitor's (a new regime). The
congested phases are also judged against what the run's own dense steps got when sent step
after step (``attained``). Then two tables that say why the congested phases stay off the
fair share whatever the filter:

* the all-gather steps' service time per size in congested phases: flat over a 4x range of
  sizes (a latency -- queue, slow start, rounds -- not a rate), so their bytes per second
  grow with the size sent and meet the fair share only at one size;
* the dense steps' rate over the fair share by the run's dilation factor ``k`` and by how
  many dense steps in a row preceded them: what the job *gets* sending a dense level step
  after step, against the share a fair TCP competition would give it.

``--fixed`` adds the same table for runs of a fixed dense level (``results/runs/sensing-dilation``:
int8 on accel-d70, seeds 0 and 1, the factor set to 140, 260 and 450 in turn, one after
another on the same host; and the same with ``topology.congestion_control`` set, reno
and bbr): what the level got beside the cross streams, sent step after step, with nothing
of the policy's in it, by the hosts' TCP congestion control (config.json's
``tcp_congestion_control``; ``default`` for runs made before it was recorded: the
machine's, BBR on the build host), and a row per run.

Offline only, as ``rate_filters.py``: in a run the estimate feeds the policy, which changes
what is sent next.
"""

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

#: the dense levels: an allreduce whose payload is a rate sample (the rest are all-gathers)
DENSE = ("none", "fp16", "bf16", "int8")
#: payload periods at least this long are rate samples (the hooks' ``monitor_min_rate_bytes``)
RATE_BYTES = 512 * 1024
PHASES = ("idle", "congested")


def _median(v: list[float]) -> float:
    return float(np.median(v)) if v else np.nan


def _restarts(r0: pd.DataFrame) -> np.ndarray:
    """Where the run's policy restarted the monitor's window (``model_rate_fresh`` fell)."""
    if "model_rate_fresh" not in r0:
        return np.zeros(len(r0), bool)
    fresh = pd.to_numeric(r0["model_rate_fresh"], errors="coerce").fillna(1.0).to_numpy()
    return (fresh == 0) & (np.r_[1.0, fresh[:-1]] == 1)


def _windowed(r0: pd.DataFrame, update: Callable[[dict, object], None],
              value: Callable[[dict], float]) -> np.ndarray:
    """Mbit/s after each step of ``r0``: ``update(state, row)``, then ``value(state)``; the
    state is cleared where the run restarted its monitor."""
    out = np.full(len(r0), np.nan)
    state: dict = {}
    for i, (restart, row) in enumerate(zip(_restarts(r0), r0.itertuples(), strict=True)):
        if restart:
            state.clear()
        update(state, row)
        out[i] = value(state)
    return out


def _samples(r0: pd.DataFrame, window: int, agg: Callable[[list[float]], float]) -> np.ndarray:
    """``agg`` of the window's rate samples (the monitor's: bytes / transfer seconds)."""
    def update(st: dict, row) -> None:
        if pd.notna(getattr(row, "est_sample_bytes", np.nan)):
            transfer = row.est_sample_s - row.est_sample_rtt_s
            if transfer > 0:
                st.setdefault("q", deque(maxlen=window)).append(row.est_sample_bytes * 8e-6 / transfer)
    return _windowed(r0, update, lambda st: agg(list(st["q"])) if st.get("q") else np.nan)


def _tcp(r0: pd.DataFrame, window: int) -> np.ndarray:
    def update(st: dict, row) -> None:
        rate = row.tcp_vmbit
        if row.tcp_app_limited == 0 and np.isfinite(rate) and rate != st.get("last"):
            st.setdefault("q", deque(maxlen=window)).append(rate)
            st["last"] = rate
    return _windowed(r0, update, lambda st: _median(list(st["q"])) if st.get("q") else np.nan)


def _goodput(r0: pd.DataFrame, window: int) -> np.ndarray:
    def update(st: dict, row) -> None:
        if row.comm_s > 0:
            st.setdefault("q", deque(maxlen=window)).append((row.bytes_sent, row.comm_s))
    return _windowed(r0, update, lambda st: (
        sum(b for b, _ in st["q"]) * 8e-6 / sum(s for _, s in st["q"]) if st.get("q") else np.nan))


def _latest_kind(r0: pd.DataFrame, window: int) -> np.ndarray:
    sustained = _replay(r0, "sustained", window)
    out = np.full(len(r0), np.nan)
    kinds: deque[bool] = deque(maxlen=window)
    small: deque[float] = deque(maxlen=window)
    for i, row in enumerate(r0.itertuples()):
        kinds.append(row.level in DENSE)
        if row.level not in DENSE and row.comm_s > 0:
            small.append(row.bytes_sent * 8e-6 / row.comm_s)
        mostly_dense = 2 * sum(kinds) >= len(kinds)
        out[i] = sustained[i] if mostly_dense or not small else _median(list(small))
    return out


def _two_size(r0: pd.DataFrame, window: int = 16) -> np.ndarray:
    def update(st: dict, row) -> None:
        if row.comm_s > 0:
            st.setdefault("q", deque(maxlen=window)).append((row.bytes_sent, row.comm_s))

    def value(st: dict) -> float:
        by: dict[float, list[float]] = {}
        for b, s in st.get("q", ()):
            by.setdefault(b, []).append(s)
        if len(by) < 2 or max(by) < 2 * min(by):
            return np.nan
        dt = _median(by[max(by)]) - _median(by[min(by)])
        return (max(by) - min(by)) * 8e-6 / dt if dt > 0 else np.nan
    return _windowed(r0, update, value)


def _replay(r0: pd.DataFrame, rate_filter: str, window: int) -> np.ndarray:
    from rate_filters import replay  # benchmarks/ is the script's own folder on sys.path

    return replay(r0, rate_filter, window)


#: name -> (rank 0's steps, window) -> the estimate after each step, payload Mbit/s
CANDIDATES: dict[str, Callable[[pd.DataFrame, int], np.ndarray]] = {
    "monitor": lambda r0, w: r0["est_rate_mbit"].to_numpy(float),
    "sustained": lambda r0, w: _replay(r0, "sustained", w),
    "max": lambda r0, w: _replay(r0, "max", w),
    "median": lambda r0, w: _replay(r0, "median", w),
    "dense-min": lambda r0, w: _samples(r0, w, min),
    "tcp": _tcp,
    "min(sustained,tcp)": lambda r0, w: np.fmin(_replay(r0, "sustained", w), _tcp(r0, w)),
    "goodput": _goodput,
    "latest-kind": _latest_kind,
    "two-size": lambda r0, w: _two_size(r0),
}


def load(run: Path) -> pd.DataFrame:
    """Rank 0's steps of ``run`` with the truths (``sensing.steps_with_truth``), the kernel's
    rate in virtual Mbit/s (``tcp_vmbit``) and the run's dilation factor ``k``."""
    from netsenseml.dilation import Dilation
    from testbed.analysis import loading, sensing

    r0 = sensing.steps_with_truth(run)
    k = loading.dilation_of(loading.open_folder(run).config)
    rate = pd.to_numeric(r0.get("tcp_delivery_rate_mbit"), errors="coerce")
    r0["tcp_vmbit"] = (Dilation(k).virtual_mbit(rate.to_numpy(float)) if rate is not None
                       else np.nan)
    if "tcp_app_limited" not in r0:
        r0["tcp_app_limited"] = 1
    r0["level"] = r0["level"].astype(str)
    r0["k"] = k
    r0["cc"] = congestion_control(loading.open_folder(run).config)
    return r0


def congestion_control(config: dict) -> str:
    """The hosts' TCP congestion control a run recorded (``tcp_congestion_control``: one
    value, or one per host); runs before it was recorded used the machine's default
    (BBR on the build host: docs/results-log.md, 2026-12-07)."""
    used = config.get("tcp_congestion_control")
    if isinstance(used, dict):
        used = "/".join(sorted(set(map(str, used.values()))))
    return str(used) if used else "default"


def errors(r0: pd.DataFrame, est: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """Per phase: (median |error| / needed truth, coverage, median estimate / truth); NaN
    where the phase has no step with an estimate."""
    e = np.asarray(est, float) * r0["link_factor"].to_numpy(float)
    need = r0["needed_mbit"].to_numpy(float)
    out = {}
    for ph in PHASES:
        in_phase = (r0["phase"] == ph).to_numpy()
        ok = in_phase & np.isfinite(e) & (need > 0)
        if not ok.any():
            out[ph] = (np.nan, 0.0, np.nan)
            continue
        ratio = e[ok] / need[ok]
        out[ph] = (float(np.median(np.abs(ratio - 1))), ok.sum() / in_phase.sum(),
                   float(np.median(ratio)))
    return out


def attained(r0: pd.DataFrame, least: int = 3) -> float:
    """What the run's dense steps got in its congested phases when sent step after step:
    the median link Mbit/s of its congested dense steps preceded by a dense step (NaN with
    fewer than ``least``)."""
    dense = r0["level"].isin(DENSE).to_numpy()
    keep = (r0["phase"] == "congested").to_numpy() & dense & np.r_[False, dense[:-1]]
    rows = r0[keep & (r0["comm_s"] > 0).to_numpy()]
    if len(rows) < least:
        return np.nan
    return float((rows["bytes_sent"] * 8e-6 / rows["comm_s"] * rows["link_factor"]).median())


def attained_error(r0: pd.DataFrame, est: np.ndarray) -> float:
    """Median |error| of ``est`` in congested phases against :func:`attained`."""
    truth = attained(r0)
    e = np.asarray(est, float) * r0["link_factor"].to_numpy(float)
    ok = (r0["phase"] == "congested").to_numpy() & np.isfinite(e)
    return float(np.median(np.abs(e[ok] / truth - 1))) if ok.any() and np.isfinite(truth) else np.nan


def _runs(roots: list[Path]) -> list[Path]:
    """NetSenseML run folders (not the prototype's rule) whose timeline started cross traffic."""
    out = set()
    for root in roots:
        for p in root.rglob("steps.csv"):
            d = p.parent
            ev = d / "events.csv"
            if ("netsenseml" in d.name and "paper" not in d.name and ev.exists()
                    and "cross_start" in ev.read_text()):
                out.add(d)
    return sorted(out)


def _name(run: Path, roots: list[Path]) -> str:
    for root in roots:
        if run.is_relative_to(root):
            return str(run.relative_to(root))
    return run.name


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.0f} %"


def sizes_table(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Congested all-gather steps (probes left out): service time per wire size."""
    rows = []
    for r0 in tables:
        c = r0[(r0["phase"] == "congested") & ~r0["level"].isin(DENSE)
               & (pd.to_numeric(r0.get("probe", 0), errors="coerce").fillna(0) == 0)]
        for b, g in c.groupby("bytes_sent"):
            rows += [{"kB": round(b / 1e3), "comm_ms": s * 1e3, "share": bytes_ / s * 8e-6 / f}
                     for bytes_, s, f in zip(g["bytes_sent"], g["comm_s"], g["fair_mbit"], strict=True)]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.groupby("kB").agg(steps=("comm_ms", "size"), comm_ms=("comm_ms", "median"),
                                rate_over_fair=("share", "median")).round(3)


def streaks_table(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Congested dense steps: bytes / comm s over the fair share, by the cross streams
    running (beside the job: its share is configured / (streams + 1)), the hosts' TCP
    congestion control, k and the dense steps in a row."""
    rows = []
    for r0 in tables:
        n = 0
        for row in r0.itertuples():
            n = n + 1 if row.level in DENSE else 0
            if row.phase == "congested" and row.level in DENSE and row.comm_s > 0 and row.fair_mbit > 0:
                rows.append({"streams": round(row.configured_mbit / row.fair_mbit - 1),
                             "cc": row.cc, "k": row.k, "in_a_row": "1" if n == 1 else "2-5" if n < 6 else ">=6",
                             "over_fair": row.bytes_sent * 8e-6 / row.comm_s * row.link_factor / row.fair_mbit,
                             "avail_over_fair": row.available_mbit / row.fair_mbit})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.groupby(["streams", "cc", "k", "in_a_row"]).agg(
        steps=("over_fair", "size"), median=("over_fair", "median"),
        q25=("over_fair", lambda s: s.quantile(0.25)), q75=("over_fair", lambda s: s.quantile(0.75)),
        available_over_fair=("avail_over_fair", "median")).round(2)


#: rank 0's steps this far apart (virtual s) waited for a retransmission timeout: the RTO's
#: floor is 200 ms virtual at any k (``testbed.orchestration.dilation``), a congested dense
#: step ~5 ms
STALL_S = 0.1


def fixed_runs_table(runs: list[Path], roots: list[Path]) -> pd.DataFrame:
    """One row per fixed dense-level run: rank 0's median step time in congested and idle
    phases (stalls left out), what its dense steps got in congested phases (the median over
    the fair share and over the available rate), in idle phases (over the link), its
    stalls, throughput, time to accuracy and the host's other load."""
    from testbed.analysis import loading

    rows = []
    for run in runs:
        r0 = load(run)
        summary = loading.open_folder(run).summary
        dense = r0[r0["level"].isin(DENSE) & (r0["comm_s"] > 0)]
        mbit = dense["bytes_sent"] * 8e-6 / dense["comm_s"] * dense["link_factor"]
        cong = (dense["phase"] == "congested") & (dense["fair_mbit"] > 0)
        idle = (dense["phase"] == "idle") & (dense["configured_mbit"] > 0)
        gaps = r0["t"].diff()  # a collective's wait, or the evaluation's (outside comm_s)
        stalls = gaps > STALL_S
        load_ = summary.get("host_load") or {}
        steady = gaps < STALL_S
        rows.append({
            "run": _name(run, roots), "cc": r0["cc"].iloc[0], "k": r0["k"].iloc[0],
            "congested_step_ms": 1e3 * gaps[steady & (r0["phase"] == "congested")].median(),
            "idle_step_ms": 1e3 * gaps[steady & (r0["phase"] == "idle")].median(),
            "congested_mbit": mbit[cong].median(),
            "over_fair": (mbit / dense["fair_mbit"])[cong].median(),
            "over_available": (mbit / dense["available_mbit"])[cong].median(),
            "idle_over_link": (mbit / dense["configured_mbit"])[idle].median(),
            "stalls": int(stalls.sum()), "stalled_s": float(gaps[stalls].sum()),
            "throughput": summary.get("throughput_samples_per_s"),
            "tta_s": summary.get("time_to_accuracy_s"),
            "other_load_pct": load_.get("other_mean_pct")})
    return pd.DataFrame(rows).sort_values(["cc", "k", "run"]).round(3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=8, help="samples or steps a window holds")
    ap.add_argument("--runs", action="store_true", help="a row per run and candidate too")
    ap.add_argument("--fixed", nargs="+", type=Path, default=[],
                    help="folders of fixed dense-level runs with cross traffic: what they got")
    args = ap.parse_args()
    from testbed.analysis import sensing

    runs = _runs(args.roots)
    if not runs:
        raise SystemExit("no NetSenseML run folders with cross traffic under "
                         + ", ".join(map(str, args.roots)))
    rows, tables = [], []
    for run in runs:
        try:
            r0 = load(run)
        except sensing.SensingError as exc:
            print(f"skipped {run}: {str(exc).split(': ', 1)[-1][:100]}")
            continue
        tables.append(r0)
        for name, fn in CANDIDATES.items():
            est = fn(r0, args.window)
            e = errors(r0, est)
            rows.append({"run": _name(run, args.roots), "k": r0["k"].iloc[0], "candidate": name,
                         **{f"{ph}_{what}": e[ph][i] for ph in PHASES
                            for i, what in enumerate(("err", "cov", "ratio"))},
                         "attained_err": attained_error(r0, est)})
    df = pd.DataFrame(rows)
    n = df["run"].nunique()
    print(f"{n} runs, window {args.window}; median |error| per run and phase against the truth "
          "the policy needs (idle: available rate, congested: fair share); over the runs:")
    print("| candidate | idle: median (worst) | idle runs <= 25 % | congested: median (worst) "
          "| congested runs <= 25 % | congested estimate / fair share |")
    print("|---|---|---|---|---|---|")
    for name, g in df.groupby("candidate", sort=False):
        i, c = g["idle_err"].dropna(), g["congested_err"].dropna()
        print(f"| {name} | {_pct(i.median())} ({_pct(i.max())}) | {(i <= 0.25).sum()}/{len(i)} "
              f"| {_pct(c.median())} ({_pct(c.max())}) | {(c <= 0.25).sum()}/{len(c)} "
              f"| {g['congested_ratio'].median():.2f} |")
    print("\ncongested phases against what the run's own dense steps got sent step after step "
          "(attained: runs with >= 3 such steps):")
    print("| candidate | median (worst) | runs <= 25 % |")
    print("|---|---|---|")
    for name, g in df.groupby("candidate", sort=False):
        a = g["attained_err"].dropna()
        print(f"| {name} | {_pct(a.median())} ({_pct(a.max())}) | {(a <= 0.25).sum()}/{len(a)} |")
    if args.runs:
        print("\n| run | k | candidate | idle | congested | congested estimate / fair share "
              "| congested vs attained |")
        print("|---|---|---|---|---|---|---|")
        for r in df.itertuples():
            print(f"| {r.run} | {r.k:.0f} | {r.candidate} | {_pct(r.idle_err)} | {_pct(r.congested_err)} "
                  f"| {r.congested_ratio:.2f} | {_pct(r.attained_err)} |")
    pd.set_option("display.width", 200)
    sizes = sizes_table(tables)
    if not sizes.empty:
        print("\ncongested all-gather steps by wire size (kB): median service time and bytes/s "
              "over the fair share")
        print(sizes.to_string())
    streaks = streaks_table(tables)
    if not streaks.empty:
        print("\ncongested dense steps: bytes/s over the fair share by dilation k and dense steps in "
              "a row, per count of cross streams (available = configured - cross received)")
        print(streaks.to_string())
    fixed = [load(p.parent) for root in args.fixed for p in sorted(root.rglob("steps.csv"))
             if (p.parent / "events.csv").exists() and "cross_start" in (p.parent / "events.csv").read_text()]
    if fixed:
        print(f"\n{len(fixed)} fixed-level runs (--fixed): congested dense steps' bytes/s over the "
              "fair share by the hosts' TCP congestion control and dilation k")
        print(streaks_table(fixed).to_string())
        dirs = [p.parent for root in args.fixed for p in sorted(root.rglob("steps.csv"))
                if (p.parent / "events.csv").exists()
                and "cross_start" in (p.parent / "events.csv").read_text()]
        print(f"\nper run: rank 0's median step (ms) in congested and idle phases, stalls left "
              f"out; dense steps' median Mbit/s in congested phases (/ fair share, / "
              f"available), in idle phases / the link; stalls: rank 0's steps "
              f"> {STALL_S:g} s apart, a retransmission timeout's (their seconds; all virtual); time to accuracy (s, virtual)")
        print(fixed_runs_table(dirs, args.fixed).to_string(index=False))


if __name__ == "__main__":
    main()
