"""A congestion ramp read from run folders (``testbed.analysis.ramp``) and drawn in the
paper's form (the ``ramp`` figure, ``ramp.csv``, the report's table).

On the committed ramp runs, no fixture and no mock: the ``accel-ramp`` runs of the
sustained-filter A/B (an emulated A100's MLP on a 1+1 dumbbell, iperf3 at 1, 2, 4, 8, 16
streams, NetSenseML, 6 seeds an arm; ``results/runs/policy-changes/sustained-filter``). The
windows are the timeline's, the throughput per window adds up to the run's own samples, the
table's numbers for one run are the simulation's ramp comparison's
(``testbed.simulation.paced_ramp``: the same windows and tracks, one module for both), its
intervals over seeds are ``testbed.common.stats.ci95`` of the per-run values, and a results
tree without a ramp (the committed ``accel-d70`` runs: rate changes beside the streams) gets
no ramp figure and no ramp table, said, not raised.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml
from matplotlib.container import ErrorbarContainer

from testbed.analysis import loading, plots, ramp, report
from testbed.analysis.figures import NoData, by_name, registry
from testbed.analysis.results import Results
from testbed.common.stats import ci95
from testbed.simulation import paced_ramp

ROOT = Path(__file__).resolve().parents[2]
ARMS = ROOT / "results" / "runs" / "policy-changes" / "sustained-filter" / "accel-ramp"
ARM = ARMS / "netsenseml"  # one arm: 6 seeds of one method
ONE = ARM / "accel-ramp" / "20261207-133236-netsenseml-s0"
NO_RAMP = ROOT / "results" / "runs" / "accel-policy" / "d70" / "netsenseml" / "accel-d70"
UNIT = re.compile(r"\([^)]+\)")


@functools.cache
def _load(root: Path) -> Results:
    return Results.load(root)


def _timeline(scenario: str) -> list[dict]:
    return yaml.safe_load((ROOT / "testbed" / "scenarios" / f"{scenario}.yaml").read_text())[
        "timeline"]


def test_the_paper_ramp_is_cut_into_its_levels_and_pauses() -> None:
    ws = ramp.windows(_timeline("paper-ramp30"))
    assert [(w.label, w.start_s, w.end_s, w.streams) for w in ws] == [
        ("idle", 0.0, 10.0, 0), ("1 streams", 10.0, 40.0, 1), ("pause", 40.0, 50.0, 0),
        ("10 streams", 50.0, 80.0, 10), ("pause", 80.0, 90.0, 0),
        ("20 streams", 90.0, 120.0, 20), ("pause", 120.0, 130.0, 0),
        ("30 streams", 130.0, 160.0, 30), ("pause", 160.0, 170.0, 0),
        ("40 streams", 170.0, 200.0, 40), ("pause", 200.0, 210.0, 0),
        ("50 streams", 210.0, 240.0, 50), ("after", 240.0, None, 0)]


def test_concurrent_streams_add_up_and_other_events_are_refused() -> None:
    ws = ramp.windows([
        {"at_s": 0, "kind": "cross_start", "id": "a", "streams": 2},
        {"at_s": 5, "kind": "cross_start", "id": "b", "streams": 3},
        {"at_s": 8, "kind": "cross_stop", "id": "a"}])
    assert [(w.label, w.start_s, w.end_s) for w in ws] == [
        ("2 streams", 0.0, 5.0), ("5 streams", 5.0, 8.0), ("3 streams", 8.0, None)]
    with pytest.raises(ValueError, match="set_rate"):
        ramp.windows([{"at_s": 1, "kind": "set_rate", "link": "x", "rate_mbit": 1}])


def test_a_ramp_is_cross_traffic_only_on_the_first_steps_clock() -> None:
    ramp_cfg = _load(ARM).folders[str(ONE.relative_to(ARM))].config
    assert ramp.is_ramp(ramp_cfg)
    launch = {**ramp_cfg, "scenario": {**ramp_cfg["scenario"], "timeline_origin": "launch"}}
    assert not ramp.is_ramp(launch)
    d70 = _load(NO_RAMP)
    assert not any(ramp.is_ramp(d70.folders[r].config) for r in d70.runs["run"])


def _rank0(run: Path) -> list[dict[str, str]]:
    with (run / "steps.csv").open(newline="") as fh:
        return sorted((r for r in csv.DictReader(fh) if r["rank"] == "0"),
                      key=lambda r: float(r["t"]))


@pytest.mark.parametrize("run", sorted(p.parent for p in ARMS.rglob("steps.csv")),
                         ids=lambda p: p.name)
def test_the_windows_throughput_adds_up_to_the_runs_samples(run: Path) -> None:
    """Over the whole run: (steps after the first) x samples / (last end - first end), read
    from steps.csv here; per window, throughput x covered length sums to the same samples."""
    rows = _rank0(run)
    track = ramp.track_of(loading.folder_of(run).steps)
    span = float(rows[-1]["t"]) - float(rows[0]["t"])
    samples = sum(float(r["samples"]) for r in rows[1:])
    assert len(track.steps) == len(rows) - 1
    whole, cover = ramp.throughput(track, 0.0, track.end_s)
    assert cover == 1.0 and whole == pytest.approx(samples / span, rel=1e-9)
    total = 0.0
    for w in ramp.windows(json.loads((run / "config.json").read_text())["scenario"]["timeline"]):
        a, b = w.bounds(track.end_s)
        thr, cov = ramp.throughput(track, a, b)
        if b > a and thr is not None:
            total += thr * cov * (b - a)
    assert total == pytest.approx(samples, rel=1e-9)


def test_one_runs_table_is_the_simulations_throughput_per_window() -> None:
    """The table of a tree holding one committed ramp run: per window the run covers by half,
    paced_ramp's throughput of that run (its own reading of the folder) over the window;
    one seed, so no interval; the level NetSenseML held longest, with its share."""
    res = Results.load(ONE)
    table = res.ramp()
    track = paced_ramp.emulated_track(ONE)
    expect = []
    for i, w in enumerate(ramp.windows(res.folders[res.runs["run"].iloc[0]].config[
            "scenario"]["timeline"])):
        end = track.end_s if w.end_s is None else w.end_s
        thr, cover = paced_ramp.throughput(track, w.start_s, end)
        if thr is not None and cover >= paced_ramp.MIN_COVER:
            dom = ramp.dominant_level(track, w.start_s, end)
            expect.append((i, w.label, w.streams, thr, dom))
    assert [w[1] for w in expect] == ["idle", "1 streams"]  # it ends early in the pause
    assert list(table["window"]) == [e[0] for e in expect]
    assert list(table["label"]) == [e[1] for e in expect]
    assert list(table["streams"]) == [e[2] for e in expect]
    assert list(table["throughput_mean"]) == [e[3] for e in expect]
    assert (table["seeds"] == 1).all() and table["throughput_ci95"].isna().all()
    assert list(zip(table["level"], table["level_share"], strict=True)) == [e[4] for e in expect]
    assert set(table["level"]) == {"int8"}


def _per_seed(root: Path) -> dict[tuple[str, int], list[float]]:
    """(method, window) -> each counted run's throughput, from paced_ramp's tracks."""
    res = _load(root)
    out: dict[tuple[str, int], list[float]] = {}
    for r in res.ok.itertuples(index=False):
        track = paced_ramp.emulated_track(res.root / r.run)
        for i, w in enumerate(ramp.windows(res.folders[r.run].config["scenario"]["timeline"])):
            end = track.end_s if w.end_s is None else w.end_s
            thr, cover = paced_ramp.throughput(track, w.start_s, end)
            if thr is not None and cover >= ramp.MIN_COVER:
                out.setdefault((r.method, i), []).append(thr)
    return out


def test_intervals_over_seeds_are_the_tables_t_interval() -> None:
    """Six seeds of one arm: mean and 95 % t-interval of the per-run values per window,
    an interval wherever two or more seeds count; the level's share is of all their time."""
    table = _load(ARM).ramp()
    values = _per_seed(ARM)
    assert len(table) == len(values) >= 3
    for r in table.itertuples(index=False):
        v = values[(r.method, r.window)]
        mean, half, n = ci95(v)
        assert r.seeds == n == len(v) and r.seeds_total == 6
        assert r.throughput_mean == pytest.approx(mean, rel=1e-12)
        assert n >= 2 and r.throughput_ci95 == pytest.approx(half, rel=1e-12) and half > 0
        assert r.level == "int8" and 0.5 < r.level_share <= 1.0
    assert list(table["seeds"][:2]) == [6, 6]  # idle and 1 stream: every seed


