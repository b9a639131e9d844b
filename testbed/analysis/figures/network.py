"""What the network did during a run, from its loaded folder: events as applied, the
configured rate and competing streams as step series, the bottleneck's queue, the monitor's
estimate. Used by the timeline figure and by ``timeline_csv.timeline_table`` (timeline.csv).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import loading, tables
from topologies import registry as topology_registry


def read_events(run: loading.RunData | Path) -> pd.DataFrame:
    """A run's events.csv (as the run reader, ``analysis.loading``, read it); empty when
    absent or damaged."""
    try:
        return loading.folder_of(run).csv("events.csv", ("t_applied",))
    except loading.Damaged:
        return pd.DataFrame(columns=["t_scheduled", "t_applied", "kind", "target", "value"])


def network_series(config: dict[str, Any], events: pd.DataFrame, t_end: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step series (t, value) of the configured rate and of the cross-traffic stream count.

    Start values come from config.json: each link's configured rate as its topology
    declares it (``topologies.registry``), no cross traffic. Each applied ``set_rate`` sets
    its link's rate, and the rate series is the lowest rate over the links training
    crosses (the topology's ``training_links``: a dumbbell's bottleneck and access links, a
    star's worker links); each ``cross_start`` adds ``value`` streams to its group (a ramp
    level adds its increment), ``cross_stop`` zeroes the group; the stream series sums the
    groups. A topology that cannot be read (a plug-in no longer importable) counts every
    link an event set, from its first rate-like field.
    """
    links, training = _link_rates(tables.find_key(config, "topology") or {})
    rate = [(0.0, _lowest(links, training))]
    groups: dict[str, float] = {}
    streams = [(0.0, 0.0)]
    ev = events.dropna(subset=["t_applied"]).sort_values("t_applied", kind="stable") \
        if not events.empty else events
    for _, e in ev.iterrows():
        kind = str(e.get("kind", ""))
        t = float(e["t_applied"])
        val = pd.to_numeric(pd.Series([e.get("value")]), errors="coerce").iloc[0]
        gid = str(e.get("target", ""))
        if kind == "set_rate" and not math.isnan(val):
            links[gid] = float(val)
            rate.append((t, _lowest(links, training)))
        elif kind == "cross_start":
            groups[gid] = groups.get(gid, 0.0) + (0.0 if math.isnan(val) else float(val))
            streams.append((t, sum(groups.values())))
        elif kind == "cross_stop":
            groups[gid] = 0.0
            streams.append((t, sum(groups.values())))
    rate.append((t_end, rate[-1][1]))
    streams.append((t_end, streams[-1][1]))
    return (pd.DataFrame(rate, columns=["t", "rate_mbit"]),
            pd.DataFrame(streams, columns=["t", "streams"]))


def _link_rates(topo: dict[str, Any]) -> tuple[dict[str, float], list[str] | None]:
    """(configured rate of each link, the links training crosses) of a config's topology;
    unreadable: ({"": first rate-like field}, None), every link set later counting."""
    try:
        spec = topology_registry.parse(topo)
        rates = spec.link_rates()
        return ({k: math.inf if v is None else float(v) for k, v in rates.items()},
                spec.training_links())
    except (ValueError, TypeError, NotImplementedError):  # ValidationError is a ValueError
        r0 = next((topo[k] for k in tables.RATE_KEYS if isinstance(topo.get(k), int | float)),
                  None)
        return {"": math.nan if r0 is None else float(r0)}, None


def _lowest(links: dict[str, float], training: list[str] | None) -> float:
    values = [links[k] for k in training if k in links] if training is not None \
        else list(links.values())
    finite = [v for v in values if not math.isnan(v)]
    low = min(finite) if finite else math.nan
    return math.nan if low == math.inf else low


def read_bottleneck(run: loading.RunData | Path) -> pd.DataFrame:
    """The bottleneck queue in packets (bottleneck.csv), of the watched link whose queue was
    longest on average; columns t, queue, label (the link). Empty when not recorded."""
    try:
        df = loading.folder_of(run).csv("bottleneck.csv")
    except loading.Damaged:
        return pd.DataFrame()
    if "t" not in df.columns or "backlog_pkts" not in df.columns or df.empty:
        return pd.DataFrame()
    df = df.assign(t=pd.to_numeric(df["t"], errors="coerce"),
                   queue=pd.to_numeric(df["backlog_pkts"], errors="coerce"))
    df = df.dropna(subset=["t", "queue"])
    if df.empty:
        return pd.DataFrame()
    keys = [c for c in ("link", "toward") if c in df.columns]
    if keys:
        worst = df.groupby(keys)["queue"].mean().idxmax()
        worst = worst if isinstance(worst, tuple) else (worst,)
        for k, v in zip(keys, worst, strict=True):
            df = df[df[k] == v]
        label = str(worst[0]) + (f" (toward {worst[1]})" if len(worst) > 1 else "")
    else:
        label = "bottleneck"
    return pd.DataFrame({"t": df["t"], "queue": df["queue"], "label": label})


#: What the timeline's estimate series can be, in order of preference, and its label: the
#: rate the policy decides from is the monitor's (``model_rate_mbit``, netsenseml's step
#: records); runs of other methods carry the monitor's own ``est_rate_mbit``; older runs'
#: ``model_bw_mbit`` was the policy's fitted bandwidth, not the monitor's. Old unit names are
#: converted on loading (``workloads.records.LEGACY_STEP_KEYS``).
ESTIMATES = (("model_rate_mbit", "the policy's rate (the monitor's; payload)"),
             ("est_rate_mbit", "the monitor's delivery rate (payload)"),
             ("model_bw_mbit", "the policy's fitted bandwidth (older runs)"))


def estimate_mbit(s: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """The rate estimate (Mbit/s) from the step records and its label, when logged."""
    for col, label in ESTIMATES:
        if col in s.columns and pd.to_numeric(s[col], errors="coerce").notna().any():
            return pd.to_numeric(s[col], errors="coerce"), label
    return None


