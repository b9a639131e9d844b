"""The prediction-at-scale figure, drawn from the prediction CSV and nothing else, so that
a figure is always its table's (``netsense simulate predict --figure``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from netsenseml import methods

NUMBERS = ("step_s", "comm_s", "compute_s", "throughput", "steps_to_target", "tta_s")


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a prediction CSV with their numbers as numbers."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("workers",):
            r[k] = int(r[k])
        for k in ("step_s", "comm_s", "compute_s", "throughput", "steps_to_target", "tta_s"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else math.nan
    return rows


def figure(csv_path: Path, png_path: Path, title: str) -> None:
    """Throughput and time to accuracy against W from the CSV, one line per method
    (log-log); an adaptive method's points (NetSenseML's) are labelled with its chosen level."""
    rows = read_csv(csv_path)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in dict.fromkeys(r["method"] for r in rows):
        rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["workers"])
        ws = [r["workers"] for r in rs]
        axes[0].plot(ws, [r["throughput"] for r in rs], marker="o", label=m)
        axes[1].plot(ws, [r["tta_s"] for r in rs], marker="o", label=m)
        spec = methods.read(m)  # the CSV's text enters here
        if spec is not None and spec.adaptive:
            for r in rs:
                for ax, key in ((axes[0], "throughput"), (axes[1], "tta_s")):
                    ax.annotate(r["level"], (r["workers"], r[key]), fontsize=7,
                                textcoords="offset points", xytext=(3, -9))
    for ax, lab in zip(axes, ("throughput (samples/s)", "time to accuracy (s)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=130)
    plt.close(fig)
