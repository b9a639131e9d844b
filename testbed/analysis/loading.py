"""Reading run folders for the analysis: every folder either loads whole or is excluded,
by name, with the reason.

Why a module of its own: results folders get damaged (a disk filled up, a copy cut short,
a run killed before atomic writes existed, someone's editor). A table that silently drops
a run, or a figure command that dies on one binary ``steps.csv``, both hide the damage. So
each folder is validated here, once, and the outcome is one of:

- a :class:`RunData` with parsed config, summary, sweep metadata and steps, whose
  ``status`` is the *true* one: a ``running`` record whose orchestrator is dead reads as
  ``failed`` with the reason (``testbed.common.provenance.stale_reason``);
- an :class:`Excluded` naming the folder and why (``summary.json is not valid JSON
  (truncated?)``, ``steps.csv lacks column(s) t, samples`` ...).

Callers (tables, plots, report) print one warning line per excluded run and say in the
figures and the report how many were excluded and why; they never crash on a damaged
folder. Sizes are bounded (``testbed.common.bounded``) so a huge file is a reason, not an
out-of-memory.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.common import bounded, files
from testbed.common.provenance import stale_reason
from workloads.records import LEGACY_STEP_KEYS

#: Columns every steps.csv of a finished run has (records.step_rows writes them).
STEP_COLUMNS = ("rank", "t", "samples")


@dataclass
class RunData:
    """One run folder that loaded whole, and the reader of its other files.

    config.json, summary.json, sweep.json and steps.csv are read when the folder loads;
    the others (events.csv, bottleneck.csv, start.json, ...) when first asked for, each
    once (bounded, ``testbed.common.bounded``), and what was made of them kept (the frame,
    the JSON object; not the text: a full run's bottleneck.csv is megabytes): every table,
    figure and the report take them from here and never open a run's file themselves. What
    it returns is shared: callers never change a frame or a dict in place.
    """

    path: Path
    run: str  # folder relative to the results root
    config: dict[str, Any]
    summary: dict[str, Any]
    meta: dict[str, Any]
    steps: pd.DataFrame
    status: str
    reason: str | None = None
    _files: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def _once(self, key: Any, read: Any) -> Any:
        if key not in self._files:
            try:
                self._files[key] = read()
            except Damaged as exc:  # remembered too: asked again, the same answer
                self._files[key] = exc
        got = self._files[key]
        if isinstance(got, Damaged):
            raise got
        return got

    def text(self, name: str) -> str:
        """The file ``name`` (relative to the folder) as text, read now (the views below
        keep what they made of it); Damaged when absent, over its bound (JSON files 16 MiB,
        others :data:`bounded.MAX_CSV_BYTES`) or not UTF-8."""
        bound = bounded.MAX_JSON_BYTES if name.endswith(".json") else bounded.MAX_CSV_BYTES
        if not (self.path / name).exists():
            raise Damaged(f"{name} missing")
        try:
            return bounded.read_text(self.path / name, bound, Path(name).name)
        except bounded.BoundError as exc:
            raise Damaged(str(exc)) from None

    def json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in ``name``; None when absent, damaged or not an object."""
        def read() -> dict[str, Any] | None:
            try:
                data = json.loads(self.text(name))
            except ValueError:  # Damaged too
                return None
            return data if isinstance(data, dict) else None

        return self._once(("json", name), read)

    def csv(self, name: str, columns: tuple[str, ...] = ()) -> pd.DataFrame:
        """``name`` as a frame with ``columns`` present and numeric (:func:`read_csv_file`);
        Damaged when absent or unusable. The file is parsed once whatever ``columns``."""
        frame = self._once(("csv", name), lambda: parse_csv(self.text(name), name))
        if not columns:
            return frame
        return self._once(("csv", name, columns),
                          lambda: numeric_columns(frame.copy(), name, columns))

    def records(self, name: str) -> list[dict[str, str]]:
        """``name``'s rows as the csv module reads them (every cell a string, as written);
        Damaged when absent or unreadable."""
        return self._once(("records", name),
                          lambda: list(csv.DictReader(io.StringIO(self.text(name)))))

    def start_record(self) -> dict[str, Any] | None:
        """Rank 0's start record (gradient bytes, world size ...): start.json of a packed
        folder, else the first ``start`` record of workers/rank0.jsonl; None without one."""
        return self._once("start", self._read_start)

    def _read_start(self) -> dict[str, Any] | None:
        start = self.json("start.json")
        if start:
            return start
        try:
            with open(self.path / "workers" / "rank0.jsonl") as fh:  # the first lines only
                for line in fh:
                    rec = json.loads(line)
                    if rec.get("kind") == "start":
                        return rec
        except (OSError, ValueError):
            pass
        return None


@dataclass
class Excluded:
    """A run folder left out of every table and figure, and why."""

    run: str
    reason: str


@dataclass
class Loaded:
    runs: list[RunData] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)


