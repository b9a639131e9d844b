"""The look every figure shares, so a set of figures reads as one paper's.

- one colour per method, the same in every figure and in every figure set, whatever else a
  folder holds: :data:`METHOD_COLORS` gives the built-in methods fixed colours (a method of
  the registry with an argument, ``topk-0.05``, takes its family's unless it has its own),
  any other method (a plug-in) a colour derived from its name (:func:`method_color`);
- one interval everywhere: the tables' 95 % Student-t interval over seeds
  (``testbed.common.stats``), said in each caption (:data:`INTERVAL`);
- time axes in seconds, "virtual s" where a run is dilated (:func:`time_unit`);
- one line style (and marker) per rate where rates share a panel (:func:`rate_styles`);
- legend entries unique (:func:`legend` drops repeats by label);
- every axis labelled with its unit in parentheses (the axis constants below);
- plain tick labels: no offset or scientific notation (``1e6`` floating over an axis), and
  log axes labelled with plain numbers (:func:`log_ticks`).
"""

from __future__ import annotations

import colorsys
import hashlib
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from netsenseml import methods  # noqa: E402 - the torch-free registry
from testbed.common import files  # noqa: E402

ADAPTIVE = methods.PROPOSED

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


#: The one place a method's colour is set (hex, so a test and a reader can see them). A
#: method with an argument is looked up as ``name-arg`` (``topk:0.01`` -> ``topk-0.01``, the
#: run folders' spelling too). The nine methods the evaluations compare take the Okabe-Ito
#: palette and Paul Tol's muted one (the adaptive peers StellaTrain and Accordion a violet
#: and a magenta found by the same measure), chosen so that every two stay apart also for a reader
#: with red-green or blue-yellow colour blindness (tests/analysis/test_colors.py measures
#: it: CIELAB distance, with the colour-vision deficiencies simulated); the rarer ones
#: (bf16, random-k, top-k 0.5 % and 0.1 %, DGC 0.1 %) differ from all of them in ordinary vision.
METHOD_COLORS: dict[str, str] = {
    "netsenseml": "#0072B2",        # blue
    "netsenseml-paper": "#88CCEE",  # light blue (the prototype's rule: NetSenseML's kin)
    "allreduce": "#000000",         # black (dense fp32, the reference)
    "fp16": "#E69F00",              # orange
    "int8": "#009E73",              # bluish green
    "topk": "#D55E00",              # vermillion (the family; topk-0.01 is the common one)
    "topk-0.01": "#D55E00",
    "topk-0.1": "#DDCC77",          # sand
    "topk-0.005": "#CC79A7",        # reddish purple
    "topk-0.001": "#663333",        # dark brown
    "dgc": "#332288",               # indigo (the family; dgc-0.01 is the common one)
    "dgc-0.001": "#EE6677",         # rose
    "powersgd": "#882255",          # wine
    "bf16": "#777777",              # grey
    "randomk": "#BBBBBB",           # light grey
    "stellatrain": "#6600EE",       # violet (adaptive peer: bandwidth-driven top-k)
    "accordion": "#EE44EE",         # magenta (adaptive peer: gradient-norm-driven levels)
}

#: The interval of every figure and table, as captions say it.
INTERVAL = "95 % Student-t interval over seeds (the tables' testbed.common.stats.ci95)"


def method_color(method: str) -> str:
    """The method's colour: its own in :data:`METHOD_COLORS` (``name:arg`` looked up as
    ``name-arg``), else its family's (the name before the first ``-`` or ``:``), else one
    derived from the name (a plug-in, ``pkg.mod:Name``: the same in every figure and every
    run of the code, never a neighbour's by position)."""
    m = str(method)
    family = re.split(r"[-:]", m, maxsplit=1)[0]
    if "." not in family:  # a registered name (a plug-in's module path has a dot)
        key = m.replace(":", "-", 1)
        if key in METHOD_COLORS:
            return METHOD_COLORS[key]
        if family in METHOD_COLORS:
            return METHOD_COLORS[family]
    h = int(hashlib.sha1(m.encode()).hexdigest()[:8], 16)
    r, g, b = colorsys.hsv_to_rgb((h % 360) / 360, 0.55 + (h >> 9) % 30 / 100,
                                  0.55 + (h >> 17) % 25 / 100)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def method_colors(methods: list[str]) -> dict[str, Any]:
    """{method: colour} (:func:`method_color`), the same whatever else is in the list."""
    return {m: method_color(m) for m in dict.fromkeys(methods)}


def time_unit(runs: Any) -> str:
    """"virtual s" when any of ``runs`` (a runs table) was dilated (k != 1), else "s"."""
    k = runs.get("dilation") if hasattr(runs, "get") else None
    if k is None:
        return "s"
    k = k.dropna().astype(float)
    return "virtual s" if ((k != 1.0).any()) else "s"


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
    """PNG + PDF, atomically; ``note`` (the damaged runs left out) under the figure.

    ``fig`` may be a list of figures (one page each, e.g. one speedup grid per experiment):
    ``name.png`` is the first, ``name-2.png`` ... the others; ``name.pdf`` has them all, one
    page each. Older ``name-N.png`` files beyond the new count are removed."""
    from matplotlib.backends.backend_pdf import PdfPages

    figs = list(fig) if isinstance(fig, list | tuple) else [fig]
    paths = []
    for f in figs:
        if note:
            f.text(0.01, 0.0, note, fontsize=7, color="firebrick", ha="left", va="top",
                   wrap=True)
    for i, f in enumerate(figs):
        p = Path(out) / (f"{name}.png" if i == 0 else f"{name}-{i + 1}.png")
        with files.atomic_path(p) as tmp:
            f.savefig(tmp, dpi=130, bbox_inches="tight", format="png")
        paths.append(p)
    for old in Path(out).glob(f"{name}-*.png"):
        suffix = old.stem[len(name) + 1:]
        if suffix.isdigit() and int(suffix) > len(figs):
            old.unlink(missing_ok=True)
    p = Path(out) / f"{name}.pdf"
    with files.atomic_path(p) as tmp, PdfPages(tmp) as pdf:
        for f in figs:
            pdf.savefig(f, bbox_inches="tight")
    paths.append(p)
    for f in figs:
        plt.close(f)
    return paths
