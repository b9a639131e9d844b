"""The adaptation timeline draws the adaptive peers' levels beside NetSenseML's (issue 49):
every adaptive run of the seed and rate shown gets its own kept-ratio and level line, in
its method's colour; a peer's run folder alone draws its own.

The run folders are the committed fixture's on/off NetSenseML run (``make_fixture.py``),
copied as a StellaTrain and an Accordion run with levels of their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pandas as pd

from testbed.analysis import plots, tables
from testbed.analysis.figures import style
from testbed.analysis.figures.timeline import FIGURE

ONOFF = Path(__file__).resolve().parent / "data" / "results" / "fx" / "onoff" / "rate_mbit=500"


def _peer_copy(root: Path, method: str, levels: list[tuple[str, float]]) -> None:
    """The NetSenseML seed-0 run as ``method``'s, its steps sending ``levels`` in turn."""
    dst = root / "fx" / "onoff" / "rate_mbit=500" / f"{method}-s0"
    shutil.copytree(ONOFF / "netsenseml-s0", dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["method"] = method
    (dst / "config.json").write_text(json.dumps(cfg))
    summary = json.loads((dst / "summary.json").read_text())
    if "method" in summary:
        summary["method"] = method
        (dst / "summary.json").write_text(json.dumps(summary))
    steps = pd.read_csv(dst / "steps.csv")
    block = (steps["step"] - 1) // 10 % len(levels)
    steps["level"] = [levels[b][0] for b in block]
    steps["kept_ratio"] = [levels[b][1] for b in block]
    steps.to_csv(dst / "steps.csv", index=False)


def _tree(tmp_path: Path, with_netsenseml: bool = True) -> Path:
    root = tmp_path / "results"
    (root / "fx" / "onoff" / "rate_mbit=500").mkdir(parents=True)
    if with_netsenseml:
        shutil.copytree(ONOFF / "netsenseml-s0", root / "fx" / "onoff" / "rate_mbit=500" / "netsenseml-s0")
    _peer_copy(root, "stellatrain", [("topk", 0.01), ("topk", 0.05), ("none", 1.0)])
    _peer_copy(root, "accordion", [("none", 1.0), ("topk", 0.1)])
    return root


def _draw(root: Path) -> plt.Figure:
    runs, steps = tables.load_runs(root)
    inp = plots.inputs(root, runs, steps)
    sel = FIGURE.runs(inp)
    return FIGURE.draw(inp, sel)


def _axis(fig: plt.Figure, label: str) -> plt.Axes:
    (ax,) = [a for a in fig.axes if a.get_ylabel().startswith(label)]
    return ax


def _lines(ax: plt.Axes) -> dict[str, str]:
    """The labelled lines (the applied events' grey lines have none)."""
    return {line.get_label(): mcolors.to_hex(line.get_color()) for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def test_timeline_draws_every_adaptive_methods_levels(tmp_path: Path) -> None:
    fig = _draw(_tree(tmp_path))
    for label in ("level", "kept ratio"):
        lines = _lines(_axis(fig, label))
        want = {m: style.method_color(m).lower() for m in ("netsenseml", "stellatrain", "accordion")}
        assert lines == want, (label, lines)
    shown = {t.get_text() for t in _axis(fig, "level").get_yticklabels()}
    assert {"none", "topk"} <= shown  # the peers' levels, beside NetSenseML's own
    plt.close(fig)


def test_a_peer_alone_draws_its_own_levels(tmp_path: Path) -> None:
    root = tmp_path / "one"
    (root / "fx" / "onoff" / "rate_mbit=500").mkdir(parents=True)
    _peer_copy(root, "accordion", [("none", 1.0), ("topk", 0.1)])
    fig = _draw(root)
    assert set(_lines(_axis(fig, "level"))) == {"accordion"}
    assert {t.get_text() for t in _axis(fig, "level").get_yticklabels()} == {"none", "topk"}
    plt.close(fig)
