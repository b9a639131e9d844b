"""Figures and CSV tables of a results folder: ``make_figures`` loops over the registry.

Each figure is one module of :mod:`testbed.analysis.figures` (its docstring is the
contract: name, title, caption, the runs it needs, how it draws); this module draws every
registered figure the results support, saves it (PNG + PDF), and writes the tables as CSV
(runs.csv, throughput.csv, tta.csv, speedup.csv with the oracle and ideal rows, ideal.csv,
crossover.csv, ideal_vs_fixed.csv, static_vs_oracle.csv (NetSenseML trained to the target at
static rates against the best fixed level's projected time there), and timeline.csv: the adaptation timeline's runs step by
step, testbed.analysis.timelines). A table with no rows is not
written (and an older copy of it in the same folder is removed): a header-only file says
nothing. Every run folder can be plotted on its own (``netsense plot results/smoke/<run>``):
it gets the figures one run can show (its accuracy curve and its timeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import ideal, loading, tables, timelines
from testbed.analysis.figures import Inputs, NoData, registry, style
from testbed.analysis.figures import network as _network
from testbed.analysis.figures import throughput as _throughput
from testbed.analysis.figures import timeline as _timeline
from testbed.common import files

__all__ = ["FIGURES", "NoData", "ci95", "inputs", "line_rate_model", "make_figures",
           "network_series", "read_events"]

#: Names of the registered figures, in the report's order.
FIGURES = tuple(f.name for f in registry())

# kept for callers of the former one-module layout
ci95 = tables.ci95
network_series = _network.network_series
read_events = _network.read_events
line_rate_model = _throughput.line_rate_model


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    with files.atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return path


def inputs(root: Path, runs: pd.DataFrame, steps: pd.DataFrame) -> Inputs:
    """What every figure draws from, with one colour per method across all of them."""
    methods = sorted(set(runs["method"].dropna())) if not runs.empty else []
    speedup = tables.speedup_table(runs, ideal.ideal_table(root, runs, steps))
    return Inputs(root=Path(root), runs=runs, steps=steps, speedup=speedup,
                  colors=style.method_colors(methods))


def make_figures(root: Path, out: Path | None = None, *, log: Any = print
                 ) -> dict[str, list[Path]]:
    """Draw every registered figure that the results support; returns {name: [paths]}.

    A figure without data is skipped with a message (through ``log``: ``skipped NAME:
    why``) rather than drawn empty. Raises NoData if there are no run folders at all.
    """
    root = Path(root)
    out = Path(out) if out else root / "figures"
    files.no_links_below(root, out, "--figures")  # never write through a link in the tree
    runs, steps = tables.load_runs(root)
    excluded = loading.excluded_of(runs)
    for e in excluded:  # damaged folders: named, never silently dropped
        log(f"excluded damaged run {e.run}: {e.reason}")
    if not runs.empty:
        for _, r in runs[runs["status"] != "ok"].iterrows():
            log(f"not plotted: {r['run']} is {r['status']}"
                + (f" ({str(r['reason'])[:160]})" if r.get("reason") else ""))
    if runs.empty:
        raise NoData(f"no loadable run folders under {root} ({len(excluded)} damaged, "
                     "listed above)" if excluded else f"no run folders under {root}")
    out.mkdir(parents=True, exist_ok=True)
    note = loading.exclusion_note(excluded)
    inp = inputs(root, runs, steps)
    written: dict[str, list[Path]] = {}
    tl = _timeline.select(inp)
    for where, why in inp.speedup.attrs.get("left_out", {}).items():
        log(f"not in speedup.csv: {where}: {why}")
    xt, crossings = ideal.crossover_tables(root, runs, steps)
    for c in crossings:
        log(f"crossover {c['experiment']}: {c['below']} below ~{c['crossover_mbit']:.0f} "
            f"Mbit/s, {c['above']} above (best changes between {c['between'][0]:g} and "
            f"{c['between'][1]:g} Mbit/s)")
    table_set = {
        "runs.csv": runs,
        "throughput.csv": tables.throughput_table(runs),
        "tta.csv": tables.tta_table(runs),
        "speedup.csv": inp.speedup,
        "timeline.csv": timelines.timeline_table(root, tl, steps, kinds=None)
        if not tl.empty else pd.DataFrame(),
        "ideal.csv": ideal.ideal_table(root, runs, steps),
        "crossover.csv": xt,
        "ideal_vs_fixed.csv": tables.ideal_vs_fixed(inp.speedup),
        "static_vs_oracle.csv": ideal.static_vs_oracle(root, runs, steps),
    }
    written["tables"] = []
    for fname, df in table_set.items():
        if df.empty:
            (out / fname).unlink(missing_ok=True)  # our own older copy would mislead
            log(f"not written: {fname} (no rows)")
            continue
        written["tables"].append(write_csv(df, out / fname))
    for fig in registry():
        try:
            sel = fig.runs(inp)
            if sel.empty:
                raise NoData(f"needs {fig.needs}")
            written[fig.name] = style.save(fig.draw(inp, sel), out, fig.name, note)
        except NoData as exc:
            for ext in ("png", "pdf"):
                (out / f"{fig.name}.{ext}").unlink(missing_ok=True)
            log(f"skipped {fig.name}: {exc}")
    return written
