"""A results tree loaded once: the object every table, figure, export and the report take.

Why: ``plot`` and ``report`` each read the run folders, and the report read them twice
(once to draw, once to render), and the speedup, ideal and crossover tables were rebuilt by
every figure that needed them. :class:`Results` reads the tree once
(``loading.load_all``: the one run reader), holds the runs and steps tables and the loaded
folders (``folders``: each run's config, summary, events, bottleneck ... read once, where
the tables, figures and report take them from), and builds each derived table on first use
(``speedup``, ``ideal``, ``crossover``, ``static_vs_oracle``, ``ramp``).

The stages hand each other data, Pantheon-style: parse (``loading``: folders -> RunData),
tables (``tables``, ``ideal``: RunData -> frames), plot (``plots``, ``figures``), report
(``report``); only the first opens a run's files.

It also carries what an analysis *left out*, as data a caller shows (the report's list, the
figures folder's ``skipped.csv``) rather than as log lines: the damaged run folders
(``excluded``), the degraded runs not counted (``degraded_left_out``; counted with
``include_degraded=True``, ``--include-degraded``), and the figures and tables not made, with
why (``skipped``, filled by ``plots.make_figures``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import ideal, loading, ramp, tables


@dataclass
class Results:
    root: Path
    runs: pd.DataFrame
    steps: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    #: the run folders as loaded (``loading.Folders``): every run's config, summary and
    #: other files, read once, for whatever needs more than the runs table
    folders: loading.Folders = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.folders is None:
            self.folders = loading.Folders(self.root)

    @classmethod
    def load(cls, root: Path, *, include_degraded: bool = False) -> Results:
        loaded = loading.load_all(Path(root))
        runs, steps = tables.tables_of(loaded)
        tables.include_degraded(runs, include_degraded)
        return cls(Path(root), runs, steps, folders=loading.Folders(Path(root), loaded.runs))

    @classmethod
    def of(cls, root: Path, runs: pd.DataFrame, steps: pd.DataFrame) -> Results:
        """From a runs table already loaded (``tables.load_runs``); its folders are loaded
        again only where a table or figure asks for one."""
        return cls(Path(root), runs, steps)

    # what was left out
    @property
    def excluded(self) -> list[loading.Excluded]:
        return loading.excluded_of(self.runs)

    @property
    def include_degraded(self) -> bool:
        return bool(self.runs.attrs.get("include_degraded"))

    @property
    def degraded_left_out(self) -> int:
        return tables.degraded_left_out(self.runs)

    def footer(self) -> str:
        """The line under every statistic table: seeds counted, runs left out and why."""
        bits = []
        n = self.degraded_left_out
        if n:
            bits.append(f"{n} degraded run{'s' if n != 1 else ''} (the host did not keep up "
                        "with the emulated accelerator) left out; --include-degraded counts "
                        "them")
        elif self.include_degraded and tables.is_degraded(self.runs).any():
            bits.append(f"{int(tables.is_degraded(self.runs).sum())} degraded run(s) "
                        "counted (--include-degraded)")
        rep = tables.repeated_runs(self.runs) if not self.runs.empty else 0
        if rep:
            bits.append(f"{rep} repeated run{'s' if rep != 1 else ''} of an already counted "
                        "seed left out (the latest run of each seed counts)")
        if self.excluded:
            bits.append(loading.exclusion_note(self.excluded))
        return "; ".join(bits)

    # the derived tables, each built once
    def _once(self, key: str, make: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def ok(self) -> pd.DataFrame:
        return self._once("ok", lambda: tables.ok_runs(self.runs))

    def ideal(self) -> pd.DataFrame:
        return self._once("ideal", lambda: ideal.ideal_table(self.folders, self.runs, self.steps))

    def speedup(self) -> pd.DataFrame:
        return self._once("speedup", lambda: tables.speedup_table(self.runs, self.ideal()))

    def crossover(self) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
        return self._once("crossover", lambda: ideal.crossover_tables(
            self.folders, self.runs, self.steps))

    def static_vs_oracle(self) -> pd.DataFrame:
        return self._once("static_vs_oracle", lambda: ideal.static_vs_oracle(
            self.folders, self.runs, self.steps))

    def throughput(self) -> pd.DataFrame:
        return self._once("throughput", lambda: tables.throughput_table(self.runs))

    def tta(self) -> pd.DataFrame:
        return self._once("tta", lambda: tables.tta_table(self.runs))

    def ramp(self) -> pd.DataFrame:
        """Throughput and level per window of a congestion ramp (``ramp.ramp_table``)."""
        return self._once("ramp", lambda: ramp.ramp_table(self.folders, self.runs))


def load(root: Path, *, include_degraded: bool = False) -> Results:
    return Results.load(root, include_degraded=include_degraded)
