"""The committed evaluation's figures agree with its tables, cell by cell (issue 44).

On the committed data, not a fixture: the packed run folders of the current evaluation
(``results/runs/accel-crossover``) are loaded as ``netsense plot`` loads them, every
registered figure is drawn, and each interval a figure draws -- read from the figure's
artists (the error bars' segments, the heatmap cells' text), and from what it says it drew
(``fig.plotted``) -- is compared with the table's 95 % interval for the same (experiment,
rate, method) cell. The tables committed beside the figures
(``results/figures/accel-crossover/*.csv``, the numbers ``results/README.md`` quotes) are
compared with the tables the code computes from the committed runs, so the committed set
is the current code's. No root, no Mininet; a few seconds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from testbed.analysis import plots
from testbed.analysis.figures import Inputs, registry, style
from testbed.analysis.figures import speedup as speedup_figure
from testbed.analysis.results import Results

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "runs" / "accel-crossover"
FIGURES = ROOT / "results" / "figures" / "accel-crossover"
KEY = ["experiment", "rate_mbit", "method"]


@functools.cache
def _load(include_degraded: bool) -> Results:
    assert RUNS.is_dir(), f"the committed evaluation's run folders are missing: {RUNS}"
    return Results.load(RUNS, include_degraded=include_degraded)


@pytest.fixture(scope="module", params=[False, True], ids=["default", "include-degraded"])
def res(request: pytest.FixtureRequest) -> Results:
    """The committed runs as ``netsense plot`` reads them, and with ``--include-degraded``
    (with its degraded runs left out, NetSenseML has one seed on d70: no interval to draw)."""
    return _load(request.param)


@pytest.fixture(scope="module")
def inp(res: Results) -> Inputs:
    return plots.inputs(res)


@pytest.fixture(scope="module")
def drawn(inp: Inputs) -> Iterator[dict[str, list]]:
    """{figure name: its pages}, every registered figure the committed runs support."""
    out = {}
    for fig in registry():
        sel = fig.runs(inp)
        if not sel.empty:
            pages = fig.draw(inp, sel)
            out[fig.name] = list(pages) if isinstance(pages, list | tuple) else [pages]
    yield out
    for pages in out.values():
        for page in pages:
            plt.close(page)


def _same(a: float, b: float) -> bool:
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _half(h: float) -> float:
    """A half-width as drawn: no interval (one seed) is a bar of length 0."""
    return 0.0 if h != h else float(h)


def _bars(ax, axis: str) -> dict[str, list[tuple[float, float, float]]]:  # noqa: ANN001
    """{label: [(centre, low end, high end), ...]} of the axis' error bars, from the
    artists: the data line's points and the bar segments (``axis``: "x" or "y")."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    i = 0 if axis == "x" else 1
    for c in ax.containers:
        if not isinstance(c, ErrorbarContainer):
            continue
        data, _caps, cols = c.lines
        centres = [float(p[i]) for p in data.get_xydata()]
        segs = cols[0].get_segments() if cols else [None] * len(centres)
        out[c.get_label()] = [(v, v, v) if s is None else (v, float(min(s[0][i], s[1][i])),
                                                           float(max(s[0][i], s[1][i])))
                              for v, s in zip(centres, segs, strict=True)]
    return out


def _cell(table: pd.DataFrame, row: object, method_col: str = "method") -> pd.Series:
    t = table[(table["experiment"] == row.experiment) & (table["rate_mbit"] == row.rate_mbit)
              & (table[method_col] == getattr(row, method_col))]
    assert len(t) == 1, f"{row}: {len(t)} table rows"
    return t.iloc[0]


def test_the_committed_evaluation_draws_every_interval_figure(drawn: dict) -> None:
    assert {"throughput_vs_rate", "accuracy_vs_time", "speedup", "crossover"} <= set(drawn)
    for name in ("throughput_vs_rate", "accuracy_vs_time", "speedup", "crossover"):
        assert all(len(p.plotted) for p in drawn[name]), name