class Folders:
    """The run folders of a results tree by run id (the runs table's ``run``): where every
    table, figure and the report find a run's config, summary and other files.

    Holds what :func:`load_all` loaded; a run asked for that it does not hold (a runs table
    made elsewhere, or a root given as a path) is loaded then, once. A folder that does not
    load is a bare :class:`RunData` (no config, no summary, no steps) with its reason.
    """

    def __init__(self, root: Path, runs: list[RunData] | tuple[RunData, ...] = ()) -> None:
        self.root = Path(root)
        self._by: dict[str, RunData] = {r.run: r for r in runs}

    def __getitem__(self, run: str) -> RunData:
        run = str(run)
        if run not in self._by:
            d = self.root / run
            root = self.root if not Path(run).is_absolute() else d.parent
            item = load_folder(d, root) if d.is_dir() else Excluded(run, "no such folder")
            self._by[run] = item if isinstance(item, RunData) else RunData(
                d, run, {}, {}, {}, pd.DataFrame(), "missing", item.reason)
        return self._by[run]


def folder_of(where: RunData | Path | str) -> RunData:
    """``where`` as a :class:`RunData`: itself, or the run folder at that path, loaded."""
    if isinstance(where, RunData):
        return where
    d = Path(where)
    return Folders(d.parent)[d.name]


def folders_of(where: Folders | Path | str) -> Folders:
    """``where`` as :class:`Folders`: itself, or a results root whose runs load when asked."""
    return where if isinstance(where, Folders) else Folders(Path(where))


class Damaged(ValueError):
    """A file of a run folder that cannot be used; ``str()`` says which and why."""


def dilation_of(config: dict[str, Any]) -> float:
    """A run's time-dilation factor k (config.json's ``accelerator.dilation``); 1 for a
    native run or a config without it."""
    acc = config.get("accelerator") if isinstance(config.get("accelerator"), dict) else {}
    k = acc.get("dilation")
    return float(k) if isinstance(k, int | float) and k > 0 else 1.0


#: A run folder's own subfolders that hold what its workers wrote, never runs: an own job's
#: working directories (``hosts/<host>/``, where a job may well save a ``config.json``) and
#: the workers' logs.
RUN_SUBFOLDERS = ("hosts", "workers")


def find_run_dirs(root: Path) -> list[Path]:
    """Every folder under ``root`` holding a run (config.json or summary.json), sorted;
    folders under a ``figures`` folder, and what a run's workers wrote inside its folder
    (:data:`RUN_SUBFOLDERS`), are not runs."""
    root = Path(root)
    found = {p.parent for name in ("summary.json", "config.json") for p in root.rglob(name)}

    def inside_a_run(d: Path) -> bool:
        return any(p in found and d.relative_to(p).parts[0] in RUN_SUBFOLDERS
                   for p in d.parents if p != d and (p == root or root in p.parents))

    return sorted(d for d in found if "figures" not in d.relative_to(root).parts
                  and not inside_a_run(d))


def read_json_file(path: Path, *, required: bool) -> dict[str, Any]:
    """A JSON object file; {} when absent and not required; Damaged otherwise."""
    if not path.exists():
        if required:
            raise Damaged(f"{path.name} missing")
        return {}
    try:
        text = bounded.read_text(path, bounded.MAX_JSON_BYTES, path.name)
        data = json.loads(text)
    except bounded.BoundError as exc:
        raise Damaged(str(exc)) from None
    except ValueError:
        raise Damaged(f"{path.name} is not valid JSON (truncated?)") from None
    if not isinstance(data, dict):
        raise Damaged(f"{path.name} is not a JSON object")
    return data


