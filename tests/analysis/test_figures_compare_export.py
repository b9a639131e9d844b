"""Figures fit for a paper, ``netsense compare`` and ``netsense export``, on a tiny REAL sweep
(testbed/sweeps/tiny.yaml: 2 rates x allreduce / top-k 0.01 / netsenseml, Mininet dumbbell;
once per session: ``tiny_sweep``, tests/conftest.py, which the sweep's own tests read too).

Figures, every registered one, drawn from the runs: legend entries unique, every y axis and
the bottom x axis labelled with a unit in parentheses, one colour per method across
figures, the timeline's level axis only the levels the run used, the colour bar's ticks
plain ("2x", never "6x10^0"), one run folder drawing only what one run can show and no
header-only table. Compare on two real run folders (numbers against the tables'),
export read back with TensorBoard's own event reader (values against steps.csv).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from typer.testing import CliRunner

from testbed.analysis import plots, tables
from testbed.analysis.figures import registry
from testbed.cli.app import app

pytestmark = pytest.mark.emulation
UNIT = re.compile(r"\([^)]+\)")


@pytest.fixture
def swept(tiny_sweep: Path) -> Path:
    """The session's tiny sweep (tests/conftest.py), shared with the sweep's own tests."""
    return tiny_sweep


def _drawn(root: Path) -> dict[str, plt.Figure]:
    runs, steps = tables.load_runs(root)
    inp = plots.inputs(root, runs, steps)
    out = {}
    for fig in registry():
        sel = fig.runs(inp)
        if not sel.empty:
            drawn = fig.draw(inp, sel)
            pages = drawn if isinstance(drawn, list) else [drawn]  # speedup: one per experiment
            for i, page in enumerate(pages):
                out[fig.name if i == 0 else f"{fig.name}-{i + 1}"] = page
                page.canvas.draw()  # tick labels and offset texts exist once drawn
    return out


def _line_colors(fig: plt.Figure) -> dict[str, tuple[float, ...]]:
    """Legend label -> RGBA of its handle, over every legend of the figure."""
    out = {}
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None:
            continue
        for h, t in zip(leg.legend_handles, leg.get_texts(), strict=True):
            if hasattr(h, "get_color"):
                c = h.get_color()
            elif hasattr(h, "get_facecolor"):
                c = h.get_facecolor()
                c = c[0] if len(c) and not isinstance(c[0], float) else c
            else:
                continue
            out[t.get_text()] = tuple(float(x) for x in mcolors.to_rgba(c))
    return out


def test_every_figure_has_unique_legends_and_units_on_its_axes(swept: Path) -> None:
    figs = _drawn(swept)
    # the tiny sweep supports every figure but the crossover (it has no static runs of the
    # ladder's fixed levels with known steps to target)
    assert set(figs) == {f.name for f in registry()} - {"crossover"}
    for name, fig in figs.items():
        for ax in fig.axes:
            leg = ax.get_legend()
            if leg is not None:
                labels = [t.get_text() for t in leg.get_texts()]
                assert len(labels) == len(set(labels)), (name, labels)
            if ax.get_ylabel() or ax.get_yticklabels() and any(
                    t.get_text() for t in ax.get_yticklabels()):
                assert UNIT.search(ax.get_ylabel()), (name, ax.get_ylabel())
            if ax.get_xlabel():
                assert UNIT.search(ax.get_xlabel()), (name, ax.get_xlabel())
            for t in ax.get_yticklabels() + ax.get_xticklabels():  # no 6x10^0 or 1e6
                assert "10^" not in t.get_text() and "times10" not in t.get_text(), name
            assert not ax.yaxis.get_offset_text().get_text(), (name, "offset text")
        assert any(UNIT.search(ax.get_xlabel()) for ax in fig.axes), name
    cb = [ax for ax in figs["speedup"].axes if "speedup (x" in ax.get_ylabel()]
    assert len(cb) == 1
    ticks = [t.get_text() for t in cb[0].get_yticklabels() if t.get_text()]
    assert ticks and all(re.fullmatch(r"\d+(\.\d+)?x", t) for t in ticks), ticks
    assert not [t for t in cb[0].yaxis.get_minorticklabels() if t.get_text()]
    for fig in figs.values():
        plt.close(fig)


def test_one_colour_per_method_and_only_the_levels_used(swept: Path) -> None:
    figs = _drawn(swept)
    acc = {k: v for k, v in _line_colors(figs["accuracy_vs_time"]).items()
           if k in ("allreduce", "netsenseml", "topk:0.01")}
    tl = {k: v for k, v in _line_colors(figs["adaptation_timeline"]).items() if k in acc}
    thr = {k: v for k, v in _line_colors(figs["throughput_vs_rate"]).items() if k in acc}
    assert len(acc) == 3 and tl == acc and thr == acc
    assert len(set(acc.values())) == 3
    runs, steps = tables.load_runs(swept)
    level_ax = [ax for ax in figs["adaptation_timeline"].axes if ax.get_ylabel().startswith(
        "level")]
    assert len(level_ax) == 1
    shown = {t.get_text() for t in level_ax[0].get_yticklabels()}
    ref = runs[(runs["method"] == "netsenseml") & (runs["rate_mbit"] == 20.0)].iloc[0]
    used = set(steps[(steps["run"] == ref["run"]) & steps["step_s"].notna()]["level"])
    assert shown == used
    for fig in figs.values():
        plt.close(fig)


def test_one_run_folder_gets_what_one_run_can_show(swept: Path, tmp_path: Path) -> None:
    run = next(p.parent for p in sorted(swept.rglob("summary.json")) if "netsenseml" in str(p))
    out = tmp_path / "figs"
    res = CliRunner().invoke(app, ["plot", str(run), "--figures", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "accuracy_vs_time.png").is_file() and (out / "adaptation_timeline.png").is_file()
    assert not (out / "throughput_vs_rate.png").exists()  # one rate: no rate axis
    assert not (out / "speedup.png").exists()  # one method: nothing to divide
    assert not (out / "speedup.csv").exists()  # no header-only table
    for f in out.glob("*.csv"):
        assert len(pd.read_csv(f)) > 0, f.name
    assert len(pd.read_csv(out / "timeline.csv")) > 10  # the timeline drawn has its rows


def test_compare_two_real_runs(swept: Path, tmp_path: Path) -> None:
    runs, _ = tables.load_runs(swept)
    a = runs[(runs["method"] == "allreduce") & (runs["rate_mbit"] == 20.0)].iloc[0]
    b = runs[(runs["method"] == "netsenseml") & (runs["rate_mbit"] == 200.0)].iloc[0]
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["compare", str(swept / a["run"]), str(swept / b["run"]),
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert [r["method"] for r in rows] == ["allreduce", "netsenseml"]  # argument order
    assert float(rows[0]["throughput"]) == pytest.approx(a["throughput"])
    assert float(rows[1]["throughput"]) == pytest.approx(b["throughput"])
    assert float(rows[1]["rate_mbit"]) == 200.0 and rows[0]["runs"] == "1"
    assert (out / "compare.png").stat().st_size > 10_000
    # a whole folder plus one of its runs again: the run counts in both groups, apart
    res = CliRunner().invoke(app, ["compare", str(swept), str(swept / b["run"]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(list(csv.DictReader(open(out / "compare.csv")))) == 7
    bad = CliRunner().invoke(app, ["compare", str(tmp_path / "nope")])
    assert bad.exit_code == 2


def test_compare_gives_intervals_over_seeds(swept: Path, tmp_path: Path) -> None:
    """Three seeds of one condition (the real run, copied as seeds 1 and 2 with their
    throughput scaled) are one group whose interval is the t-interval of the three."""
    import json
    import shutil

    runs, _ = tables.load_runs(swept)
    a = runs[(runs["method"] == "allreduce") & (runs["rate_mbit"] == 20.0)].iloc[0]
    folder = tmp_path / "seeds"
    shutil.copytree(swept / a["run"], folder / "s0")
    for seed, scale in ((1, 1.1), (2, 0.8)):
        d = folder / f"s{seed}"
        shutil.copytree(swept / a["run"], d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["seed"] = seed
        (d / "config.json").write_text(json.dumps(cfg))
        steps = pd.read_csv(d / "steps.csv")
        steps["samples"] = steps["samples"] * scale  # same times, scaled throughput
        steps.to_csv(d / "steps.csv", index=False)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["compare", str(folder), "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert len(rows) == 1 and rows[0]["runs"] == "3"
    want = tables.ci95([a["throughput"] * k for k in (1.0, 1.1, 0.8)])
    assert float(rows[0]["throughput"]) == pytest.approx(want[0], rel=1e-6)
    assert float(rows[0]["throughput_ci"]) == pytest.approx(want[1], rel=1e-6)
    assert "±" in res.output


def test_export_tensorboard_reads_back_with_tensorboards_reader(swept: Path,
                                                                tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    res = CliRunner().invoke(app, ["export", str(swept), "--tensorboard", str(tmp_path / "tb")])
    assert res.exit_code == 0, res.output
    runs, _ = tables.load_runs(swept)
    row = runs[(runs["method"] == "netsenseml") & (runs["rate_mbit"] == 20.0)].iloc[0]
    logdir = tmp_path / "tb" / swept.name / row["run"]
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "eval/accuracy", "step/step_time_s", "step/level_index",
            "step/kept_ratio", "network/configured_rate_mbit"} <= tags
    with open(swept / row["run"] / "steps.csv", newline="") as fh:
        raw = [r for r in csv.DictReader(fh) if r["rank"] == "0"]
    evals = {int(r["step"]): float(r["accuracy"]) for r in raw if r["accuracy"]}
    got = {e.step: e.value for e in acc.Scalars("eval/accuracy")}
    assert got.keys() == evals.keys()
    assert all(got[k] == pytest.approx(v, rel=1e-6) for k, v in evals.items())
    assert {e.value for e in acc.Scalars("network/configured_rate_mbit")} == {20.0}
    assert "topk" in acc.SummaryMetadata("step/level_index").summary_description
    assert len(list((tmp_path / "tb").rglob("events.out.tfevents.*"))) == 6
    missing = CliRunner().invoke(app, ["export", str(swept), "--mlflow", "x"])
    try:
        import mlflow  # noqa: F401
    except ImportError:
        assert missing.exit_code == 2 and "mlflow" in missing.output


def test_report_says_when_tta_is_not_a_convergence_measurement(swept: Path,
                                                               tmp_path: Path) -> None:
    """tiny evaluates every 10 steps toward 0.5: runs get there within their first
    evaluations, and the page says their TTA does not measure convergence."""
    from testbed.analysis import report

    runs, steps = tables.load_runs(swept)
    coarse = report.coarse_tta(runs, steps)
    with_raw = 0
    for r in coarse.itertuples():  # the evaluation count, recounted from steps.csv
        with open(swept / r.run / "steps.csv", newline="") as fh:
            evals = [row for row in csv.DictReader(fh) if row["rank"] == "0" and row["accuracy"]]
        first_hit = next(i for i, row in enumerate(evals, 1) if float(row["accuracy"]) >= 0.5)
        assert first_hit == r.evaluation <= report.MIN_EVALS_BEFORE_TARGET
        with_raw += 1
    assert with_raw >= 1
    page = report.build_report(swept, tmp_path / "r.html", tmp_path / "f", log=lambda m: None)
    assert "Not a convergence measurement" in page.read_text()
