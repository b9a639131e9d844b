"""One self-contained HTML page for a results folder: the claim, figures, tables, scenarios.

The page leads with the A/B comparisons recorded for its runs' scenarios (``netsense ab``'s
tables: under the folder, and for a committed tree the committed ones beside it; each arm's
ratio with its interval and verdict, not called below 3 seeds a side), then the claim: time
to accuracy per experiment, rate and method (seeds reaching the target, mean and 95 %
t-interval, NetSenseML's TTA speedup over each method with its interval) and the
won/tie/lost calls, then throughput; degraded and damaged runs are named before the
figures. It says which code made it (the commit, and "dirty" with uncommitted changes), how
many runs were paced by the emulated accelerator and how many degraded runs were left out.

Why self-contained (PNG figures inlined as base64, CSS in the page, no JavaScript): the page
is the thing people mail around or attach to an issue; it must open anywhere, offline,
without the results folder beside it. Everything on it is read from the run folders (via
testbed.analysis.tables and testbed.analysis.plots); the figures are (re)drawn first so the
page and the figures folder agree. The figures section loops over the figure registry
(testbed.analysis.figures): each figure's title and caption are declared with it.

The page is a Jinja2 template (templates/report.html.j2, autoescaped); the tables are
formatted here, column by column: units in the headers, one precision per quantity, yes/no
for booleans, run ids on one line. Tables sit in a horizontally scrolling box, so the page
itself never overflows (checked in a real headless browser by tests/analysis).
"""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup, escape

from testbed.analysis import ab_stats as stats_ab
from testbed.analysis import loading, plots, ramp, sensing, tables
from testbed.analysis.figures import registry as figure_registry
from testbed.analysis.results import Results
from testbed.common import bounded, files, names
from testbed.common.files import atomic_write_text
from testbed.common.outputs import committed_runs_of
from testbed.common.provenance import git_commit
from testbed.config.sweep import SWEEPS_DIR

TEMPLATES = Path(__file__).resolve().parent / "templates"

@dataclass(frozen=True)
class Col:
    """One column of a formatted table: source column, header (with unit), format."""

    key: str
    header: str
    fmt: str = "text"  # text | run | int | f1 | f2 | f3 | x | bool | mb


def _cell(v: Any, fmt: str) -> tuple[str, str]:
    """(text, css class) of one cell; missing values are an en dash."""
    missing = v is None or (isinstance(v, float) and math.isnan(v)) or (
        not isinstance(v, str | bool) and pd.isna(v))
    if fmt in ("text", "run"):
        return ("–" if missing else str(v)), ("run" if fmt == "run" else "")
    if fmt == "bool":
        return ("–" if missing else ("yes" if bool(v) else "no")), ""
    if missing:
        return "–", "num"
    x = float(v)
    text = {"int": f"{x:.0f}", "f1": f"{x:,.1f}", "f2": f"{x:.2f}", "f3": f"{x:.3f}",
            "x": f"{x:.2f}x", "mb": f"{x / 1e6:,.1f}"}.get(fmt, str(v))
    return text, "num"