def test_throughput_intervals_are_the_tables(drawn: dict, res: Results) -> None:
    table = res.throughput()
    [fig] = drawn["throughput_vs_rate"]
    got = fig.plotted
    # every cell of the drawn experiments is drawn, and nothing else
    want = table[table["experiment"].isin(got["experiment"])]
    assert sorted(map(tuple, got[KEY].to_numpy())) == sorted(map(tuple, want[KEY].to_numpy()))
    for r in got.itertuples():
        t = _cell(table, r)
        assert _same(r.value, t["throughput_mean"]) and _same(r.half, t["throughput_ci95"])
        assert r.seeds == t["seeds"]
    for ax, exp in zip(fig.axes, dict.fromkeys(got["experiment"]), strict=True):
        bars = _bars(ax, "y")
        for method, g in got[got["experiment"] == exp].groupby("method"):
            g = g.sort_values("rate_mbit")
            assert len(bars[method]) == len(g)
            for (v, lo, hi), r in zip(bars[method], g.itertuples(), strict=True):
                assert _same(v, r.value)
                assert _same(v - lo, _half(r.half)) and _same(hi - v, _half(r.half))


def test_time_to_accuracy_intervals_are_the_tables(drawn: dict, res: Results) -> None:
    table = res.tta()
    [fig] = drawn["accuracy_vs_time"]
    for r in fig.plotted.itertuples():
        t = _cell(table, r)
        assert _same(r.value, t["tta_mean_s"]) and _same(r.half, t["tta_ci95_s"])
    for ax in fig.axes:
        stars = [b for bars in _bars(ax, "x").values() for b in bars]
        title = ax.get_title()  # "<experiment> at <rate> Mbit/s": one panel per rate
        want = sorted((r.value, _half(r.half)) for r in fig.plotted.itertuples()
                      if title.startswith(f"{r.experiment} at {style.rate_text(r.rate_mbit)}"))
        assert len(stars) == len(want)
        for (v, lo, hi), (value, half) in zip(sorted(stars), want, strict=True):
            assert _same(v, value) and _same(v - lo, half) and _same(hi - v, half)


def test_speedup_cells_say_the_tables_interval(drawn: dict, res: Results) -> None:
    table = res.speedup()
    assert any(np.isfinite(p.plotted["lo"]).any() for p in drawn["speedup"]) \
        or not res.include_degraded  # with every seed counted, the cells have intervals
    for page in drawn["speedup"]:
        for r in page.plotted.itertuples():
            t = _cell(table, r, "baseline")
            assert _same(r.value, t[r.metric])
            assert _same(r.lo, t[f"{r.metric}_lo"]) and _same(r.hi, t[f"{r.metric}_hi"])
        panels = page.axes[:len(speedup_figure.PANELS)]
        for ax, (metric, _title) in zip(panels, speedup_figure.PANELS, strict=True):
            written = sorted(t.get_text() for t in ax.texts)
            rows = page.plotted[page.plotted["metric"] == metric]
            want = []
            for r in rows.itertuples():  # the table's numbers, as the cell prints them
                t = _cell(table, r, "baseline")
                v, lo, hi = (float(t[metric]), float(t[f"{metric}_lo"]),
                             float(t[f"{metric}_hi"]))
                txt = f"{v:.2f}x" if np.isfinite(v) else "n/a"
                want.append(txt + (f"\n[{lo:.2f}, {hi:.2f}]" if np.isfinite(v)
                                   and np.isfinite(lo) else ""))
            assert written == sorted(want)


def test_crossover_intervals_are_the_tables(drawn: dict, res: Results) -> None:
    table, _ = res.crossover()
    [fig] = drawn["crossover"]
    got = fig.plotted
    assert sorted(map(tuple, got[KEY].to_numpy())) == sorted(map(tuple, table[KEY].to_numpy()))
    for r in got.itertuples():
        t = _cell(table, r)
        half = t["step_ms_ci95"] / 1000 * t["steps_to_target"]
        assert _same(r.value, t["time_to_target_s"])
        assert _same(r.value - r.lo, half) and _same(r.hi - r.value, half)
    for ax, exp in zip(fig.axes, dict.fromkeys(got["experiment"]), strict=True):
        bars = _bars(ax, "y")
        for method, g in got[got["experiment"] == exp].groupby("method"):
            g = g.sort_values("rate_mbit")
            for (v, lo, hi), r in zip(bars[str(method)], g.itertuples(), strict=True):
                h = _half(r.hi - r.value)
                assert _same(v, r.value) and _same(v - lo, h) and _same(hi - v, h)


@pytest.mark.parametrize("name", ["throughput.csv", "tta.csv", "speedup.csv", "crossover.csv",
                                  "static_vs_oracle.csv"])
def test_committed_tables_are_the_current_codes(name: str) -> None:
    """The CSVs committed beside the figures (and quoted by results/README.md) are what
    the code computes from the committed runs: redraw with ``netsense report`` when not."""
    _assert_same_table(plots.tables_of(_load(False))[name], pd.read_csv(FIGURES / name))