def _bars(ax) -> dict[str, list[tuple[float, float, float]]]:  # noqa: ANN001
    """{label: [(mean, low, high)]} of the axis' error bars, from the artists."""
    out = {}
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            data, _caps, cols = c.lines
            ys = [float(p[1]) for p in data.get_xydata()]
            segs = cols[0].get_segments() if cols else [None] * len(ys)
            out[c.get_label()] = [(y, y, y) if s is None else
                                  (y, float(min(s[0][1], s[1][1])), float(max(s[0][1], s[1][1])))
                                  for y, s in zip(ys, segs, strict=True)]
    return out


def test_the_figure_draws_the_tables_intervals_with_units_on_its_axes() -> None:
    res = _load(ARM)
    inp = plots.inputs(res)
    fig_spec = by_name("ramp")
    assert "ramp" in {f.name for f in registry()}
    fig = fig_spec.draw(inp, fig_spec.runs(inp))
    try:
        pd.testing.assert_frame_equal(fig.plotted, res.ramp().reset_index(drop=True))
        thr = [ax for ax in fig.axes if ax.get_ylabel().startswith("training throughput")]
        assert len(thr) == 1
        bars = _bars(thr[0])["netsenseml"]
        for (y, lo, hi), r in zip(bars, res.ramp().itertuples(index=False), strict=True):
            assert y == pytest.approx(r.throughput_mean, rel=1e-12)
            assert y - lo == pytest.approx(r.throughput_ci95, rel=1e-9)
            assert hi - y == pytest.approx(r.throughput_ci95, rel=1e-9)
        level = [ax for ax in fig.axes if ax.get_ylabel().startswith("level")]
        assert len(level) == 1 and [t.get_text() for t in level[0].get_yticklabels()] == ["int8"]
        fig.canvas.draw()
        for ax in fig.axes:
            if ax.get_visible() and ax.get_ylabel():
                assert UNIT.search(ax.get_ylabel()), ax.get_ylabel()
            if ax.get_xlabel():
                assert UNIT.search(ax.get_xlabel()), ax.get_xlabel()
            leg = ax.get_legend()
            if leg is not None:
                labels = [t.get_text() for t in leg.get_texts()]
                assert len(labels) == len(set(labels))
    finally:
        plt.close(fig)


