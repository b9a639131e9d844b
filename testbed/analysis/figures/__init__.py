"""The figure registry: one module per figure; ``make_figures`` and the report loop over it.

The contract (all a new figure needs):

1. a module in this package that defines ``FIGURE = Figure(...)``::

       FIGURE = Figure(
           name="my_figure",                 # file stem: my_figure.png / .pdf
           title="What it shows",            # the report's heading
           caption="How to read it ...",     # the report's caption (units, what marks mean)
           needs="runs of kind tta",         # said when it is skipped: what runs it draws
           runs=select,                      # (Inputs) -> DataFrame of the runs it draws
           draw=draw,                        # (Inputs, runs) -> Figure or [Figure]
       )

2. its module name in :data:`MODULES` (the order of the report).

``runs`` picks rows of ``inputs.runs`` (one per run folder, :func:`tables.load_runs`); an
empty frame means "nothing to draw here" and the figure is skipped, saying ``needs``.
``draw`` gets the same :class:`Inputs` (runs, steps, the speedup table, the results root and
one colour per method shared by every figure) and returns the figure (or a list: one page
each); it may raise :class:`NoData` when the selected runs lack what it needs. A figure
that draws intervals attaches what it drew as ``fig.plotted`` (a DataFrame: one row per
cell or point, the value and its 95 % interval), so a test compares it with the tables'. Saving (PNG + PDF, atomically,
the note on damaged runs under it) is ``make_figures``' job, never a figure's.

The look every figure shares is in :mod:`testbed.analysis.figures.style` (one colour per
method, one line style or panel per rate, unique legend entries, units on every axis);
``tests/analysis/test_figures.py`` checks those properties on every registered figure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import loading
from testbed.analysis.figures import style


class NoData(RuntimeError):
    """The results hold nothing a figure can be drawn from (message says what is missing)."""


@dataclass
class Inputs:
    """What every figure draws from: all of it read from the run folders under ``root``."""

    root: Path
    runs: pd.DataFrame
    steps: pd.DataFrame
    speedup: pd.DataFrame
    colors: dict[str, Any] = field(default_factory=dict)
    #: the :class:`testbed.analysis.results.Results` these were taken from (its derived
    #: tables are built once and shared by every figure)
    results: Any = None
    #: the loaded run folders (``loading.Folders``): a run's config, events, bottleneck
    #: ... as the run reader read them; not given: loaded from ``root`` when asked
    folders: Any = None

    def __post_init__(self) -> None:
        if self.folders is None:
            self.folders = loading.Folders(self.root)

    def folder(self, run: str) -> loading.RunData:
        """The loaded folder of ``run`` (the runs table's ``run``)."""
        return self.folders[run]

    def color(self, method: str) -> Any:
        """The method's colour: ``style.method_color``, the same in every figure and set."""
        if method not in self.colors:
            self.colors[method] = style.method_color(method)
        return self.colors[method]

    def crossover(self) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
        """The crossover tables (``ideal.crossover_tables``), built once per results."""
        if self.results is None:
            raise NoData("no results object (make Inputs with plots.inputs)")
        return self.results.crossover()


@dataclass(frozen=True)
class Figure:
    """One registered figure (module docstring: the contract)."""

    name: str
    title: str
    caption: str
    needs: str
    runs: Callable[[Inputs], pd.DataFrame]
    draw: Callable[[Inputs, pd.DataFrame], Any]


#: The registered figures' modules, in the report's order.
MODULES = ("throughput", "accuracy", "timeline", "ramp", "speedup", "crossover")


def registry() -> tuple[Figure, ...]:
    """Every registered figure, in :data:`MODULES` order."""
    return tuple(importlib.import_module(f"{__name__}.{m}").FIGURE for m in MODULES)


def names() -> tuple[str, ...]:
    return tuple(f.name for f in registry())


def by_name(name: str) -> Figure:
    for f in registry():
        if f.name == name:
            return f
    raise KeyError(f"no figure {name!r}; registered: {', '.join(names())}")