def _assert_same_table(computed: pd.DataFrame, committed: pd.DataFrame) -> None:
    computed = computed.reset_index(drop=True)
    assert list(committed.columns) == list(computed.columns)
    assert len(committed) == len(computed)
    for col in computed.columns:
        a, b = computed[col], committed[col]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            assert np.allclose(a.astype(float), b.astype(float), rtol=1e-9, equal_nan=True), col
        else:
            assert [str(x) for x in a.fillna("")] == [str(x) for x in b.fillna("")], col


@pytest.mark.parametrize("folder", ["d70", "static5"])
def test_the_committed_policy_comparisons_are_what_their_runs_give(folder: str) -> None:
    """results/README.md quotes runs/accel-policy/*/ab.json: the committed table must be
    what the committed (packed) runs give today, ratio and interval, row by row."""
    import json

    from testbed.analysis import ab_stats

    where = ROOT / "results" / "runs" / "accel-policy" / folder
    committed = json.loads((where / "ab.json").read_text())
    arms, obs, excluded = ab_stats.from_runs(where, committed["arms"], None,
                                             committed["field"])
    assert not excluded and arms == committed["arms"]
    rows = ab_stats.compare(obs, arms).rows
    for got, want in zip(rows, committed["rows"], strict=True):
        assert got["arm"] == want["arm"] and got["n"] == want["n"] == 6
        for key in ("mean", "ratio", "ratio_lo", "ratio_hi"):
            if want[key] is not None:
                assert got[key] == pytest.approx(want[key], rel=1e-9), (got["arm"], key)


def test_the_claim_leaves_timing_runs_out_and_keeps_accuracy_in_its_range() -> None:
    """The report's claim table: the static experiment's 0.1 s timing runs (kind throughput,
    never meant to reach the target) belong to the throughput table, and an accuracy's
    interval stays inside [0, 1]."""
    import re

    from testbed.analysis import report

    res = _load(False)
    claim = report.claim_table(res.tta(), res.speedup(), res.runs)
    assert not claim.empty
    assert "accel-crossover/static" not in set(claim["experiment"])
    assert "accel-crossover/d70" in set(claim["experiment"])
    for text in claim["final"]:
        assert all(0.0 <= float(v) <= 1.0 for v in re.findall(r"-?\d+\.\d+", text)), text


PAPER_RUNS = ROOT / "results" / "runs" / "paper-scale"
PAPER_FIGURES = ROOT / "results" / "figures" / "paper-scale"


@pytest.mark.parametrize("name", ["throughput.csv", "speedup.csv"])
def test_the_paper_scale_tables_are_what_its_runs_give(name: str) -> None:
    """results/README.md section 5 quotes results/figures/paper-scale/, drawn with
    ``--include-degraded`` (each run's lateness is in runs.csv; the README says which): the
    committed tables must be what the code computes from the committed paper-scale runs."""
    computed = plots.tables_of(Results.load(PAPER_RUNS, include_degraded=True))[name]
    _assert_same_table(computed, pd.read_csv(PAPER_FIGURES / name))


def test_the_timelines_network_spans_every_drawn_step_series(drawn: dict) -> None:
    """d70's NetSenseML run ends at ~0.26 virtual s, allreduce's at ~0.59: the rate and
    stream panels went blank after 0.26 while step times went on (issue 50); the longest
    run's network now continues them (dashed), to the last step drawn."""
    [fig] = drawn["adaptation_timeline"]
    axes = fig.axes
    last_step = max(float(np.nanmax(line.get_xdata())) for line in axes[-1].get_lines()
                    if len(line.get_xdata()))
    for a in axes[:2]:  # rate, streams
        ends = [float(np.nanmax(line.get_xdata())) for line in a.get_lines()
                if len(line.get_xdata()) and line.get_linestyle() != "None"]
        assert max(ends) >= 0.98 * last_step, (a.get_ylabel(), max(ends), last_step)


def test_compare_draws_no_level_row_for_runs_it_left_out() -> None:
    """d70's PowerSGD runs are degraded and left out of compare's groups; its level axis
    still had an empty 'powersgd' row."""
    from testbed.analysis import compare

    runs, steps = compare.load([RUNS / "d70"])
    groups = compare.table(runs)
    assert "powersgd:4" not in set(groups["method"])
    fig = compare.figure(runs, steps, groups)
    try:
        levels = [t.get_text() for t in fig.axes[-1].get_yticklabels()]
        assert "powersgd" not in levels and {"none", "topk"} <= set(levels), levels
    finally:
        plt.close(fig)
