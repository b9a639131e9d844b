"""Figures and CSV tables of a results folder: ``make_figures`` loops over the registry.

Each figure is one module of :mod:`testbed.analysis.figures` (its docstring is the
contract: name, title, caption, the runs it needs, how it draws); this module draws every
registered figure the results support, saves it (PNG + PDF), and writes the tables as CSV
(runs.csv, throughput.csv, tta.csv, speedup.csv with the oracle and ideal rows, ideal.csv,
crossover.csv, ideal_vs_fixed.csv, static_vs_oracle.csv (NetSenseML trained to the target at
static rates against the best fixed level's projected time there), ramp.csv (a congestion
ramp's throughput and level per window of constant streams, testbed.analysis.ramp), and
timeline.csv: the adaptation timeline's runs step by step, testbed.analysis.timeline_csv). A table with no rows is not
written (and an older copy of it in the same folder is removed): a header-only file says
nothing (``skipped.csv`` says which were not made and why). Every run folder can be plotted on its own (``netsense plot results/smoke/<run>``):
it gets the figures one run can show (its accuracy curve and its timeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import loading, tables, timeline_csv
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
                  colors=style.method_colors(methods), results=res, folders=res.folders)


def tables_of(res: Results, inp: Inputs | None = None) -> dict[str, pd.DataFrame]:
    """{file name: table} of every CSV ``make_figures`` writes (module docstring); an empty
    table is one that is not written."""
    inp = inp or inputs(res)
    tl = _timeline.select(inp)
    return {
        "runs.csv": res.runs,
        "throughput.csv": res.throughput(),
        "tta.csv": res.tta(),
        "speedup.csv": inp.speedup,
        "timeline.csv": timeline_csv.timeline_table(res.folders, tl, res.steps, kinds=None)
        if not tl.empty else pd.DataFrame(),
        "ideal.csv": res.ideal(),
        "crossover.csv": res.crossover()[0],
        "ideal_vs_fixed.csv": tables.ideal_vs_fixed(inp.speedup),
        "static_vs_oracle.csv": res.static_vs_oracle(),
        "ramp.csv": res.ramp(),
    }


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
    out = Path(out) if out else res.root / "figures"
    files.no_links_below(res.root, out, "--figures")  # never write through a link in the tree
    _say_left_out(res, log)
    if res.runs.empty:
        raise NoData(f"no loadable run folders under {res.root} ({len(res.excluded)} "
                     "damaged, listed above)" if res.excluded
                     else f"no run folders under {res.root}")
    out.mkdir(parents=True, exist_ok=True)
    inp = inputs(res)
    said = log if verbose else (lambda _m: None)
    skipped = res.skipped
    skipped.clear()
    for where, why in inp.speedup.attrs.get("left_out", {}).items():
        skipped[f"speedup.csv: {where}"] = why
    for c in res.crossover()[1]:
        said(f"crossover {c['experiment']}: {c['below']} below ~{c['crossover_mbit']:.0f} "
             f"Mbit/s, {c['above']} above (best changes between {c['between'][0]:g} and "
             f"{c['between'][1]:g} Mbit/s)")
    written = {"tables": _write_tables(tables_of(res, inp), out, skipped)}
    written.update(_draw_figures(inp, out, loading.exclusion_note(res.excluded), skipped))
    for name, why in skipped.items():
        said(f"skipped {name}: {why}")
    if skipped:
        write_csv(pd.DataFrame([{"what": k, "why": v} for k, v in skipped.items()]),
                  out / "skipped.csv")
    else:
        (out / "skipped.csv").unlink(missing_ok=True)
    return written


def _say_left_out(res: Results, log: Any) -> None:
    """Damaged folders, failed runs and degraded runs left out: named, never silently
    dropped."""
    for e in res.excluded:
        log(f"excluded damaged run {e.run}: {e.reason}")
    if res.runs.empty:
        return
    for _, r in res.runs[res.runs["status"] != "ok"].iterrows():
        log(f"not plotted: {r['run']} is {r['status']}"
            + (f" ({str(r['reason'])[:160]})" if r.get("reason") else ""))
    if res.degraded_left_out:
        log(f"left out: {res.degraded_left_out} degraded run(s) (--include-degraded "
            "counts them)")


def _write_tables(table_set: dict[str, pd.DataFrame], out: Path,
                  skipped: dict[str, str]) -> list[Path]:
    """The tables with rows as CSV; an empty one is not written (and our own older copy,
    which would mislead, is removed) but named in ``skipped``."""
    paths = []
    for fname, df in table_set.items():
        if df.empty:
            (out / fname).unlink(missing_ok=True)
            skipped[fname] = "no rows"
            continue
        paths.append(write_csv(df, out / fname))
    return paths


def _draw_figures(inp: Inputs, out: Path, note: str,
                  skipped: dict[str, str]) -> dict[str, list[Path]]:
    """Every registered figure the inputs support, saved; one that cannot be drawn has its
    older files removed and is named in ``skipped`` with why."""
    written = {}
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
    return written
