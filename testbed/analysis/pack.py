"""Compact copies of run folders, for committing an evaluation: ``netsense pack``.

Why: a results tree is hundreds of MB (per-step rows of every rank, worker logs, packet
captures); the committed results were figures and CSVs only, so ``report``, ``compare`` and
``plot`` could not read anything a fresh clone holds. A packed run folder is a run folder
every command reads, a few kB to tens of kB:

- ``config.json``, ``summary.json`` (plus ``"packed"``: what was dropped and how many rows
  each file had), ``sweep.json``, ``events.csv``, ``link.csv``: copied whole;
- ``steps.csv``: every evaluation row (any rank) and rank 0's training rows at most
  ``rank0_rows`` (evenly spaced, the first and last always, every evaluated step kept); the
  other ranks' training rows are dropped. A kept rank-0 row's ``samples`` is the sum over the
  steps it stands for (since the previous kept row), so throughput (samples after the first
  step / time from the first to the last step) is the same number as on the full rows; time
  to accuracy and final accuracy come from evaluation rows, all kept. The other per-step
  columns (step_s, level, ...) are the kept step's own: a sample of the run, not a mean;
- ``bottleneck.csv`` and ``host.csv``: at most ``series_rows`` rows per watched link (evenly
  spaced);
- ``convergence.json``: the convergence table the scenario named (config.json's path is the
  building machine's), so the crossover is drawn from the packed copy;
- ``start.json``: rank 0's start record (the gradient's size, for the line-rate model).

Left out: ``workers/`` (logs, raw records), ``cross/`` (each flow's report is in
summary.json's ``network.cross_traffic``), packet captures, pids.json.

An evaluation is packed into a folder of its own and *replaced* when re-run (``--replace``),
so the repository holds one copy per evaluation, not one per re-run.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis import loading
from testbed.common import files, metrics

WHOLE = ("config.json", "sweep.json", "events.csv", "link.csv")
RANK0_ROWS = 400
SERIES_ROWS = 600


class PackError(ValueError):
    """The source or destination cannot be packed into (``str()`` says why)."""


def _even(n: int, keep: int) -> np.ndarray:
    """Indices 0..n-1, at most ``keep`` of them evenly spaced, first and last included."""
    if n <= keep:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, keep).round().astype(int))


def pack_steps(steps: pd.DataFrame, rank0_rows: int = RANK0_ROWS) -> pd.DataFrame:
    """The compact steps.csv (module doc)."""
    if steps.empty or "rank" not in steps.columns:
        return steps
    acc = pd.to_numeric(steps["accuracy"], errors="coerce") if "accuracy" in steps.columns \
        else pd.Series(np.nan, index=steps.index)
    is_eval = acc.notna()
    samples = pd.to_numeric(steps["samples"], errors="coerce") if "samples" in steps.columns \
        else pd.Series(np.nan, index=steps.index)
    first = steps["rank"].min()
    train0 = steps[(steps["rank"] == first) & samples.notna()].sort_values("t", kind="stable")
    keep = set(train0.index[_even(len(train0), rank0_rows)]) | set(train0.index[is_eval[
        train0.index].to_numpy()])
    kept = train0.loc[[i for i in train0.index if i in keep]].copy()
    # samples of each kept row: the sum since the previous kept row (throughput unchanged)
    csum = samples[train0.index].cumsum()
    at = csum[kept.index].to_numpy()
    kept["samples"] = np.diff(np.concatenate([[0.0], at]))
    kept.loc[kept.index[0], "samples"] = samples[kept.index[0]]
    others = steps[is_eval & ~steps.index.isin(train0.index)]
    extra = steps[(steps["rank"] == first) & samples.isna()]  # evaluation-only rows
    out = pd.concat([kept, others, extra.loc[~extra.index.isin(others.index)]])
    out = out.sort_values(["t", "rank"], kind="stable")
    if "samples" in out.columns and (out["samples"].dropna() % 1 == 0).all():
        out["samples"] = out["samples"].astype("Int64")
    return out


def pack_series(df: pd.DataFrame, rows: int = SERIES_ROWS) -> pd.DataFrame:
    """At most ``rows`` evenly spaced rows per watched link (``link``/``toward``)."""
    if df.empty:
        return df
    keys = [c for c in ("link", "toward", "dev") if c in df.columns]
    parts = [g.iloc[_even(len(g), rows)] for _, g in df.groupby(keys, sort=False)] \
        if keys else [df.iloc[_even(len(df), rows)]]
    return pd.concat(parts).sort_index()


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    with files.atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


REPO = Path(__file__).resolve().parents[2]


def portable(text: str, run: Path) -> str:
    """A run's record with this machine's folders taken out: the run folder becomes
    ``<run>``, the checkout's folder a relative path (``testbed/scenarios/...``), the
    interpreter ``python``; a packed folder is read on other machines."""
    for path, instead in ((str(run.resolve()), "<run>"), (str(REPO) + "/", ""),
                          (str(Path(sys.executable)), "python")):
        text = text.replace(json.dumps(path)[1:-1], instead)
    # a run made from another checkout of this repository (a clean worktree, an A/B arm's
    # revision) names files of the testbed under that checkout's folder
    return CHECKOUT_FILE.sub(r'"\1', text)


#: An absolute path into a checkout's ``testbed/`` (a scenario's convergence table or
#: trace), as a JSON string: the checkout's folder is taken out.
CHECKOUT_FILE = re.compile(r'"/[^"]*?/(testbed/scenarios/[^"]*)')


def pack_run(run: loading.RunData | Path, dest: Path, rank0_rows: int = RANK0_ROWS,
             series_rows: int = SERIES_ROWS) -> int:
    """One run folder (as the run reader loaded it), compact (module doc); returns the
    bytes written."""
    folder = loading.folder_of(run)
    src = folder.path
    dest.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[int]] = {}
    for name in WHOLE:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)
    if (dest / "config.json").is_file():  # paths that mean something on any clone
        text = (dest / "config.json").read_text(encoding="utf-8")
        files.atomic_write_text(dest / "config.json", portable(text, src))
    if (src / "steps.csv").is_file():  # as written (not upgraded: a copy of the record)
        steps = folder.csv("steps.csv", loading.STEP_COLUMNS)
        small = pack_steps(steps, rank0_rows)
        _write_csv(small, dest / "steps.csv")
        rows["steps.csv"] = [len(steps), len(small)]
    for name in ("bottleneck.csv", "host.csv"):
        if (src / name).is_file():
            df = folder.csv(name)
            small = pack_series(df, series_rows)
            _write_csv(small, dest / name)
            rows[name] = [len(df), len(small)]
    conv = (folder.config.get("scenario") or {}).get("convergence")
    for where in ((src / "convergence.json"), Path(conv) if conv else None):
        if where is not None and where.is_file():
            shutil.copyfile(where, dest / "convergence.json")
            break
    start = folder.start_record()
    if start is not None:
        files.atomic_write_text(dest / "start.json", portable(json.dumps(start, indent=1), src))
    summary = {**folder.summary}  # the loaded one is shared: never changed in place
    summary["packed"] = {"rows": rows, "rank0_rows": rank0_rows, "series_rows": series_rows,
                         "rank0_steps": _rank0_steps(folder),
                         "left_out": sorted(p.name for p in src.iterdir() if p.name not in (
                             *WHOLE, "steps.csv", "bottleneck.csv", "host.csv",
                             "summary.json", "convergence.json"))}
    files.atomic_write_text(dest / "summary.json", json.dumps(summary, indent=1))
    return sum(p.stat().st_size for p in dest.iterdir() if p.is_file())


def _rank0_steps(folder: loading.RunData) -> int | None:
    try:
        steps = folder.csv("steps.csv", loading.STEP_COLUMNS)
    except (loading.Damaged, OSError):
        return None
    return len(metrics.training_steps(steps.to_dict("records")))


def pack(src: Path, dest: Path, *, replace: bool = False, rank0_rows: int = RANK0_ROWS,
         series_rows: int = SERIES_ROWS, log: Any = print) -> tuple[int, int]:
    """Every loadable run folder under ``src`` into ``dest`` (same relative paths); damaged
    ones are named and skipped. Returns (runs packed, bytes written)."""
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise PackError(f"RESULTS_DIR: no such folder {str(src)!r}")
    if dest.resolve() == src.resolve() or src.resolve() in dest.resolve().parents:
        raise PackError("--out: must not be inside RESULTS_DIR")
    if dest.exists() and any(dest.iterdir()):
        if not replace:
            raise PackError(f"--out: {str(dest)!r} is not empty (--replace replaces it: one "
                            "packed copy per evaluation)")
        shutil.rmtree(dest)
    n = total = 0
    for d in loading.find_run_dirs(src):
        item = loading.load_folder(d, src)
        if isinstance(item, loading.Excluded):
            log(f"not packed: {item.run}: {item.reason}")
            continue
        total += pack_run(item, dest / item.run, rank0_rows, series_rows)
        n += 1
    if n == 0:
        raise PackError(f"RESULTS_DIR: no loadable run folders under {str(src)!r}")
    return n, total
