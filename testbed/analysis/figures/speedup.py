"""NetSenseML's speedup over each baseline per rate, throughput and time to accuracy: one
rate x baseline grid per experiment (one page each: ``speedup.png``, ``speedup-2.png`` ...,
all in ``speedup.pdf``), each cell the speedup table's ratio and its 95 % interval
(``tables.speedup_table``: the delta-method t-interval of ``testbed.common.stats``), the
same numbers as speedup.csv and the report.

Colour: a diverging scale (log, centred on 1x: green faster, red slower) spanning the data
of all grids (the largest distance from 1x, at least 1.25x), shared by every page so a colour
means one speedup everywhere. Drawn only where the speedup table has rows.
"""

from __future__ import annotations

import matplotlib.colors
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from testbed.analysis import tables
from testbed.analysis.figures import Figure, Inputs, NoData, style

#: Candidate colour-bar ticks; those inside the scale are shown, as plain "1.5x" labels.
TICKS = (0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0,
         10.0, 20.0, 50.0)
PANELS = (("throughput_speedup", "throughput speedup"),
          ("tta_speedup", "time-to-accuracy speedup"))


def select(inp: Inputs) -> pd.DataFrame:
    if inp.speedup.empty:
        return inp.runs.iloc[0:0]
    r = tables.ok_runs(inp.runs)
    return r[r["experiment"].isin(set(inp.speedup["experiment"]))]


def colorbar_ticks(span: float) -> list[float]:
    """Plain ticks inside [1/span, span]: at least 1x and one on each side when possible."""
    inside = [t for t in TICKS if 1 / span <= t <= span]
    if len(inside) > 9:  # wide scale: the 1-2-5 ones
        inside = [t for t in inside if f"{t:g}".lstrip("0.").rstrip("0") in ("1", "2", "5")
                  or t == 1.0]
    return inside


def scale_span(sp: pd.DataFrame) -> float:
    """The colour scale's reach from 1x: the data's farthest value (5 % margin), >= 1.25."""
    allv = sp[[c for c, _ in PANELS]].to_numpy(dtype=float).ravel()
    allv = allv[np.isfinite(allv) & (allv > 0)]
    return max(1.25, float(np.exp(np.abs(np.log(allv)).max())) * 1.05) if len(allv) else 1.25


def _baseline_label(row: pd.Series) -> str:
    if row["baseline"] == tables.ORACLE:
        return "oracle (best fixed)"
    return str(row["baseline"])


def draw(inp: Inputs, sel: pd.DataFrame) -> list[plt.Figure]:
    sp = inp.speedup
    if sp.empty:
        raise NoData("no rate with both netsenseml and a baseline finished")
    span = scale_span(sp)
    norm = matplotlib.colors.LogNorm(vmin=1 / span, vmax=span)
    ticks = colorbar_ticks(span)
    pages = []
    for exp in dict.fromkeys(sp["experiment"]):
        e = sp[sp["experiment"] == exp]
        bases = list(dict.fromkeys(e["baseline"]))
        rates = sorted(e["rate_mbit"].dropna().unique()) or [np.nan]
        width = min(13.0, 2.5 + 2 * 1.25 * max(2, len(rates)))
        height = min(9.0, 1.6 + 0.5 * len(bases))
        fig, axes = plt.subplots(1, 2, figsize=(width, height), squeeze=False,
                                 layout="constrained")
        plotted = []
        im = None
        for ax, (col, title) in zip(axes[0], PANELS, strict=True):
            vals = np.full((len(bases), len(rates)), np.nan)
            for i, base in enumerate(bases):
                for j, rate in enumerate(rates):
                    row = e[(e["baseline"] == base) & ((e["rate_mbit"] == rate) | (
                        e["rate_mbit"].isna() & pd.isna(rate)))]
                    if row.empty:
                        continue
                    r = row.iloc[0]
                    v, lo, hi = (float(r[col]), float(r[f"{col}_lo"]), float(r[f"{col}_hi"]))
                    vals[i, j] = v if np.isfinite(v) and v > 0 else np.nan
                    txt = f"{v:.2f}x" if np.isfinite(v) else "n/a"
                    if np.isfinite(v) and np.isfinite(lo):
                        txt += f"\n[{lo:.2f}, {hi:.2f}]"
                    ax.text(j, i, txt, ha="center", va="center", fontsize=7.5)
                    plotted.append({"experiment": exp, "rate_mbit": rate, "baseline": base,
                                    "metric": col, "value": v, "lo": lo, "hi": hi})
            im = ax.imshow(vals, cmap="RdYlGn", norm=norm, aspect="auto")
            ax.set_xticks(range(len(rates)), [f"{c:g}" for c in rates])
            ax.set_yticks(range(len(bases)),
                          [_baseline_label(e[e["baseline"] == b].iloc[0]) for b in bases],
                          fontsize=8)
            ax.set_xlabel(style.RATE_AXIS)
            ax.set_ylabel("baseline (method)")
            ax.set_title(title, fontsize=9)
        if im is not None:
            cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.9)
            cb.ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
            cb.ax.yaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(
                [f"{t:g}x" for t in ticks]))
            cb.ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            cb.set_label("speedup (x, log, centred on 1x)")
        seeds = int(e["netsenseml_seeds"].max()) if "netsenseml_seeds" in e else 0
        fig.suptitle(f"{exp}: NetSenseML vs each baseline (>1x: NetSenseML faster); "
                     f"[95 % t-interval], up to {seeds} seeds; n/a: target not reached "
                     "by every seed of one side", fontsize=9)
        fig.plotted = pd.DataFrame(plotted)
        pages.append(fig)
    return pages


FIGURE = Figure(
    name="speedup",
    title="Speedup of NetSenseML over each baseline",
    caption="One grid per experiment: NetSenseML's throughput and time-to-accuracy speedup "
    "over each baseline per rate, with its 95 % t-interval over seeds in brackets (the "
    "speedup table's, delta method on the log ratio); one diverging colour scale for all "
    "grids, log, centred on 1x and spanning the data; n/a where one side did not reach the "
    "target in every seed.",
    needs="a rate at which netsenseml and a baseline both finished",
    runs=select,
    draw=draw,
)
