"""Tables, figures, report, compare and pack on the committed fixture results tree
(``tests/analysis/data/results``, written by ``tests/analysis/make_fixture.py``): no root,
no Mininet. The figures' plotted numbers (``fig.plotted``) are compared with the tables'
for the same cell: one interval (the 95 % t-interval) in both."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from testbed.analysis import loading, pack, plots, report, tables
from testbed.analysis.figures import accuracy, crossover, speedup, style, throughput
from testbed.analysis.results import Results
from testbed.cli.app import app

FIXTURE = Path(__file__).resolve().parent / "data" / "results"


@pytest.fixture(scope="module")
def res() -> Results:
    return Results.load(FIXTURE)


@pytest.fixture(scope="module")
def inp(res: Results):  # noqa: ANN201 - figures.Inputs
    return plots.inputs(res)


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_speedup_cells_carry_the_tables_interval(inp) -> None:  # noqa: ANN001
    figs = speedup.draw(inp, speedup.select(inp))
    assert len(figs) == inp.speedup["experiment"].nunique()  # one grid per experiment
    got = pd.concat([f.plotted for f in figs])
    assert len(got)
    for r in got.itertuples():
        row = inp.speedup[(inp.speedup["experiment"] == r.experiment)
                          & (inp.speedup["rate_mbit"] == r.rate_mbit)
                          & (inp.speedup["baseline"] == r.baseline)].iloc[0]
        for mine, theirs in ((r.value, row[r.metric]), (r.lo, row[f"{r.metric}_lo"]),
                             (r.hi, row[f"{r.metric}_hi"])):
            assert _close(float(mine), float(theirs))
    for f in figs:  # readable: no page taller than a screen, the scale centred on 1x
        w, h = f.get_size_inches()
        assert w <= 13 and h <= 9
        im = f.axes[0].images[0]
        assert math.isclose(im.norm.vmin * im.norm.vmax, 1.0)
        assert "[min-max]" not in f._suptitle.get_text()


def test_speedup_scale_spans_the_data_not_ten_x(inp) -> None:  # noqa: ANN001
    span = speedup.scale_span(inp.speedup)
    v = inp.speedup[["throughput_speedup", "tta_speedup"]].to_numpy(float).ravel()
    v = v[np.isfinite(v)]
    assert span == pytest.approx(max(1.25, float(np.exp(np.abs(np.log(v)).max())) * 1.05))


def test_throughput_points_are_the_throughput_table(inp, res: Results) -> None:  # noqa: ANN001
    fig = throughput.draw(inp, throughput.select(inp))
    tab = res.throughput()
    for r in fig.plotted.itertuples():
        t = tab[(tab["experiment"] == r.experiment) & (tab["rate_mbit"] == r.rate_mbit)
                & (tab["method"] == r.method)].iloc[0]
        assert _close(r.value, t["throughput_mean"]) and _close(r.half, t["throughput_ci95"])
        assert r.seeds == t["seeds"]
    for ax in fig.axes:  # markers only: no line joins two measured rates
        for line in ax.get_lines():
            if line.get_label() and "model" in line.get_label():
                continue
            assert line.get_linestyle() in ("None", "none", "") or len(line.get_xdata()) <= 2


def test_accuracy_figure_picks_runs_that_reach_the_target(inp, res: Results) -> None:  # noqa: ANN001
    sel = accuracy.select(inp)
    assert sel["reached_target"].all() and (sel["kind"] == "tta").all()
    fig = accuracy.draw(inp, sel)
    tab = res.tta()
    assert len(fig.plotted)
    for r in fig.plotted.itertuples():
        t = tab[(tab["experiment"] == r.experiment) & (tab["rate_mbit"] == r.rate_mbit)
                & (tab["method"] == r.method)].iloc[0]
        assert _close(r.value, t["tta_mean_s"]) and _close(r.half, t["tta_ci95_s"])


def test_accuracy_figure_says_why_when_nothing_reaches(res: Results) -> None:
    static = res.runs[res.runs["experiment"] == "fx/static"].copy()
    static.attrs.update(res.runs.attrs)
    inp = plots.inputs(Results.of(res.root, static, res.steps))
    sel = accuracy.select(inp)
    assert sel["rate_mbit"].nunique() == 1
    assert "no run reached the target" in accuracy.why_nothing(sel)


def test_crossover_points_are_the_crossover_table(inp, res: Results) -> None:  # noqa: ANN001
    fig = crossover.draw(inp, crossover.select(inp))
    xt, _ = res.crossover()
    for r in fig.plotted.itertuples():
        t = xt[(xt["experiment"] == r.experiment) & (xt["rate_mbit"] == r.rate_mbit)
               & (xt["method"] == r.method)].iloc[0]
        half = t["step_ms_ci95"] / 1000 * t["steps_to_target"]
        assert _close(r.value, t["time_to_target_s"]) and _close(r.hi - r.value, half)
    assert not [t for ax in fig.axes for t in ax.texts]  # crossings are named in the legend


def test_one_colour_per_method_everywhere(inp) -> None:  # noqa: ANN001
    assert style.method_color("fp16") == style.METHOD_COLORS["fp16"]
    assert style.method_color("topk-0.05") == style.METHOD_COLORS["topk"]
    plug = style.method_color("mypkg.mod:Comp")
    assert plug == style.method_color("mypkg.mod:Comp") and plug not in style.METHOD_COLORS.values()
    assert style.method_colors(["fp16", "int8"])["fp16"] == style.method_colors(["fp16"])["fp16"]
    for name in ("throughput_vs_rate", "accuracy_vs_time"):
        fig = {"throughput_vs_rate": throughput, "accuracy_vs_time": accuracy}[name]
        f = fig.draw(inp, fig.select(inp))
        leg = f.axes[0].get_legend()
        for h, t in zip(leg.legend_handles, leg.get_texts(), strict=True):
            method = t.get_text().split(" (")[0]
            if method in set(inp.runs["method"]) and hasattr(h, "get_color"):
                assert mcolors.to_hex(h.get_color()).lower() == style.method_color(method).lower()


def test_runs_table_says_how_each_run_computed(res: Results) -> None:
    r = res.runs.set_index("run")
    paced = r[r["experiment"] == "fxacc/paced"]
    assert (paced["accelerator"] == "paced").all() and (paced["dilation"] == 4).all()
    assert (paced["compute"] == "paced a100-mlp k=4").all()
    assert paced["overrun_share"].notna().all() and paced["host_other_pct"].notna().all()
    native = r[r["experiment"] == "fx/static"]
    assert (native["compute"] == "native").all() and native["overrun_share"].isna().all()
    assert tables.is_degraded(res.runs).sum() == 1


def test_degraded_runs_are_left_out_unless_included(res: Results) -> None:
    tta = res.tta()
    ns = tta[(tta["experiment"] == "fxacc/paced") & (tta["method"] == "netsenseml")].iloc[0]
    assert ns["seeds"] == 2
    assert "1 degraded run" in res.footer()
    inc = Results.load(FIXTURE, include_degraded=True)
    t2 = inc.tta()
    assert t2[(t2["experiment"] == "fxacc/paced") & (t2["method"] == "netsenseml")
              ].iloc[0]["seeds"] == 3
    assert inc.degraded_left_out == 0


def test_crossover_and_verdict_tables_without_root(res: Results) -> None:
    xt, crossings = res.crossover()
    assert set(xt["experiment"]) == {"fx/static"}
    assert xt["steps_source"].str.contains("convergence.json").all()
    best = xt[xt["best"]].set_index("rate_mbit")["method"]
    assert list(best.index) == [50.0, 200.0, 1000.0]
    for c in crossings:
        assert c["between"][0] < c["crossover_mbit"] < c["between"][1]
    sp = res.speedup()
    v = tables.verdict_table(sp).set_index(["experiment", "rate_mbit"])
    row = v.loc[("fx/static-tta", 50.0)]
    assert row["won"] + row["tie"] + row["lost"] + 0 == 2  # fp16, topk-0.01
    assert row["vs_oracle"] in ("won", "tie", "lost")
    # the oracle: the best fixed method at that rate, by mean TTA among those that reached
    o = sp[(sp["experiment"] == "fx/static-tta") & (sp["rate_mbit"] == 50.0)
           & (sp["baseline"] == tables.ORACLE)].iloc[0]
    tta = res.tta()
    fixed = tta[(tta["experiment"] == "fx/static-tta") & (tta["rate_mbit"] == 50.0)
                & (tta["method"] != "netsenseml")]
    assert o["oracle_tta_method"] == fixed.loc[fixed["tta_mean_s"].idxmin(), "method"]
    assert o["tta_speedup_lo"] <= o["tta_speedup"] <= o["tta_speedup_hi"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list, list[str]]:
    """One report of the fixture tree (``netsense report``'s path: from the folder), made
    once for the three tests below that read it, with what they watch while it is made:
    (the page, every ``loading.load_all`` call, every file under the tree opened -- an
    audit hook sees each open)."""
    out = tmp_path_factory.mktemp("report")
    root = FIXTURE.resolve()
    loads: list = []
    reads: list[str] = []
    real = loading.load_all
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loading, "load_all", lambda tree: loads.append(tree) or real(tree))
        _OPENS.append(lambda path: reads.append(path) if path.startswith(f"{root}/") else None)
        try:
            page = report.build_report(FIXTURE, out / "r.html", out / "fig",
                                       log=lambda m: None).read_text()
        finally:
            _OPENS.clear()
    return page, loads, reads


def test_report_leads_with_the_claim(built: tuple[str, list, list[str]]) -> None:
    page = built[0]
    claim, thr = page.index("The claim: time to accuracy"), page.index("<h2>Throughput")
    assert claim < thr < page.index("<h2>Figures")
    assert "seeds reaching the target" in page and "3/3" in page
    assert "Made by the code at commit" in page and ("clean" in page or "dirty" in page)
    assert "Not drawn" not in page  # only with --verbose
    assert "on1 " in page and "on2 " in page  # cross traffic per flow
    assert "cross Mbit/s<" not in page
    assert "1 degraded run" in page and "paced a100-mlp k=4" in page


def test_report_names_the_code_as_it_was_before_drawing(
        tmp_path: Path, res: Results, monkeypatch: pytest.MonkeyPatch) -> None:
    # redrawing a committed figure set changes tracked files: asked afterwards, git would
    # call the clean code that drew them dirty (the committed report said so)
    figs = tmp_path / "fig"
    monkeypatch.setattr(report, "git_commit", lambda: "0123456789ab" + (
        "+dirty" if figs.exists() and any(figs.iterdir()) else ""))
    page = report.build_report(res, tmp_path / "r.html", figs, log=lambda m: None).read_text()
    assert "commit 0123456789ab, clean" in page and "dirty" not in page


def test_plot_and_report_read_the_tree_once(built: tuple[str, list, list[str]]) -> None:
    assert len(built[1]) == 1


def test_the_report_reads_each_run_file_once(built: tuple[str, list, list[str]]) -> None:
    """One run reader (``loading.RunData``): the tables, figures and the page take what it
    read; no file of a run folder is opened twice behind its back (every open is seen: an
    audit hook, on while the report is made)."""
    reads = built[2]
    assert {Path(p).name for p in reads} >= {"config.json", "summary.json", "steps.csv"}
    twice = sorted({p for p in reads if reads.count(p) > 1})
    assert not twice, twice[:5]


#: While a test holds a callback here, every file opened is passed to it (absolute path).
_OPENS: list = []


def _audit(event: str, args: tuple) -> None:
    if _OPENS and event == "open" and isinstance(args[0], str | Path):
        _OPENS[0](os.path.abspath(args[0]))


sys.addaudithook(_audit)


def test_plot_prints_no_notes_unless_verbose(tmp_path: Path) -> None:
    out = tmp_path / "fig"
    res = CliRunner().invoke(app, ["plot", str(FIXTURE), "-f", str(out)])
    assert res.exit_code == 0, res.output
    assert "not written" not in res.output and "skipped" not in res.output
    res = CliRunner().invoke(app, ["plot", str(FIXTURE), "-f", str(out), "--verbose"])
    assert res.exit_code == 0


def test_pack_takes_out_any_checkouts_folder(tmp_path: Path) -> None:
    """A run made from another checkout (a clean worktree, an A/B arm's revision) names the
    scenario's files under that folder; the packed copy names them from the repository."""
    text = ('{"convergence": "/srv/ci/wt-ab/testbed/scenarios/convergence/t.json", '
            '"out": "/data/mine/run", "cmd": "/srv/ci/wt-ab/workloads/train.py"}')
    out = pack.portable(text, tmp_path / "run")
    assert '"convergence": "testbed/scenarios/convergence/t.json"' in out
    assert '"/data/mine/run"' in out  # not the testbed's file: left as it was


def test_pack_keeps_the_numbers_and_report_compare_read_it(tmp_path: Path) -> None:
    dest = tmp_path / "runs" / "fx"
    n, size = pack.pack(FIXTURE, dest, rank0_rows=25, log=lambda m: None)
    assert n == 54 and size < 600_000
    assert not list(dest.rglob("workers")) and list(dest.rglob("start.json"))
    with pytest.raises(pack.PackError, match="--replace"):
        pack.pack(FIXTURE, dest, log=lambda m: None)
    a, _ = tables.load_runs(FIXTURE)
    b, sb = tables.load_runs(dest)
    a, b = a.set_index("run"), b.set_index("run").loc[a.set_index("run").index]
    for col in ("throughput", "tta_s", "final_accuracy", "steps", "overrun_share"):
        assert np.allclose(a[col].astype(float), b[col].astype(float), equal_nan=True), col
    rank0 = sb[sb["rank"] == 0].groupby("run").size()
    assert rank0.max() <= 25 + 40  # the bound plus the evaluated steps
    page = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(dest), "--html", str(page), "-f",
                                 str(tmp_path / "fig")])
    assert r.exit_code == 0, r.output
    assert "The claim: time to accuracy" in page.read_text()
    r = CliRunner().invoke(app, ["compare", str(dest / "fx" / "static-tta" / "rate_mbit=50"
                                                / "fp16-s0"),
                                 str(dest / "fxacc" / "paced" / "rate_mbit=200" / "fp16-s0"),
                                 "-o", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    assert "paced" in r.output and (tmp_path / "cmp" / "compare.csv").exists()
    shutil.rmtree(tmp_path / "fig")


def test_a_run_outside_a_sweep_with_a_timeline_is_a_timeline_run() -> None:
    """`netsense run` / `netsense ab` folders carry no sweep.json: their kind comes from the
    scenario, so the ideal schedule and the adaptation figure take them too."""
    from testbed.analysis.tables import _kind_of
    timeline = {"scenario": {"timeline": [{"at_s": 1, "kind": "set_rate"}]}}
    assert _kind_of({}, timeline) == "timeline"
    assert _kind_of({}, {"scenario": {"timeline": []}}) == "other"
    assert _kind_of({"kind": "throughput"}, timeline) == "throughput"  # the sweep's word wins
