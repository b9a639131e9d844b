"""The look every figure shares, so a set of figures reads as one paper's.

- one colour per method, the same in every figure (NetSenseML first, in the first colour;
  the others in sorted order), from :func:`method_colors`;
- one line style (and marker) per rate where rates share a panel (:func:`rate_styles`);
- legend entries unique (:func:`legend` drops repeats by label);
- every axis labelled with its unit in parentheses (the axis constants below);
- plain tick labels: no offset or scientific notation (``1e6`` floating over an axis), and
  log axes labelled with plain numbers (:func:`log_ticks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from testbed.common import files  # noqa: E402

ADAPTIVE = "netsenseml"

RATE_AXIS = "bottleneck rate (Mbit/s)"
THROUGHPUT_AXIS = "training throughput (samples/s, log)"
TRAIN_TIME_AXIS = "training time (s since the first training step)"
ACCURACY_AXIS = "held-out accuracy (fraction correct)"
LOSS_AXIS = "training loss (nats, 5-step mean)"
STEP_TIME_AXIS = "step time (s, log)"
KEPT_AXIS = "kept ratio\n(fraction, log)"
LEVEL_AXIS = "level\n(wire format)"
STREAMS_AXIS = "iperf3 streams\n(count)"
QUEUE_AXIS = "queue\n(packets)"
NETWORK_AXIS = "rate (Mbit/s)"

_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def method_colors(methods: list[str]) -> dict[str, Any]:
    """One colour per method: netsenseml in tab10's first, the others in sorted order."""
    others = sorted({m for m in methods if m != ADAPTIVE})
    cmap = plt.get_cmap("tab10" if len(others) < 10 else "tab20")
    n = cmap.N
    out = {m: cmap(i % n) for i, m in enumerate(others, start=1)}
    out[ADAPTIVE] = cmap(0)
    return out


def rate_styles(rates: list[float]) -> dict[float, tuple[Any, str]]:
    """(line style, marker) per rate, lowest rate solid."""
    ordered = sorted({float(r) for r in rates if r == r})
    return {r: (_LINESTYLES[i % len(_LINESTYLES)], _MARKERS[i % len(_MARKERS)])
            for i, r in enumerate(ordered)}


def rate_text(rate: float) -> str:
    return f"{rate:g} Mbit/s"


def legend(ax: Any, **kw: Any) -> Any:
    """The axis' legend with each label once (the first handle of a label wins)."""
    handles, labels = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, lab in zip(handles, labels, strict=True):
        if lab and not lab.startswith("_") and lab not in seen:
            seen[lab] = h
    if not seen:
        return None
    kw.setdefault("fontsize", 7)
    return ax.legend(list(seen.values()), list(seen.keys()), **kw)


def plain(ax: Any, axis: str = "y") -> None:
    """Linear axis with plain numbers: no offset text, no scientific notation."""
    fmt = matplotlib.ticker.ScalarFormatter(useOffset=False)
    fmt.set_scientific(False)
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def log_ticks(ax: Any, axis: str = "y") -> None:
    """Log axis with plain-number labels, also when the data span less than a decade."""
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if hi / max(lo, 1e-12) < 10:  # too few major ticks: label the minor ones too
        a.set_minor_locator(matplotlib.ticker.LogLocator(base=10, subs="auto"))
        a.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis=axis, which="minor", labelsize=7)
    else:
        a.set_minor_formatter(matplotlib.ticker.NullFormatter())


def save(fig: Any, out: Path, name: str, note: str = "") -> list[Path]:
    """PNG + PDF, atomically; ``note`` (the damaged runs left out) under the figure."""
    paths = []
    if note:
        fig.text(0.01, 0.0, note, fontsize=7, color="firebrick", ha="left", va="top",
                 wrap=True)
    for ext in ("png", "pdf"):
        p = Path(out) / f"{name}.{ext}"
        with files.atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=130, bbox_inches="tight", format=ext)
        paths.append(p)
    plt.close(fig)
    return paths