def test_a_tree_without_a_ramp_gets_no_ramp_figure_and_says_why(tmp_path: Path) -> None:
    res = _load(NO_RAMP)
    inp = plots.inputs(res)
    fig = by_name("ramp")
    assert fig.runs(inp).empty and res.ramp().empty
    with pytest.raises(NoData, match="no ramp runs"):
        fig.draw(inp, res.ok)
    out = tmp_path / "figures"
    written = plots.make_figures(Results.load(NO_RAMP), out, log=lambda _m: None)
    assert "ramp" not in written and not (out / "ramp.png").exists()
    assert not (out / "ramp.csv").exists()
    skipped = pd.read_csv(out / "skipped.csv")
    assert set(skipped["what"]) >= {"ramp", "ramp.csv"}


def test_the_report_holds_the_ramp_figure_and_table(tmp_path: Path) -> None:
    page = report.build_report(ARM, tmp_path / "report.html", tmp_path / "figures",
                               log=lambda _m: None)
    html = page.read_text()
    assert "Congestion ramp: throughput and level per window of constant streams" in html
    assert html.count("Congestion ramp:") >= 2  # the figure's heading and the table's
    written = pd.read_csv(tmp_path / "figures" / "ramp.csv")
    computed = _load(ARM).ramp()
    assert list(written.columns) == ramp.COLUMNS
    assert [math.isclose(a, b, rel_tol=1e-12) for a, b in zip(
        written["throughput_mean"], computed["throughput_mean"], strict=True)] == \
        [True] * len(computed)
    assert (tmp_path / "figures" / "ramp.png").is_file()
