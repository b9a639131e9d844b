"""Run folders to the trackers researchers already use: TensorBoard event files, and MLflow
or Weights & Biases where installed (``netsense export``).

Why from the run folders and not from inside the worker: the folders are the record (every
figure and table is made from them), so an export can be redone, for any old run, into any
tracker, without re-running; and the worker stays free of tracker dependencies.

TensorBoard: one event file per run under ``DIR/<source>/<run folder>``, written with the
``tensorboard`` package's own event writer (no torch, no TensorFlow). Scalars per training
step of rank 0 (step = the training step, wall time = the step's wall clock):

``train/loss``, ``eval/accuracy`` (evaluated steps), ``step/step_time_s``, ``step/comm_s``,
``step/kept_ratio``, ``step/level_index`` (the index of the level in the registry's order,
named in the tag's description), ``network/configured_rate_mbit`` and
``network/cross_streams`` (the network as applied, from events.csv).

MLflow / W&B: one tracker run per run folder, named after it, with the run's method, seed,
experiment and rate as parameters and the same metrics by step. Each is optional: the
command names the missing package and its extra when asked for one that is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import loading, tables, timeline_csv
from testbed.analysis.figures import timeline as timeline_figure
from testbed.analysis.results import Results

TRACKERS = {"mlflow": "mlflow", "wandb": "wandb"}


class ExportError(ValueError):
    """A tracker asked for is not installed (message names the package and extra)."""


def metrics(folders: loading.Folders | Path, run: pd.Series, steps: pd.DataFrame
            ) -> pd.DataFrame:
    """One row per rank-0 training step: step, wall and the scalars (module docstring)."""
    tl = timeline_csv.run_timeline(folders, run, steps)
    if tl.empty:
        return pd.DataFrame()
    s = tables.training_step_rows(steps)
    s = s[s["rank"] == s["rank"].min()].drop_duplicates("step").set_index("step")
    order = list(timeline_figure.LEVEL_ORDER)
    extra = [lv for lv in dict.fromkeys(tl["level"].dropna()) if lv not in order]
    index = {lv: i for i, lv in enumerate(order + extra)}
    out = pd.DataFrame({
        "step": tl["step"].astype(int),
        "wall": tl["step"].map(s["wall"]) if "wall" in s.columns else float("nan"),
        "train/loss": tl["step"].map(s["loss"]) if "loss" in s.columns else float("nan"),
        "eval/accuracy": tl["accuracy"],
        "step/step_time_s": tl["step_s"],
        "step/comm_s": tl["comm_s"],
        "step/kept_ratio": tl["kept_ratio"],
        "step/level_index": tl["level"].map(index),
        "network/configured_rate_mbit": tl["rate_mbit"],
        "network/cross_streams": tl["streams"],
    })
    out.attrs["levels"] = order + extra
    return out


def _runs(root: Path) -> tuple[loading.Folders, pd.DataFrame, pd.DataFrame]:
    """(the folders as loaded, the ok runs, the steps) of the tree under ``root``, read
    once by the run reader (:class:`Results`)."""
    res = Results.load(Path(root))
    runs = res.runs
    return res.folders, (runs[runs["status"] == "ok"] if not runs.empty else runs), res.steps


def tensorboard(root: Path, out: Path, prefix: str = "") -> list[Path]:
    """Event files of every ok run under ``root``; returns the run folders written."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folders, runs, steps = _runs(root)
    written = []
    for _, run in runs.iterrows():
        m = metrics(folders, run, steps[steps["run"] == run["run"]])
        if m.empty:
            continue
        logdir = Path(out) / prefix / run["run"] if run["run"] != "." else Path(out) / prefix
        logdir.mkdir(parents=True, exist_ok=True)
        writer = EventFileWriter(str(logdir), filename_suffix=".netsense")
        levels = ", ".join(f"{i}={lv}" for i, lv in enumerate(m.attrs["levels"]))
        first: set[str] = set()
        for row in m.itertuples(index=False):
            values = []
            for tag, v in zip(m.columns[2:], row[2:], strict=True):
                if v is None or v != v:
                    continue
                meta = None
                if tag not in first:  # the plugin and description travel with the first
                    first.add(tag)
                    meta = summary_pb2.SummaryMetadata(
                        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
                        summary_description=levels if tag == "step/level_index" else "")
                values.append(summary_pb2.Summary.Value(tag=tag, simple_value=float(v),
                                                        metadata=meta))
            wall = float(row.wall) if row.wall == row.wall else 0.0
            writer.add_event(event_pb2.Event(wall_time=wall, step=int(row.step),
                                             summary=summary_pb2.Summary(value=values)))
        writer.close()
        written.append(logdir)
    return written


def require(tracker: str) -> None:
    pkg = TRACKERS[tracker]
    if importlib.util.find_spec(pkg) is None:
        raise ExportError(f"--{tracker}: the {pkg} package is not installed "
                          f"(pip install -e '.[{tracker}]' or pip install {pkg})")


def _params(run: pd.Series) -> dict[str, Any]:
    return {k: (None if pd.isna(run.get(k)) else run.get(k))
            for k in ("experiment", "method", "seed", "rate_mbit", "kind")}


def mlflow_export(root: Path, experiment: str) -> int:
    """One MLflow run per ok run folder (tracking URI from MLFLOW_TRACKING_URI as usual)."""
    require("mlflow")
    import mlflow

    folders, runs, steps = _runs(root)
    mlflow.set_experiment(experiment)
    n = 0
    for _, run in runs.iterrows():
        m = metrics(folders, run, steps[steps["run"] == run["run"]])
        with mlflow.start_run(run_name=str(run["run"])):
            mlflow.log_params(_params(run))
            for row in m.itertuples(index=False):
                vals = {k.replace("/", "_"): float(v) for k, v in zip(
                    m.columns[2:], row[2:], strict=True) if v == v and v is not None}
                mlflow.log_metrics(vals, step=int(row.step))
        n += 1
    return n


def wandb_export(root: Path, project: str) -> int:
    """One W&B run per ok run folder (offline unless WANDB_MODE/API key say otherwise)."""
    require("wandb")
    import wandb

    folders, runs, steps = _runs(root)
    n = 0
    for _, run in runs.iterrows():
        m = metrics(folders, run, steps[steps["run"] == run["run"]])
        r = wandb.init(project=project, name=str(run["run"]), config=_params(run),
                       reinit=True)
        for row in m.itertuples(index=False):
            r.log({k: float(v) for k, v in zip(m.columns[2:], row[2:], strict=True)
                   if v == v and v is not None}, step=int(row.step))
        r.finish()
        n += 1
    return n
