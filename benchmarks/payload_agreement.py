"""Payload mode against recorded gradients: the same measurement? (issue 48, part 2)

    flock /tmp/netsense-heavy.lock .venv/bin/python benchmarks/payload_agreement.py \
        [--scenario paper-resnet18-star] [--rates 1000,300] [--seeds 0,1]
        [--methods allreduce,fp16,int8,topk:0.01,dgc:0.01,powersgd:4,netsenseml]
        [--arms recorded,payload-k,payload] [--k-methods M,...] [--out DIR] [--set key=value ...]
    python benchmarks/payload_agreement.py --summarize DIR/agreement-runs.json   # the table again

Per rate, seed and method, three arms run one after another (their order alternating
seed by seed): ``recorded`` (real DDP, real codecs on a recorded gradient, ``dilation:
auto``: the factor its host work needs), ``payload-k`` (payload mode at the recorded run's
own factor ``k``: the same dilation, so the two differ only in where the bytes come from)
and ``payload`` (payload mode at its own ``auto`` factor, a small one: the run whose cost
follows the network; against ``payload-k`` it is a dilation-invariance check). Finished runs in ``--out`` are read, not
run again: an interrupted comparison resumes.
``--k-methods`` limits the ``payload-k`` arm (as costly as ``recorded``) to those methods.

Printed and written (``agreement.csv``, ``agreement.md`` in ``--out``): each arm's virtual
throughput (mean and 95 % t-interval over seeds), each payload arm's ratio to recorded
(delta-method interval of the ratio of means), bytes per sample of each arm (equal when the
payload is right), the factor k, each arm's real seconds, and whether any run was late
beyond its scenario's ``max_overrun`` (degraded). The figures are printed, not asserted.
Needs root (real emulated networks).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.cli.common import parse_overrides  # noqa: E402
from testbed.common import files, stats  # noqa: E402
from testbed.common.names import slug  # noqa: E402
from testbed.config.scenario import apply_overrides, load_scenario  # noqa: E402
from testbed.orchestration.dilation import host_timing_s_in  # noqa: E402
from testbed.orchestration.run import run_scenario  # noqa: E402

ARMS = ("recorded", "payload-k", "payload")
METHODS = "allreduce,fp16,int8,topk:0.01,dgc:0.01,powersgd:4,netsenseml"


def run_arm(base: Any, arm: str, method: str, seed: int, k: float | None, folder: Path
            ) -> dict[str, Any]:
    over: dict[str, Any] = {"workload.grads": "recorded" if arm == "recorded" else "payload"}
    if arm == "payload-k":
        over["accelerator.dilation"] = k
    scn = apply_overrides(base, over)
    run_dir = folder / f"{slug(method)}-s{seed}"
    s = files.read_json(run_dir / "summary.json") or {}
    if s.get("status") == "ok":  # resumed: a finished run is read, not run again
        status = "ok"
    else:
        out = run_scenario(scn, method, seed, run_dir, progress=False)
        s, status, run_dir = out.summary, out.status, out.run_dir
    cfg = json.loads((run_dir / "config.json").read_text())
    samples = s.get("samples_total") or 0
    sent = s.get("bytes_sent_total") or 0
    return {"status": status, "reason": s.get("reason"),
            "throughput": s.get("throughput_samples_per_s"),
            "bytes_per_sample": sent / samples if samples else None,
            "k": float(cfg.get("accelerator", {}).get("dilation", 1.0)),
            "late_share": (s.get("overruns") or {}).get("late_share"),
            "degraded": bool(s.get("degraded")), "real_s": _real_s(s, cfg),
            "run_dir": str(run_dir)}


def _real_s(summary: dict[str, Any], config: dict[str, Any]) -> float:
    """What the run cost this host: its wall time and the ``auto`` host timing before it."""
    timing = host_timing_s_in(config.get("accelerator") or {}) or 0.0
    return round(float(summary.get("wall_s") or 0.0) + timing, 1)


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def summarize(rows: list[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    table = []
    keys = sorted({(r["rate"], r["method"]) for r in rows}, key=lambda x: (-x[0], x[1]))
    for rate, method in keys:
        sel = {a: [r for r in rows if (r["rate"], r["method"], r["arm"]) == (rate, method, a)
                   and r["status"] == "ok"] for a in arms}
        line: dict[str, Any] = {"rate_mbit": rate, "method": method}
        for a in arms:
            tp = stats.ci95(r["throughput"] for r in sel[a])
            line[f"{a}_samples_s"] = tp.mean
            line[f"{a}_ci"] = tp.half
            line[f"{a}_n"] = tp.n
            bps = {round(r["bytes_per_sample"], 3) for r in sel[a] if r["bytes_per_sample"]}
            line[f"{a}_bytes_per_sample"] = min(bps) if bps else None
            line[f"{a}_bytes_spread"] = (max(bps) - min(bps)) if bps else None
            line[f"{a}_k"] = "/".join(f"{r['k']:g}" for r in sel[a])
            line[f"{a}_real_s"] = sum(r["real_s"] for r in sel[a])
            line[f"{a}_degraded"] = sum(r["degraded"] for r in sel[a])
            if a != "recorded" and "recorded" in arms:
                ratio = stats.ratio_ci95([r["throughput"] for r in sel[a]],
                                         [r["throughput"] for r in sel["recorded"]])
                line[f"{a}_ratio"], line[f"{a}_lo"], line[f"{a}_hi"] = ratio
        table.append(line)
    return table


def markdown(table: list[dict[str, Any]], arms: list[str]) -> str:
    head = ["rate", "method"] + [f"{a} samples/s [k]" for a in arms]
    head += [f"{a} / recorded [95 % CI]" for a in arms if a != "recorded"]
    head += ["bytes/sample equal", "real s (" + " / ".join(arms) + ")", "degraded"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for t in table:
        cells = [f"{t['rate_mbit']:g}", t["method"]]
        cells += [f"{_fmt(t[f'{a}_samples_s'])} +- {_fmt(t[f'{a}_ci'])} (n {t[f'{a}_n']}) "
                  f"[k {t[f'{a}_k']}]" for a in arms]
        cells += [f"{_fmt(t.get(f'{a}_ratio'), '.3f')} [{_fmt(t.get(f'{a}_lo'), '.3f')}, "
                  f"{_fmt(t.get(f'{a}_hi'), '.3f')}]" for a in arms if a != "recorded"]
        bps = {t[f"{a}_bytes_per_sample"] for a in arms if t[f"{a}_n"]}
        spread = max((t[f"{a}_bytes_spread"] or 0) for a in arms)
        cells.append(("yes" if len(bps) == 1 else "no: " + ", ".join(_fmt(b, ".0f") for b in bps))
                     + (f" (seeds differ by {spread:.0f})" if spread else ""))
        cells.append(" / ".join(f"{t[f'{a}_real_s']:.0f}" for a in arms))
        cells.append(" / ".join(str(t[f"{a}_degraded"]) for a in arms))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="paper-resnet18-star")
    p.add_argument("--rates", default="1000,300")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--k-methods", default=None, help="methods that get the payload-k arm "
                   "(default: all)")
    p.add_argument("--rate-field", default="topology.rate_mbit")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--summarize", type=Path, default=None, metavar="RUNS_JSON",
                   help="run nothing: the table of an earlier agreement-runs.json")
    args = p.parse_args()
    if args.summarize is not None:
        rows = reread(args.summarize)
        write_table(rows, list(dict.fromkeys(r["arm"] for r in rows)), args.summarize.parent)
        return
    arms = [a for a in args.arms.split(",") if a]
    bad = sorted(set(arms) - set(ARMS))
    if bad:
        sys.exit(f"--arms: {bad[0]!r} is none of {', '.join(ARMS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="payload-agreement-"))
    base = load_scenario(args.scenario)
    if args.set:
        base = apply_overrides(base, parse_overrides(args.set))
    rows: list[dict[str, Any]] = []
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    for rate in [float(r) for r in args.rates.split(",")]:
        scn = apply_overrides(base, {args.rate_field: rate})
        for i, seed in enumerate(seeds):
            for method in methods:
                k = None
                order = arms if i % 2 == 0 else [a for a in arms[::-1]]
                if "payload-k" in order and "recorded" in order:  # payload-k needs its k
                    order = ["recorded", *[a for a in order if a != "recorded"]]
                if args.k_methods is not None and method not in args.k_methods.split(","):
                    order = [a for a in order if a != "payload-k"]
                for arm in order:
                    folder = out / f"{rate:g}" / arm
                    row = run_arm(scn, arm, method, seed, k, folder)
                    if arm == "recorded":
                        k = row["k"]
                    rows.append({"rate": rate, "method": method, "seed": seed, "arm": arm, **row})
                    print(f"  {rate:g} Mbit/s {method} s{seed} {arm}: {row['status']} "
                          f"{_fmt(row['throughput'])} samples/s, {_fmt(row['bytes_per_sample'], '.0f')}"
                          f" B/sample, k {row['k']:g}, late {_fmt(row['late_share'], '.4f')}, "
                          f"{row['real_s']:.0f} s", flush=True)
                files.write_json(out / "agreement-runs.json", {"runs": rows})
    write_table(rows, arms, out)


def reread(path: Path) -> list[dict[str, Any]]:
    """The runs of an earlier agreement-runs.json, their figures read again from their
    folders (summary.json): the table follows the runs, not the numbers typed then."""
    rows = (files.read_json(path) or {}).get("runs") or []
    for r in rows:
        if not Path(r["run_dir"]).is_absolute():  # a packed copy: beside the list
            r["run_dir"] = str(path.parent / r["run_dir"])
        s = files.read_json(Path(r["run_dir"]) / "summary.json") or {}
        samples = s.get("samples_total") or 0
        r["throughput"] = s.get("throughput_samples_per_s")
        r["bytes_per_sample"] = (s.get("bytes_sent_total") or 0) / samples if samples else None
        r["degraded"] = bool(s.get("degraded"))
        r["status"] = s.get("status", r["status"])
        r["real_s"] = _real_s(s, files.read_json(Path(r["run_dir"]) / "config.json") or {})
    return rows


def write_table(rows: list[dict[str, Any]], arms: list[str], out: Path) -> None:
    table = summarize(rows, arms)
    files.write_csv(out / "agreement.csv", list(table[0]), table)
    md = markdown(table, arms)
    files.atomic_write_text(out / "agreement.md", md)
    print(md)
    print(f"written: {out}/agreement.csv, agreement.md, agreement-runs.json")


if __name__ == "__main__":
    main()
