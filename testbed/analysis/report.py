"""One self-contained HTML page for a results folder: figures, tables, scenarios, versions.

Why self-contained (PNG figures inlined as base64, no external CSS/JS): the page is the thing
people mail around or attach to an issue; it must open anywhere, offline, without the
results folder beside it. Everything on it is read from the run folders (via testbed.analysis.tables
and testbed.analysis.plots); the figures are (re)drawn first so the page and results/figures agree.
"""

from __future__ import annotations

import base64
import html
import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.analysis import plots, sensing, tables
from testbed.config.sweep import SWEEPS_DIR

CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.82em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right} th{background:#f2f2f2}
img{max-width:100%;border:1px solid #ddd} pre{background:#f7f7f7;padding:.6em;overflow-x:auto;
font-size:.8em} details{margin:.4em 0} .muted{color:#777}
"""

CAPTIONS = {
    "throughput_vs_rate": "Training throughput (global samples/s, first step excluded) vs "
    "bottleneck rate; error bars: std over seeds.",
    "accuracy_vs_time": "Test accuracy vs wall-clock time at the constrained rate; dashed: "
    "target; star: time to target.",
    "adaptation_timeline": "Configured rate and cross-traffic streams as applied (top), "
    "NetSenseML's kept ratio and level (middle), step time per method (bottom); grey lines: "
    "applied events.",
    "speedup": "NetSenseML's throughput and time-to-accuracy speedup over each baseline "
    "(speedup.csv).",
}


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _table(df: pd.DataFrame) -> str:
    if df.empty:
        return '<p class="muted">(no rows)</p>'
    return df.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="–",
                      border=0, escape=True)


def _versions(root: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Distinct software/host facts found in config.json files (keys named versions/host)."""
    rows: dict[tuple[str, str], int] = {}
    for run in runs["run"]:
        cfg = tables._read_json(root / run / "config.json")
        for key in ("versions", "host", "host_facts"):
            v = tables.find_key(cfg, key)
            if isinstance(v, dict):
                for k, val in v.items():
                    if not isinstance(val, dict | list):
                        rows[(f"{key}.{k}", str(val))] = rows.get((f"{key}.{k}", str(val)), 0) + 1
    return pd.DataFrame([{"fact": k, "value": v, "runs": n} for (k, v), n in sorted(rows.items())],
                        columns=["fact", "value", "runs"])


def _scenarios(root: Path, runs: pd.DataFrame) -> str:
    """The resolved scenario of one run per experiment (methods/seeds vary within it)."""
    parts = []
    for exp, g in runs.groupby("experiment", sort=True):
        cfg = tables._read_json(root / g["run"].iloc[0] / "config.json")
        scen = cfg.get("scenario", cfg)
        params = sorted({c for c in g.columns if c.startswith("param.")})
        grid = "; ".join(f"{c[6:]} ∈ {sorted(g[c].dropna().unique().tolist())}" for c in params)
        parts.append(
            f"<details><summary><b>{html.escape(str(exp))}</b> — {len(g)} runs; methods: "
            f"{html.escape(', '.join(sorted(g['method'].unique())))}"
            f"{'; grid: ' + html.escape(grid) if grid else ''}</summary>"
            f"<pre>{html.escape(json.dumps(scen, indent=2, default=str))}</pre></details>")
    sweeps = sorted({s for s in runs.get("sweep", pd.Series(dtype=str)) if s})
    for s in sweeps:
        f = SWEEPS_DIR / f"{s}.yaml"
        if f.is_file():
            parts.append(f"<details><summary>sweep file <b>testbed/sweeps/{html.escape(s)}.yaml"
                         f"</b></summary><pre>{html.escape(f.read_text())}</pre></details>")
    return "\n".join(parts)


def build_report(root: Path, out: Path | None = None, figures_dir: Path | None = None,
                 *, log: Any = print) -> Path:
    """Draw the figures, then write the HTML page (atomically); returns its path."""
    root = Path(root)
    out = Path(out) if out else root / "report.html"
    figs = plots.make_figures(root, figures_dir, log=log)
    runs, _ = tables.load_runs(root)
    sp = tables.speedup_table(runs)
    lo, hi = tables.speedup_range(sp)
    failed = runs[runs["status"] != "ok"]
    body = [f"<h1>NetSense results: {html.escape(str(root))}</h1>",
            f"<p>{len(runs)} runs ({len(runs) - len(failed)} ok, {len(failed)} not ok). "
            f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.</p>"]
    if pd.notna(lo):
        body.append(f"<p>NetSenseML throughput speedup over the baselines: "
                    f"<b>{lo:.2f}x – {hi:.2f}x</b> (all rates and baselines in speedup.csv).</p>")
    body.append("<h2>Figures</h2>")
    for name in plots.FIGURES:
        pngs = [p for p in figs.get(name, []) if p.suffix == ".png"]
        if pngs:
            body.append(f"<h3>{name}</h3>{_img(pngs[0])}<p>{html.escape(CAPTIONS[name])}</p>")
        else:
            body.append(f'<h3>{name}</h3><p class="muted">not drawn: no data for it</p>')
    body += ["<h2>Speedup (speedup.csv)</h2>", _table(sp),
             "<h2>Throughput per experiment, rate and method</h2>",
             _table(tables.throughput_table(runs)),
             "<h2>Time to accuracy and final accuracy</h2>", _table(tables.tta_table(runs))]
    cols = [c for c in ("run", "experiment", "rate_mbit", "method", "seed", "status",
                        "throughput", "throughput_summary", "tta_s", "final_accuracy", "steps",
                        "bytes_sent_total") if c in runs.columns]
    body += ["<h2>All runs</h2>", _table(runs[cols])]
    body += ["<h2>Network truth: byte conservation, bottleneck sampling, cross traffic</h2>",
             _table(sensing.truth_table(root, runs))]
    if not failed.empty:
        reasons = []
        for run in failed["run"]:
            s = tables._read_json(root / run / "summary.json")
            reasons.append({"run": run, "status": s.get("status", "missing"),
                            "reason": str(s.get("reason") or s.get("error") or "")[:300]})
        body += ["<h2>Runs not ok</h2>", _table(pd.DataFrame(reasons))]
    body += ["<h2>Scenarios (resolved, one run per experiment)</h2>", _scenarios(root, runs),
             "<h2>Software and host</h2>", _table(_versions(root, runs))]
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>NetSense report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out
