"""NetSenseML's speedup over each baseline per rate, throughput and time to accuracy, as
heat maps on one shared colour scale (log, symmetric around 1x), the seed range in each cell.

Drawn only where the speedup table has rows: a rate with NetSenseML and a baseline finished.
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


def select(inp: Inputs) -> pd.DataFrame:
    if inp.speedup.empty:
        return inp.runs.iloc[0:0]
    r = tables.ok_runs(inp.runs)
    return r[r["experiment"].isin(set(inp.speedup["experiment"]))]


def _seed_range(runs: pd.DataFrame, exp: str, rate: float, base: str, col: str
                ) -> tuple[float, float] | None:
    """Min and max over seeds of the per-seed speedup (runs paired by seed), or None."""
    r = runs[(runs["experiment"] == exp) & (runs["rate_mbit"] == rate)]
    a = r[r["method"] == style.ADAPTIVE].set_index("seed")
    b = r[r["method"] == base].set_index("seed")
    src = "throughput" if col == "throughput_speedup" else "tta_s"
    seeds = a.index.intersection(b.index)
    if len(seeds) < 2:
        return None
    va, vb = a.loc[seeds, src].astype(float), b.loc[seeds, src].astype(float)
    ratio = (va / vb) if src == "throughput" else (vb / va)
    ratio = ratio.replace([np.inf, -np.inf], np.nan).dropna()
    return (float(ratio.min()), float(ratio.max())) if len(ratio) >= 2 else None


def colorbar_ticks(span: float) -> list[float]:
    """Plain ticks inside [1/span, span]: at least 1x and one on each side when possible."""
    inside = [t for t in TICKS if 1 / span <= t <= span]
    if len(inside) > 9:  # wide scale: the 1-2-5 ones
        inside = [t for t in inside if f"{t:g}".lstrip("0.").rstrip("0") in ("1", "2", "5")
                  or t == 1.0]
    return inside


def draw(inp: Inputs, sel: pd.DataFrame) -> plt.Figure:
    sp = inp.speedup
    if sp.empty:
        raise NoData("no rate with both netsenseml and a baseline finished")
    exps = list(dict.fromkeys(sp["experiment"]))
    allv = sp[["throughput_speedup", "tta_speedup"]].to_numpy(dtype=float).ravel()
    allv = allv[np.isfinite(allv) & (allv > 0)]
    span = max(1.25, float(np.exp(np.abs(np.log(allv)).max())) * 1.05) if len(allv) else 2.0
    norm = matplotlib.colors.LogNorm(vmin=1 / span, vmax=span)
    fig, axes = plt.subplots(len(exps), 2, figsize=(11, 0.8 + 0.55 * sp["baseline"].nunique()
                                                     * len(exps) + 1.6 * len(exps)),
                             squeeze=False, layout="constrained")
    im = None
    for row, exp in zip(axes, exps, strict=True):
        e = sp[sp["experiment"] == exp]
        for ax, col, title in ((row[0], "throughput_speedup", "throughput speedup"),
                               (row[1], "tta_speedup", "time-to-accuracy speedup")):
            piv = e.pivot_table(index="baseline", columns="rate_mbit", values=col,
                                aggfunc="first", dropna=False)
            vals = piv.to_numpy(dtype=float)
            shown = np.where(np.isfinite(vals) & (vals > 0), vals, np.nan)
            im = ax.imshow(shown, cmap="RdYlGn", norm=norm, aspect="auto")
            ax.set_xticks(range(piv.shape[1]), [f"{c:g}" for c in piv.columns])
            ax.set_yticks(range(piv.shape[0]), list(piv.index), fontsize=8)
            for i, base in enumerate(piv.index):
                for j, rate in enumerate(piv.columns):
                    v = vals[i, j]
                    txt = f"{v:.2f}x" if np.isfinite(v) else "n/a"
                    rng = _seed_range(sel, exp, rate, base, col) if np.isfinite(v) else None
                    if rng is not None:
                        txt += f"\n[{rng[0]:.2f}-{rng[1]:.2f}]"
                    ax.text(j, i, txt, ha="center", va="center", fontsize=7)
            ax.set_xlabel(style.RATE_AXIS)
            ax.set_ylabel("baseline (method)")
            ax.set_title(f"{exp}: NetSenseML {title}", fontsize=9)
    if im is not None:
        ticks = colorbar_ticks(span)
        cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
        cb.ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
        cb.ax.yaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(
            [f"{t:g}x" for t in ticks]))
        cb.ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        cb.set_label("speedup (x, one log scale for all panels)")
    fig.suptitle("NetSenseML vs each baseline (>1x = NetSenseML faster; [min-max] over seeds; "
                 "n/a = target not reached by one side)", fontsize=9)
    return fig


FIGURE = Figure(
    name="speedup",
    title="Speedup of NetSenseML over each baseline",
    caption="NetSenseML's throughput and time-to-accuracy speedup over each baseline per "
    "rate (one colour scale, log, centred on 1x); [min-max] over seeds when there are two "
    "or more; n/a where one side did not reach the target.",
    needs="a rate at which netsenseml and a baseline both finished",
    runs=select,
    draw=draw,
)
