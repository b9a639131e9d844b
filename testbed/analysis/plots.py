"""Figures and CSV tables of a results folder: ``make_figures`` loops over the registry.

Each figure is one module of :mod:`testbed.analysis.figures` (its docstring is the
contract: name, title, caption, the runs it needs, how it draws); this module draws every
registered figure the results support, saves it (PNG + PDF), and writes the tables as CSV
(runs.csv, throughput.csv, tta.csv, speedup.csv with the oracle and ideal rows, ideal.csv,
crossover.csv, ideal_vs_fixed.csv, static_vs_oracle.csv (NetSenseML trained to the target at
static rates against the best fixed level's projected time there), and timeline.csv: the adaptation timeline's runs step by
step, testbed.analysis.timelines). A table with no rows is not
written (and an older copy of it in the same folder is removed): a header-only file says
nothing (``skipped.csv`` says which were not made and why). Every run folder can be plotted on its own (``netsense plot results/smoke/<run>``):
it gets the figures one run can show (its accuracy curve and its timeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import loading, tables, timelines
from testbed.analysis.figures import Inputs, NoData, registry, style
from testbed.analysis.figures import network as _network
from testbed.analysis.figures import throughput as _throughput
from testbed.analysis.figures import timeline as _timeline
from testbed.analysis.results import Results
from testbed.common import files

__all__ = ["FIGURES", "NoData", "Results", "ci95", "inputs", "line_rate_model", "make_figures",
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


def inputs(root: Path | Results, runs: pd.DataFrame | None = None,
           steps: pd.DataFrame | None = None) -> Inputs:
    """What every figure draws from: a loaded :class:`Results` (or, for a caller holding
    a runs table already, root + runs + steps)."""
    res = root if isinstance(root, Results) else Results.of(Path(root), runs, steps)
    methods = sorted(set(res.runs["method"].dropna())) if not res.runs.empty else []
    return Inputs(root=res.root, runs=res.runs, steps=res.steps, speedup=res.speedup(),
                  colors=style.method_colors(methods), results=res)


def make_figures(results: Path | Results, out: Path | None = None, *, log: Any = print,
                 verbose: bool = False) -> dict[str, list[Path]]:
    """Draw every registered figure that the results support; returns {name: [paths]}.

    ``results``: a loaded :class:`Results` (read once; the report passes the same object on)
    or a results folder (loaded here). What is not made -- a figure without data, a table
    with no rows, a rate the speedup table cannot compare -- is data, not a log line:
    ``results.skipped`` ({name: why}) and ``skipped.csv`` in the figures folder (removed
    when nothing was skipped); ``log`` hears of it only with ``verbose``. Damaged and failed
    runs are always said (through ``log``). Raises NoData if there are no run folders.
    """
    res = results if isinstance(results, Results) else Results.load(Path(results))
    root, runs, steps = res.root, res.runs, res.steps
    out = Path(out) if out else root / "figures"
    files.no_links_below(root, out, "--figures")  # never write through a link in the tree
    excluded = res.excluded
    for e in excluded:  # damaged folders: named, never silently dropped
        log(f"excluded damaged run {e.run}: {e.reason}")
    if not runs.empty:
        for _, r in runs[runs["status"] != "ok"].iterrows():
            log(f"not plotted: {r['run']} is {r['status']}"
                + (f" ({str(r['reason'])[:160]})" if r.get("reason") else ""))
        if res.degraded_left_out:
            log(f"left out: {res.degraded_left_out} degraded run(s) (--include-degraded "
                "counts them)")
    if runs.empty:
        raise NoData(f"no loadable run folders under {root} ({len(excluded)} damaged, "
                     "listed above)" if excluded else f"no run folders under {root}")
    out.mkdir(parents=True, exist_ok=True)
    note = loading.exclusion_note(excluded)
    inp = inputs(res)
    said = log if verbose else (lambda _m: None)
    skipped = res.skipped
    skipped.clear()
    written: dict[str, list[Path]] = {}
    tl = _timeline.select(inp)
    for where, why in inp.speedup.attrs.get("left_out", {}).items():
        skipped[f"speedup.csv: {where}"] = why
    xt, crossings = res.crossover()
    for c in crossings:
        said(f"crossover {c['experiment']}: {c['below']} below ~{c['crossover_mbit']:.0f} "
             f"Mbit/s, {c['above']} above (best changes between {c['between'][0]:g} and "
             f"{c['between'][1]:g} Mbit/s)")
    table_set = {
        "runs.csv": runs,
        "throughput.csv": res.throughput(),
        "tta.csv": res.tta(),
        "speedup.csv": inp.speedup,
        "timeline.csv": timelines.timeline_table(root, tl, steps, kinds=None)
        if not tl.empty else pd.DataFrame(),
        "ideal.csv": res.ideal(),
        "crossover.csv": xt,
        "ideal_vs_fixed.csv": tables.ideal_vs_fixed(inp.speedup),
        "static_vs_oracle.csv": res.static_vs_oracle(),
    }
    written["tables"] = []
    for fname, df in table_set.items():
        if df.empty:
            (out / fname).unlink(missing_ok=True)  # our own older copy would mislead
            skipped[fname] = "no rows"
            continue
        written["tables"].append(write_csv(df, out / fname))
    for fig in registry():
        try:
            sel = fig.runs(inp)
            if sel.empty:
                raise NoData(f"needs {fig.needs}")
            written[fig.name] = style.save(fig.draw(inp, sel), out, fig.name, note)
        except NoData as exc:
            for old in (*out.glob(f"{fig.name}.*"), *out.glob(f"{fig.name}-*.png")):
                if old.suffix in (".png", ".pdf"):
                    old.unlink(missing_ok=True)
            skipped[fig.name] = str(exc)
    for name, why in skipped.items():
        said(f"skipped {name}: {why}")
    if skipped:
        write_csv(pd.DataFrame([{"what": k, "why": v} for k, v in skipped.items()]),
                  out / "skipped.csv")
    else:
        (out / "skipped.csv").unlink(missing_ok=True)
    return written