def read_csv_file(path: Path, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A result CSV under the size bound, with ``columns`` present and numeric; Damaged
    otherwise. An empty file (header only) is an empty frame."""
    path = Path(path)
    try:
        text = bounded.read_text(path, bounded.MAX_CSV_BYTES, path.name)
    except bounded.BoundError as exc:
        raise Damaged(str(exc)) from None
    return parse_csv(text, path.name, columns)


def parse_csv(text: str, name: str, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A result CSV's text as a frame (:func:`read_csv_file`); ``name`` for the messages."""
    name = Path(name).name
    if "\0" in text:
        raise Damaged(f"{name} is binary, not CSV")
    if not text.strip():
        raise Damaged(f"{name} is empty (no header)")
    try:
        df = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Damaged(f"{name} cannot be parsed: {first}") from None
    return numeric_columns(df, name, columns)


def numeric_columns(df: pd.DataFrame, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """``df`` (changed in place) with ``columns`` present and numeric; Damaged otherwise."""
    name = Path(name).name
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise Damaged(f"{name} lacks column(s) {', '.join(missing)}")
    for c in columns:
        num = pd.to_numeric(df[c], errors="coerce")
        if len(df) and num.isna().all():
            raise Damaged(f"{name} column {c!r} holds no numbers")
        df[c] = num
    return df


def upgrade_step_columns(steps: pd.DataFrame) -> pd.DataFrame:
    """A steps.csv frame with the step stats of older runs under today's names and units
    (``workloads.records.LEGACY_STEP_KEYS``: ``est_rate_Bps`` -> ``est_rate_mbit`` ...), so
    run folders written before the rename load and plot unchanged."""
    old = [c for c in LEGACY_STEP_KEYS if c in steps.columns]
    if not old:
        return steps
    steps = steps.copy()
    for col in old:
        new, factor = LEGACY_STEP_KEYS[col]
        values = pd.to_numeric(steps.pop(col), errors="coerce") * factor
        if new not in steps.columns:
            steps[new] = values
    return steps
RUN_FILES = ("summary.json", "config.json", "sweep.json", "steps.csv", "events.csv",
             "link.csv", "bottleneck.csv")


def _refuse_outside(d: Path, root: Path) -> None:
    """Damaged when the folder or one of its files is a link leading outside ``root``: a
    results tree is read, and its figures and report shared, as what it holds itself."""
    for path in (d, *(d / name for name in RUN_FILES)):
        if path.is_symlink() and not files.inside(root, path):
            raise Damaged(f"{path.name} is a symbolic link out of the results folder; not read")


def load_folder(d: Path, root: Path) -> RunData | Excluded:
    """Validate and read one run folder (module doc)."""
    rel = str(Path(d).relative_to(root))
    try:
        _refuse_outside(d, root)
        summary = read_json_file(d / "summary.json", required=True)
        config = read_json_file(d / "config.json", required=True)
        meta = read_json_file(d / "sweep.json", required=False)
        status = str(summary.get("status") or "missing")
        reason = summary.get("reason")
        stale = stale_reason(summary)
        if stale is not None:
            status, reason = "failed", stale
        steps = pd.DataFrame()
        if status == "ok":
            if not (d / "steps.csv").exists():
                raise Damaged("steps.csv missing (status ok)")
            steps = read_csv_file(d / "steps.csv", STEP_COLUMNS)
        elif (d / "steps.csv").exists():
            try:  # a failed run's steps are shown where they can be, never required
                steps = read_csv_file(d / "steps.csv", STEP_COLUMNS)
            except Damaged:
                steps = pd.DataFrame()
    except Damaged as exc:
        return Excluded(rel, str(exc))
    except OSError as exc:
        return Excluded(rel, f"unreadable: {exc.strerror or exc}")
    return RunData(Path(d), rel, config, summary, meta, upgrade_step_columns(steps), status,
                   None if reason is None else str(reason))


def open_folder(d: Path) -> RunData:
    """One run folder as it is, whatever its status, for a command that looks at one
    folder (``netsense sensing``): config.json required (Damaged), summary.json and
    sweep.json when there, steps.csv as written (upgraded, no column required) when
    readable; its other files through the reader as for any folder."""
    d = Path(d)
    config = read_json_file(d / "config.json", required=True)
    summary = read_json_file(d / "summary.json", required=False)
    meta = read_json_file(d / "sweep.json", required=False)
    reason = summary.get("reason")
    folder = RunData(d, d.name, config, summary, meta, pd.DataFrame(),
                     str(summary.get("status") or "missing"),
                     None if reason is None else str(reason))
    try:
        folder.steps = upgrade_step_columns(folder.csv("steps.csv"))
    except Damaged:
        pass
    return folder


def load_all(root: Path) -> Loaded:
    """Every run folder under ``root``: loaded, or excluded with its reason."""
    root = Path(root)
    out = Loaded()
    for d in find_run_dirs(root):
        item = load_folder(d, root)
        (out.excluded if isinstance(item, Excluded) else out.runs).append(item)
    return out


def excluded_of(runs: pd.DataFrame) -> list[Excluded]:
    """The exclusions ``tables.load_runs`` attached to its runs table."""
    return list(runs.attrs.get("excluded", []))


def exclusion_note(excluded: list[Excluded], limit: int = 3) -> str:
    """One line for a figure caption or a report: how many runs were excluded and why."""
    if not excluded:
        return ""
    shown = "; ".join(f"{e.run}: {e.reason}" for e in excluded[:limit])
    more = f"; +{len(excluded) - limit} more" if len(excluded) > limit else ""
    n = len(excluded)
    return f"{n} damaged run{'s' if n != 1 else ''} excluded ({shown}{more})"
