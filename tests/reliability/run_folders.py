"""A finished, intact sweep run folder written by hand (config, summary, sweep.json, steps.csv
of two ranks, the NetSenseML runs twice as fast), for tests that damage or surround it."""

from __future__ import annotations

import json
from pathlib import Path


def good_run(root: Path, rate: int, method: str) -> Path:
    d = root / "sw" / "rate" / f"rate_mbit={rate}" / f"{method}-s0"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "scenario": {"name": "t", "topology": {"kind": "star", "rate_mbit": rate}},
        "method": method, "seed": 0}))
    (d / "summary.json").write_text(json.dumps({"status": "ok", "method": method, "seed": 0,
                                                "throughput_samples_per_s": 100.0}))
    (d / "sweep.json").write_text(json.dumps({
        "sweep": "sw", "experiment": "rate", "kind": "throughput",
        "params": {"rate_mbit": rate}, "method": method, "seed": 0}))
    speed = rate * (2 if method == "netsenseml" else 1)
    rows = ["rank,t,samples,step,loss"] + [f"{r},{s / speed:.4f},64,{s},1.0"
                                          for r in (0, 1) for s in range(1, 11)]
    (d / "steps.csv").write_text("\n".join(rows) + "\n")
    return d