def html_table(df: pd.DataFrame, cols: list[Col]) -> Markup:
    cols = [c for c in cols if c.key in df.columns]
    if df.empty or not cols:
        return Markup('<p class="muted">(no rows)</p>')
    head = "".join(f"<th>{escape(c.header)}</th>" for c in cols)
    body = []
    for _, row in df.iterrows():
        cells = []
        for c in cols:
            text, cls = _cell(row[c.key], c.fmt)
            cells.append(f'<td class="{cls}">{escape(text)}</td>' if cls else
                         f"<td>{escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return Markup(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def headline(sp: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per experiment and rate: NetSenseML over its best baseline and over all baselines.

    With ``runs``, every other experiment and rate of the folder gets a row too, naming its
    fastest method and why it has no speedup (no NetSenseML run, or no baseline): a combined
    folder's headline shows everything it holds."""
    rows = []
    for (exp, rate), g in sp.groupby(["experiment", "rate_mbit"], dropna=False, sort=True):
        g = g.dropna(subset=["throughput_speedup"])
        if g.empty:
            continue
        best = g.loc[g["baseline_throughput"].idxmax()]
        tta = g["tta_speedup"].dropna()
        rows.append({
            "experiment": exp, "rate_mbit": rate, "best_baseline": best["baseline"],
            "vs_best": best["throughput_speedup"],
            "lo": g["throughput_speedup"].min(), "hi": g["throughput_speedup"].max(),
            "tta_lo": tta.min() if len(tta) else math.nan,
            "tta_hi": tta.max() if len(tta) else math.nan, "note": "",
        })
    if runs is not None and not runs.empty:
        ok = tables.ok_runs(runs)
        shown = {(r["experiment"], r["rate_mbit"]) for r in rows}
        for (exp, rate), g in ok.groupby(["experiment", "rate_mbit"], dropna=False, sort=True):
            if any(e == exp and (r == rate or (pd.isna(r) and pd.isna(rate)))
                   for e, r in shown):
                continue
            thr = g.groupby("method")["throughput"].mean().dropna()
            methods = sorted(g["method"].astype(str).unique())
            why = ("no NetSenseML run" if tables.ADAPTIVE not in methods
                   else "NetSenseML only: no baseline" if len(methods) == 1
                   else "no samples/s to compare (samples neither reported by the job nor "
                        "seen by the hook)")
            rows.append({"experiment": exp, "rate_mbit": rate,
                         "best_baseline": str(thr.idxmax()) if len(thr) else "",
                         "vs_best": math.nan, "lo": math.nan, "hi": math.nan,
                         "tta_lo": math.nan, "tta_hi": math.nan,
                         "note": f"{why} (methods: {', '.join(methods)})"})
    return pd.DataFrame(rows)


def claim_table(tta: pd.DataFrame, sp: pd.DataFrame, runs: pd.DataFrame | None = None
                ) -> pd.DataFrame:
    """The claim first: per experiment, rate and method, the time to accuracy (mean and its
    95 % t-interval over seeds, seeds reaching the target of seeds run) and NetSenseML's
    TTA speedup over that method with its interval (``tables.speedup_table``). Experiments
    of kind ``throughput`` (short runs that time steps, never meant to reach the target:
    ``runs``' kind) are left to the throughput table; the final accuracy's interval is
    clipped to [0, 1], the range of an accuracy."""
    if runs is not None and not runs.empty and "kind" in runs:
        timing_only = set(runs.loc[runs["kind"] == "throughput", "experiment"])
        tta = tta[~tta["experiment"].isin(timing_only)]
    rows = []
    rep = tables.reported_by(runs)
    for r in tta.itertuples(index=False):
        x = sp[(sp["experiment"] == r.experiment) & (sp["rate_mbit"] == r.rate_mbit)
               & (sp["baseline"] == r.method)] if not sp.empty else sp
        x = x.iloc[0] if len(x) else None
        # an own job without hooks.report(accuracy=...)
        silent = tables.silent(rep, r.experiment, r.rate_mbit, r.method)
        rows.append({
            "experiment": r.experiment, "rate_mbit": r.rate_mbit, "method": r.method,
            "seeds": f"{int(r.seeds)} run(s)" if silent else f"{int(r.reached)}/{int(r.seeds)}",
            "tta": tables._tta_text(r.tta_mean_s, r.tta_ci95_s, int(r.reached), int(r.seeds),
                                    0 if silent else None),
            "x": ("(NetSenseML)" if r.method == tables.ADAPTIVE else
                  (tables._ci_text(x["tta_speedup"], x["tta_speedup_lo"], x["tta_speedup_hi"])
                   or "n/a") if x is not None else "–"),
            "final": tables.NOT_REPORTED if silent else tables._ci_text(
                r.final_accuracy_mean, max(0.0, r.final_accuracy_mean - r.final_accuracy_ci95),
                min(1.0, r.final_accuracy_mean + r.final_accuracy_ci95), ".3f")
            if pd.notna(r.final_accuracy_ci95) else tables._ci_text(
                r.final_accuracy_mean, math.nan, math.nan, ".3f"),
        })
    return pd.DataFrame(rows, columns=["experiment", "rate_mbit", "method", "seeds", "tta",
                                       "x", "final"])


def throughput_headline(sp: pd.DataFrame) -> pd.DataFrame:
    """Throughput after the claim: per experiment and rate, NetSenseML over the fastest
    baseline there with the 95 % interval, and the seeds on each side."""
    rows = []
    for (exp, rate), g in sp.groupby(["experiment", "rate_mbit"], dropna=False, sort=True):
        g = g[~g["baseline"].isin([tables.ORACLE, tables.IDEAL])].dropna(
            subset=["throughput_speedup"])
        if g.empty:
            continue
        best = g.loc[g["baseline_throughput"].idxmax()]
        rows.append({"experiment": exp, "rate_mbit": rate, "best_baseline": best["baseline"],
                     "vs_best": tables._ci_text(best["throughput_speedup"],
                                                best["throughput_speedup_lo"],
                                                best["throughput_speedup_hi"]),
                     "seeds": f"{int(best['netsenseml_seeds'])} / "
                              f"{int(best['baseline_seeds'])}",
                     "range": f"{g['throughput_speedup'].min():.2f}x – "
                              f"{g['throughput_speedup'].max():.2f}x"})
    return pd.DataFrame(rows, columns=["experiment", "rate_mbit", "best_baseline", "vs_best",
                                       "seeds", "range"])


def made_by(commit: str) -> str:
    """Which code made the page: the commit, and whether it had uncommitted changes."""
    if commit.endswith("+dirty"):
        return (f"commit {commit[:-len('+dirty')]}, dirty (uncommitted changes: the page "
                "may not be reproducible from the commit alone)")
    return f"commit {commit}, clean" if commit != "?" else "unknown code (not a git checkout)"


#: Evaluations a run needs before its target for its TTA to measure training rather than
#: when the evaluations happened.
MIN_EVALS_BEFORE_TARGET = 5


def coarse_tta(runs: pd.DataFrame, steps: pd.DataFrame,
               min_evals: int = MIN_EVALS_BEFORE_TARGET) -> pd.DataFrame:
    """The finished runs that reached their target within their first ``min_evals``
    evaluations (columns run, method, evaluation: the one that reached it, step).

    Such a time to accuracy is mostly the time of an early evaluation (every method may
    "reach" the target at the first one), not of convergence: the page says so."""
    rows = []
    ok = tables.ok_runs(runs)
    if ok.empty or steps.empty:
        return pd.DataFrame(columns=["run", "method", "evaluation", "step"])
    for r in ok[ok["reached_target"]].itertuples():
        ev = tables.evaluations(steps[steps["run"] == r.run])
        hit = ev[ev["accuracy"] >= r.target_accuracy]
        if hit.empty:
            continue
        n = int((ev[tables.train_clock(ev)] <= hit[tables.train_clock(ev)].iloc[0]).sum())
        if n <= min_evals:
            rows.append({"run": r.run, "method": r.method, "evaluation": n,
                         "step": int(hit["step"].iloc[0]) if "step" in hit.columns else -1})
    return pd.DataFrame(rows, columns=["run", "method", "evaluation", "step"])


def _coarse_note(coarse: pd.DataFrame) -> str:
    if coarse.empty:
        return ""
    first = int((coarse["evaluation"] == 1).sum())
    return (f"Not a convergence measurement for {len(coarse)} run(s): they reached the "
            f"target within their first {MIN_EVALS_BEFORE_TARGET} evaluations ({first} at "
            "the very first), so their time to accuracy mostly says when those evaluations "
            "happened. Evaluate more often (workload.eval_every) or set a higher "
            "target_accuracy to measure it. ")
def _extra_tables(res: Results, sp: pd.DataFrame) -> list[dict[str, Any]]:
    """The ideal schedule against the best fixed method, the crossover, NetSenseML at static
    rates, the congestion ramp per window, runs above the faithful range, experiments whose
    TTA does not measure convergence, and what the speedup table left out: each only when
    there is something to show."""
    sections = (_ideal_section(sp), _crossover_section(res), _static_section(res),
                _ramp_section(res), _warnings_section(res.runs), _left_out_section(sp))
    return [s for s in sections if s is not None]


def _ideal_section(sp: pd.DataFrame) -> dict[str, Any] | None:
    ivf = tables.ideal_vs_fixed(sp)
    if ivf.empty:
        return None
    return {"title": "Hindsight-ideal schedule vs the best fixed method",
            "note": "ideal: per phase the fixed level with the most progress per "
            "second (measured step rate / steps to target), summed to a time to "
            "accuracy (testbed/analysis/ideal.py); ideal x = oracle TTA / ideal TTA "
            "(what adapting can win at most); NetSenseML's TTA speedups against both "
            "with 95 % intervals.",
            "html": html_table(ivf, [Col(c, c.replace("_", " "), "x" if c == "ideal_x"
                                         else ("f1" if c.endswith("_s") else "text"))
                                     for c in ivf.columns])}


def _crossover_section(res: Results) -> dict[str, Any] | None:
    xt, crossings = res.crossover()
    if xt.empty:
        return None
    note = "; ".join(f"{c['experiment']}: {c['below']} below ~{c['crossover_mbit']:.0f} "
                     f"Mbit/s, {c['above']} above" for c in crossings) or "no crossover"
    return {"title": "Crossover: time to target per rate and fixed level",
            "note": note, "html": html_table(xt, [
                Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
                Col("method", "method"), Col("step_ms", "step (ms)", "f1"),
                Col("step_ms_ci95", "± 95 % (ms)", "f1"),
                Col("steps_to_target", "steps to target", "f1"),
                Col("time_to_target_s", "time to target (s)", "f1"),
                Col("best", "best", "bool"), Col("steps_source", "steps from")])}


def _static_section(res: Results) -> dict[str, Any] | None:
    so = res.static_vs_oracle()
    if so.empty:
        return None
    so = so.assign(x_oracle=[tables._ci_text(x, lo, hi) or "n/a" for x, lo, hi in zip(
        so["netsenseml_x_oracle"], so["netsenseml_x_oracle_lo"], so["netsenseml_x_oracle_hi"],
        strict=True)])
    return {"title": "NetSenseML at static rates vs the best fixed level",
            "note": "NetSenseML trained to the target (measured) against the best fixed "
            "ladder level's projected time to target at the same rate (the crossover "
            "table); x = oracle TTA / NetSenseML TTA with its 95 % interval "
            "(testbed/analysis/ideal.py, static_vs_oracle)",
            "html": html_table(so, [
                Col("experiment", "experiment"), Col("workers", "workers", "int"),
                Col("rate_mbit", "rate (Mbit/s)", "f1"),
                Col("oracle_level", "best fixed level"),
                Col("oracle_tta_s", "its TTA (s)", "f1"),
                Col("netsenseml_tta_s", "NetSenseML TTA (s)", "f1"),
                Col("x_oracle", "x best fixed"),
                Col("netsenseml_levels", "NetSenseML's levels")])}


def _ramp_section(res: Results) -> dict[str, Any] | None:
    rt = res.ramp()
    if rt.empty:
        return None
    return {"title": "Congestion ramp: throughput and level per window of constant streams",
            "note": "Per window of the ramp's timeline (idle, each stream count, the pauses, "
            "after): global samples/s over the window (a step's samples spread over its "
            "span), mean and half-width of the 95 % t-interval over the seeds that cover at "
            f"least {ramp.MIN_COVER:.0%} of it (– with one seed); for an adaptive method "
            "the level held longest over their time in the window and its share "
            "(testbed/analysis/ramp.py; ramp.csv). Times: seconds since rank 0's first "
            "training step, virtual where the runs are dilated.",
            "html": html_table(rt, [
                Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
                Col("method", "method"), Col("label", "window"),
                Col("streams", "streams", "int"), Col("start_s", "from (s)", "f3"),
                Col("end_s", "to (s)", "f3"), Col("throughput_mean", "throughput (samples/s)",
                                                  "f1"),
                Col("throughput_ci95", "± 95 % CI (samples/s)", "f1"),
                Col("seeds", "seeds counted", "int"), Col("seeds_total", "of seeds", "int"),
                Col("level", "level held longest"),
                Col("level_share", "its share of the time", "f2")])}


def _warnings_section(runs: pd.DataFrame) -> dict[str, Any] | None:
    if "warnings" not in runs.columns:
        return None
    warned = runs[runs["warnings"].fillna("").astype(str) != ""]
    if warned.empty:
        return None
    return {"title": "Runs with warnings (e.g. configured above the faithful "
            "range)", "note": "from summary.json's warnings",
            "html": html_table(warned[["run", "method", "seed", "warnings"]], [
                Col("run", "run folder", "run"), Col("method", "method"),
                Col("seed", "seed", "int"), Col("warnings", "warning")])}


def _left_out_section(sp: pd.DataFrame) -> dict[str, Any] | None:
    left = sp.attrs.get("left_out", {})
    if not left:
        return None
    return {"title": "Left out of the speedup table", "note": "experiments and rates "
            "of this folder that the speedup table cannot compare, and why",
            "html": html_table(pd.DataFrame([{"experiment": k, "why": v}
                                             for k, v in left.items()]),
                               [Col("experiment", "experiment"), Col("why", "why")])}


def _img_src(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _versions(folders: loading.Folders, runs: pd.DataFrame) -> pd.DataFrame:
    """Distinct software/host facts found in config.json files (keys versions/host)."""
    rows: dict[tuple[str, str], int] = {}
    for run in runs["run"]:
        cfg = folders[run].config
        for key in ("versions", "host", "host_facts"):
            v = tables.find_key(cfg, key)
            if isinstance(v, dict):
                for k, val in v.items():
                    if not isinstance(val, dict | list):
                        rows[(f"{key}.{k}", str(val))] = rows.get((f"{key}.{k}", str(val)), 0) + 1
    return pd.DataFrame([{"fact": k, "value": v, "runs": n} for (k, v), n in sorted(rows.items())],
                        columns=["fact", "value", "runs"])


def _scenarios(folders: loading.Folders, runs: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for exp, g in runs.groupby("experiment", sort=True):
        cfg = folders[g["run"].iloc[0]].config
        params = sorted(c for c in g.columns if c.startswith("param.") and g[c].notna().any())
        grid = "; ".join(
            f"{c[6:]} ∈ {{{', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in sorted(g[c].dropna().unique().tolist()))}}}"
            for c in params)
        out.append({"name": exp, "runs": len(g), "grid": grid,
                    "methods": ", ".join(sorted(g["method"].unique())),
                    "json": json.dumps(cfg.get("scenario", cfg), indent=2, default=str)})
    return out


def _title(root: Path, runs: pd.DataFrame) -> str:
    names = [s for s in dict.fromkeys(runs.get("sweep", pd.Series(dtype=str))) if s]
    names += [e for e in dict.fromkeys(runs.loc[runs.get("sweep", "") == "", "experiment"])]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"NetSense results: {shown}" if shown else f"NetSense results ({root.name})"


def _sweep_names(runs: pd.DataFrame) -> list[str]:
    """The sweep names the run folders' sweep.json give, only those that are names.

    Why checked: the name is joined into a path below the sweeps folder and that file's
    text goes into a page meant to be shared; a crafted sweep.json (``"sweep":
    "/etc/x"`` or ``"../../y"``) must not put any readable YAML file on it."""
    return sorted({str(s) for s in runs.get("sweep", pd.Series(dtype=str))
                   if s and names.is_name(str(s))})


def _sweep_files(sweeps: list[str]) -> list[dict[str, str]]:
    """The committed sweep files of ``sweeps`` (real files inside the sweeps folder)."""
    out = []
    for s in sweeps:
        path = SWEEPS_DIR / f"{s}.yaml"
        if path.is_file() and not path.is_symlink() and files.inside(SWEEPS_DIR, path):
            try:
                text = bounded.read_text(path, bounded.MAX_YAML_BYTES, path.name)
            except bounded.BoundError:
                continue
            out.append({"path": f"testbed/sweeps/{s}.yaml", "text": text})
    return out


#: The "All runs" table's columns.
_RUN_COLS = [Col("run", "run folder", "run"), Col("method", "method"),
             Col("seed", "seed", "int"), Col("status", "status"),
             Col("rate_mbit", "rate (Mbit/s)", "f1"),
             Col("throughput", "throughput (samples/s)", "f1"),
             Col("steps_per_s", "steps/s", "f1"),
             Col("tta_s", "time to target (s)", "f1"),
             Col("final_accuracy", "final accuracy", "f3"), Col("steps", "steps", "int"),
             Col("bytes_sent_total", "sent (MB)", "mb"),
             Col("compute", "compute (native / paced profile, k)"),
             Col("overrun_share", "overrun share", "f3"),
             Col("degraded", "DEGRADED (left out unless --include-degraded)"),
             Col("host_other_pct", "host's other load (%)", "f1")]


def _figures(figs: dict[str, list[Path]], missing: dict[str, str],
             verbose: bool) -> list[dict[str, Any]]:
    """Every registered figure drawn (embedded), and with ``verbose`` those not drawn with
    why."""
    figures = []
    for fig in figure_registry():
        pngs = [p for p in figs.get(fig.name, []) if p.suffix == ".png"]
        if not pngs and not verbose:
            continue
        figures.append({"name": fig.name, "title": fig.title, "caption": fig.caption,
                        "srcs": [_img_src(p) for p in pngs],
                        "missing": missing.get(fig.name, f"needs {fig.needs}")})
    return figures


def _reached_text(tta: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The TTA table's ``reached`` as text: "not reported by the job" for an own job's
    group that reported no accuracy (its runs did not miss the target)."""
    tta = tta.copy()
    rep = tables.reported_by(runs)
    if not tta.empty:
        tta["reached"] = [tables.NOT_REPORTED if tables.silent(rep, r.experiment, r.rate_mbit,
                                                               r.method)
                          else str(int(r.reached)) for r in tta.itertuples(index=False)]
    return tta


def _reached_sides(sp: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The speedup table's reached columns as text: yes / no, or "not reported by the job"
    for a side of an own job that reported no accuracy."""
    sp = sp.copy()
    rep = tables.reported_by(runs)
    for side in ("netsenseml", "baseline"):
        sp[f"{side}_reached"] = [
            tables.NOT_REPORTED if tables.silent(
                rep, r["experiment"], r["rate_mbit"],
                tables.ADAPTIVE if side == "netsenseml" else tables.baseline_method(r))
            else ("yes" if r[f"{side}_reached"] == r[f"{side}_reached"]
                  and int(r[f"{side}_reached"]) else "no")
            for _, r in sp.iterrows()]
    return sp


def _main_tables(res: Results, sp: pd.DataFrame, tta_note: str) -> list[dict[str, Any]]:
    """Speedup, the extra tables, throughput, time to accuracy and every run."""
    by = ["experiment", "rate_mbit", "method"]
    thr = res.ok.groupby(by, dropna=False)["throughput"].apply(
        lambda v: pd.Series(tables.ci95(v), index=["mean", "ci", "n"])).unstack().reset_index()
    footer = res.footer()
    return [
        {"title": "Speedup per experiment, rate and baseline",
         "note": "n/a (–) where the target was not reached by every seed of one side.",
         "html": html_table(_reached_sides(sp, res.runs), [
             Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
             Col("baseline", "baseline"), Col("throughput_speedup", "throughput speedup", "x"),
             Col("tta_speedup", "TTA speedup", "x"),
             Col("netsenseml_throughput", "NetSenseML (samples/s)", "f1"),
             Col("baseline_throughput", "baseline (samples/s)", "f1"),
             Col("netsenseml_reached", "NetSenseML reached target"),
             Col("baseline_reached", "baseline reached target")])},
        *_extra_tables(res, sp),
        {"title": "Throughput per experiment, rate and method",
         "note": "Mean over seeds and the half-width of the 95 % t-interval (– with one seed)."
                 + (f" {footer}." if footer else ""),
         "html": html_table(thr, [
             Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
             Col("method", "method"), Col("mean", "throughput (samples/s)", "f1"),
             Col("ci", "± 95 % CI (samples/s)", "f1"), Col("n", "seeds", "int")])},
        {"title": "Time to accuracy and final accuracy",
         "note": " ".join(x for x in (tta_note, footer and f"{footer}.") if x),
         "html": html_table(_reached_text(res.tta(), res.runs), [
             Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
             Col("method", "method"), Col("target_accuracy", "target accuracy", "f2"),
             Col("reached", "seeds reaching it"), Col("seeds", "seeds", "int"),
             Col("tta_mean_s", "mean time to target (s)", "f1"),
             Col("tta_ci95_s", "± 95 % CI (s)", "f1"),
             Col("final_accuracy_mean", "final accuracy", "f3")])},
        {"title": "All runs", "note": "Every run folder, repeats and degraded runs included; "
         "compute: native CPU, or paced by the emulated accelerator (its profile and the time "
         "dilation k: a dilated run's times are virtual seconds); overrun share: steps whose "
         "real work did not fit the profiled slot; degraded: the run's reason (its numbers "
         "are the host's, left out of the statistics unless --include-degraded); host's "
         "other load: the mean share of all cores other work took.",
         "html": html_table(res.runs.sort_values(["experiment", "method", "seed", "run"]),
                            _RUN_COLS)},
    ]


def _trouble_tables(res: Results) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(first, last): the damaged folders excluded go first; runs not ok and the network
    truth last."""
    runs = res.runs
    first, last = [], []
    failed = runs[runs["status"] != "ok"]
    if not failed.empty:
        reasons = []
        for run in failed["run"]:
            s = res.folders[run].summary
            reasons.append({"run": run, "status": s.get("status", "missing"),
                            "reason": str(s.get("reason") or s.get("error") or "")[:300]})
        last.append({"title": "Runs not ok", "note": "", "html": html_table(
            pd.DataFrame(reasons), [Col("run", "run folder", "run"), Col("status", "status"),
                                    Col("reason", "reason")])})
    truth = sensing.truth_table(res.folders, runs)
    if not truth.empty:
        last.append({"title": "Network truth: byte conservation, bottleneck sampling, "
                     "cross traffic", "note": "", "html": html_table(
                         truth, [Col(c, c.replace("_", " ")) for c in truth.columns])})
    degraded = runs[tables.is_degraded(runs)] if not runs.empty else runs
    if not degraded.empty:  # named where a reader starts, not only counted in the footer
        counted = "counted (--include-degraded)" if runs.attrs.get("include_degraded") else \
            "left out of every statistic (--include-degraded counts them)"
        first.append({"title": f"Degraded runs ({len(degraded)}): {counted}",
                      "note": "The host did not keep up with the emulated accelerator: the "
                              "run's numbers are partly the host's.",
                      "html": html_table(
                          degraded.sort_values(["experiment", "method", "seed", "run"]),
                          [Col("run", "run folder", "run"), Col("method", "method"),
                           Col("seed", "seed", "int"), Col("degraded", "why degraded")])})
    excluded = loading.excluded_of(runs)
    if excluded:
        first.append({"title": "Excluded runs (damaged folders)",
                      "note": loading.exclusion_note(excluded),
                      "html": html_table(
                          pd.DataFrame([{"run": e.run, "reason": e.reason} for e in excluded]),
                          [Col("run", "run folder", "run"), Col("reason", "reason")])})
    return first, last


def _ab_value(v: Any, field: str) -> str:
    """A mean of an A/B's metric in as many digits as it needs, its unit where it has one."""
    if not isinstance(v, int | float) or v != v:
        return "–"
    unit = " samples/s" if field == "throughput_samples_per_s" else \
        " s" if field.endswith("_s") else ""
    return (f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}") + unit


def _ab_rows(rec: dict[str, Any]) -> pd.DataFrame:
    """One A/B record's rows as the page shows them: a comparison with fewer than
    ``tables.MIN_SEEDS_TO_CALL`` seeds on a side is not called, whatever its interval."""
    field = str(rec.get("field") or "")
    base_n = int(rec["rows"][0].get("n") or 0)
    out = []
    for i, r in enumerate(rec["rows"]):
        n = int(r.get("n") or 0)
        ci = r.get("ci95")
        mean = _ab_value(r.get("mean"), field) + (
            f" ± {_ab_value(ci, field).split(' ')[0]}" if isinstance(ci, int | float)
            and ci == ci else "")
        lo, hi = r.get("ratio_lo"), r.get("ratio_hi")
        ratio = r.get("ratio")
        verdict = r.get("verdict") or ""
        if i and min(n, base_n) < tables.MIN_SEEDS_TO_CALL:
            verdict = (f"fewer than {tables.MIN_SEEDS_TO_CALL} seeds ({n}+{base_n}): not "
                       "called")
        out.append({
            "arm": r.get("arm"), "n": n, "mean": mean,
            "ratio": "1 (baseline)" if i == 0 else "–" if not isinstance(ratio, int | float)
            else f"{ratio:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if isinstance(lo, int | float)
                                   and isinstance(hi, int | float) else ""),
            "p": r.get("p") if i else None, "verdict": verdict})
    return pd.DataFrame(out)


def _ab_sections(res: Results) -> list[dict[str, Any]]:
    """The A/B comparisons (``netsense ab``) that answer for these runs, the page's first
    section: those under the results folder, and, for a committed tree, the committed ones
    of the same scenarios beside it (``ab.related_records``)."""
    scenarios = {str((res.folders[r].config.get("scenario") or {}).get("name") or "")
                 for r in res.runs["run"]} if not res.runs.empty else set()
    committed = committed_runs_of(res.root)
    loaded = set(res.runs["run"]) if not res.runs.empty else set()
    out = []
    for rec in stats_ab.related_records(res.root, scenarios, committed):
        path = Path(rec["path"]).resolve()
        root = res.root.resolve()
        where = path.relative_to(root) if path.is_relative_to(root) else \
            path.relative_to(committed.resolve().parent.parent) if committed is not None \
            and path.is_relative_to(committed.resolve().parent.parent) else path
        if not rec.get("scenario"):  # a read-back that named none: its runs' (read already)
            known = [r for r in stats_ab.record_runs(rec, res.root) if r in loaded]
            rec = {**rec, "scenario": (res.folders[known[0]].config.get("scenario") or {})
                   .get("name") if known else None}
        seeds = rec.get("seeds") or []
        rows = _ab_rows(rec)
        out.append({
            "title": f"{where}: {rec.get('scenario') or 'scenario not recorded'}, "
                     f"{rec.get('metric', 'throughput')}, {len(seeds)} seeds per arm "
                     f"({min(seeds, default=0)}-{max(seeds, default=0)}), ratio to "
                     f"{rec['arms'][0]}",
            "html": html_table(rows, [
                Col("arm", "arm"), Col("n", "seeds", "int"),
                Col("mean", f"{rec.get('metric', 'throughput')}: mean ± 95 %"),
                Col("ratio", f"x {rec['arms'][0]} [95 % interval]"), Col("p", "p", "f3"),
                Col("verdict", "verdict")])})
    return out


def _ab_note() -> str:
    """What the A/B tables' intervals are (``netsense ab``'s own line, for any baseline)."""
    return stats_ab.INTERVALS.format(base="the baseline", reps=stats_ab.RESAMPLES)


def _headlines(res: Results, sp: pd.DataFrame) -> dict[str, Markup | None]:
    """The claim (time to accuracy, seeds, intervals), the verdicts, the throughput
    headline and the experiments not compared: the page's top, each None when empty."""
    claim = claim_table(res.tta(), sp, res.runs)
    verdicts = tables.verdict_table(sp) if not sp.empty else pd.DataFrame()
    thr_head = throughput_headline(sp)
    others = headline(sp, res.runs)
    others = others[others["note"] != ""] if not others.empty else others
    return {
        "claim": html_table(claim, [
            Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
            Col("method", "method"), Col("seeds", "seeds reaching the target"),
            Col("tta", "time to target (s, mean ± 95 % CI)"),
            Col("x", "NetSenseML's TTA speedup over it [95 % CI]"),
            Col("final", "final accuracy [95 % CI]")]) if not claim.empty else None,
        "verdicts": html_table(verdicts, [
            Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
            Col("won", "won", "int"), Col("tie", "tie", "int"), Col("lost", "lost", "int"),
            Col("few_seeds", f"fewer than {tables.MIN_SEEDS_TO_CALL} seeds (not called)", "int"),
            Col("unreached", "baseline never reached", "int"),
            Col("vs_oracle", "vs best fixed"), Col("oracle_tta_method", "best fixed"),
            Col("vs_oracle_tta", "TTA x best fixed [95 % CI]")]) if not verdicts.empty
        else None,
        "headline": html_table(thr_head, [
            Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
            Col("best_baseline", "fastest baseline"),
            Col("vs_best", "throughput x over it [95 % CI]"),
            Col("seeds", "seeds (NetSenseML / it)"),
            Col("range", "range over all baselines")]) if not thr_head.empty else None,
        "others": html_table(others, [
            Col("experiment", "experiment"), Col("rate_mbit", "rate (Mbit/s)", "f1"),
            Col("best_baseline", "fastest method"), Col("note", "not compared because")])
        if not others.empty else None,
    }


def render(results: Results | Path, runs: pd.DataFrame | None = None,
           figs: dict[str, list[Path]] | None = None, missing: dict[str, str] | None = None,
           steps: pd.DataFrame | None = None, *, verbose: bool = False,
           commit: str | None = None) -> str:
    """The page's HTML from the loaded results (:class:`Results`, read once) and the drawn
    figures. Figures not drawn are listed only with ``verbose``. ``commit``: the code's
    commit as ``git_commit`` said it before anything was written (default: asked now)."""
    if not isinstance(results, Results):
        results = Results.of(Path(results), runs, steps) if runs is not None and steps \
            is not None else Results.load(Path(results))
    res = results
    root, runs, steps = res.root, res.runs, res.steps
    sp = res.speedup()
    tta_note = _coarse_note(coarse_tta(runs, steps if steps is not None else pd.DataFrame()))
    first, last = _trouble_tables(res)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    paced = runs[runs["accelerator"] == "paced"] if "accelerator" in runs.columns else runs.iloc[0:0]
    return env.get_template("report.html.j2").render(
        title=_title(root, runs), n_runs=len(runs), n_ok=int((runs["status"] == "ok").sum()),
        n_bad=int((runs["status"] != "ok").sum()), n_repeats=tables.repeated_runs(runs),
        made_by=made_by(commit or git_commit()), footer=res.footer(),
        n_degraded=int(tables.is_degraded(runs).sum()), min_seeds=tables.MIN_SEEDS_TO_CALL,
        n_paced=len(paced), paced_k=", ".join(f"{k:g}" for k in sorted(
            paced["dilation"].dropna().unique())) if len(paced) else "",
        generated=time.strftime("%Y-%m-%d %H:%M %Z"),
        **_headlines(res, sp), ab_tables=_ab_sections(res), first_tables=first,
        ab_note=_ab_note(),
        figures=_figures(figs or {}, {**res.skipped, **(missing or {})}, verbose),
        tables=_main_tables(res, sp, tta_note) + last, tta_note=tta_note,
        scenarios=_scenarios(res.folders, runs), sweep_files=_sweep_files(_sweep_names(runs)),
        verbose=verbose,
        versions=html_table(_versions(res.folders, runs), [Col("fact", "fact", "run"),
                                                    Col("value", "value"),
                                                    Col("runs", "runs", "int")]),
    )


def build_report(root: Path | Results, out: Path | None = None,
                 figures_dir: Path | None = None, *, log: Any = print,
                 verbose: bool = False, include_degraded: bool = False) -> Path:
    """Draw the figures, then write the HTML page (atomically); returns its path. The
    results are read once (:class:`Results`) and handed to the figures and the page.

    Which code made the page is asked before the figures are drawn: redrawing a committed
    figure set changes tracked files, and the page would call its own clean code dirty."""
    commit = git_commit()
    res = root if isinstance(root, Results) else Results.load(
        Path(root), include_degraded=include_degraded)
    out = Path(out) if out else res.root / "report.html"
    files.no_links_below(res.root, out, "--html")
    figs = plots.make_figures(res, figures_dir, log=log, verbose=verbose)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render(res, figs=figs, verbose=verbose, commit=commit))
    return out
