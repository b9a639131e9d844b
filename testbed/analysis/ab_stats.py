"""The statistics of an A/B comparison (``netsense ab``): per arm a mean over seeds, and its
ratio to the first arm with how sure that ratio is.

Why its own module: ``compare`` puts any runs side by side with a t-interval per group, which
says how well each mean is known but not whether two of them differ; deciding "keep this
change or not" needs the ratio's own interval and a test. Here, from the runs alone (the
session's own outcomes, or run folders read back with ``--from-runs``, the same numbers):

* the metric of a run is a number of its summary.json: ``throughput`` is
  ``throughput_samples_per_s``, ``tta`` is ``time_to_accuracy_s``, any other name is that
  summary field (``testbed.common.metrics`` defines them, once, for summary.json and the
  tables alike);
* per arm: n seeds, the mean and its 95 % Student-t interval (``stats.ci95``);
* per arm after the first: the ratio of its geometric mean to the first arm's with the
  95 % Welch t-interval on the logs (``stats.log_ratio_t``: honest from 2 seeds per arm,
  where a bootstrap is not; its module says why and ``tests/common/test_stats.py`` measures
  the coverage at 2, 3 and 6 seeds) and the two-sided permutation p of equal means
  (``stats.permutation_p``), both unpaired: seed s of two arms are two runs, not a pair
  (the workers' data order is seeded, the network's timing is not);
* per arm after the first, a verdict (:func:`verdict`): faster / slower (or higher / lower
  for a metric that is no time or rate) when the interval excludes 1, else "cannot tell"
  with the seeds per arm that would tell if the observed difference and spread held
  (``stats.seeds_to_tell``);
* each seed counts once per arm (its latest finished run); failed runs, runs without a value
  of the metric (a target never reached has no time to accuracy) and repeated seeds are
  left out and counted, never silently.

Which arm a run folder belongs to (``--from-runs``): a run under ``<folder>/<arm slug>/``
(what ``netsense ab`` writes) is that arm's; otherwise a run of the arm's method, for an arm
without ``@REV``. Without ``--arm`` the arms are those of the folder's ab.json (a comparison
read back), else the methods of the runs in the order they were first started.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.analysis import loading
from testbed.common import files, stats
from testbed.common.names import slug

#: Short names of the metrics; any other summary.json field may be named as it is.
METRICS = {"throughput": "throughput_samples_per_s", "tta": "time_to_accuracy_s"}
#: The numeric fields a finished run's summary.json has (``--metric`` before any run exists).
SUMMARY_FIELDS = ("throughput_samples_per_s", "time_to_accuracy_s", "final_accuracy",
                  "steps", "samples_total", "train_time_s", "bytes_sent_total", "comm_s_mean",
                  "kept_ratio_mean", "wall_s")
RESAMPLES = 10000
BOOTSTRAP_SEED = 0  # the permutation test's random splits (beyond exact enumeration)
COLUMNS = ["arm", "method", "rev", "n", "mean", "ci95", "ratio", "ratio_lo", "ratio_hi",
           "ratio_width", "p", "verdict", "seeds_to_tell", "failed", "no_value", "repeats"]
#: Fields where more is better (a ratio above 1 is "faster" / "higher"); the rest of
#: SUMMARY_FIELDS' times and byte counts are better smaller.
HIGHER_BETTER = ("throughput_samples_per_s", "final_accuracy", "steps", "samples_total")
#: Fields that are a speed or a time: their verdict says faster / slower.
SPEED_FIELDS = ("throughput_samples_per_s", "time_to_accuracy_s", "train_time_s", "wall_s",
                "comm_s_mean")


class ABInputError(ValueError):
    """A metric, arm or folder the comparison cannot use; ``str()`` is the one line."""


def metric_field(metric: str, known: set[str] | None = None) -> str:
    """The summary.json field of ``metric``; ABInputError listing the choices otherwise.
    ``known``: further fields accepted (those the runs at hand have)."""
    name = METRICS.get(metric, metric)
    if name in SUMMARY_FIELDS or name in (known or set()):
        return name
    raise ABInputError(f"--metric {metric!r}: unknown; use {', '.join(METRICS)} or a "
                       f"summary field ({', '.join(SUMMARY_FIELDS[2:])})")


def value_of(summary: dict[str, Any], name: str) -> float | None:
    """The run's finite number under ``name``, else None."""
    v = stats.finite([summary.get(name)])
    return v[0] if v else None


@dataclass
class Observation:
    """One run of one arm: its seed, status, the metric's value (None: none) and folder."""

    arm: str
    seed: int
    status: str
    value: float | None
    run: str
    reason: str | None = None
    started_at: str = ""


@dataclass
class Result:
    """The comparison: one row per arm (``COLUMNS``) and what was left out, by arm."""

    arms: list[str]
    rows: list[dict[str, Any]]
    left_out: dict[str, list[str]] = field(default_factory=dict)

    def widest(self) -> float:
        """The widest relative interval (hi - lo) / ratio over the arms after the first;
        inf when one has none (fewer than two values)."""
        w = [r["ratio_width"] for r in self.rows[1:]]
        return max((x if x == x else math.inf for x in w), default=math.inf)


def stop_reason(result: Result, width: float, seeds: int, max_seeds: int) -> str | None:
    """Why ``--until-width`` stops after ``seeds`` seeds, or None to add one more: every
    ratio's relative interval within ``width``, or ``max_seeds`` reached (said either way)."""
    widest = result.widest()
    if widest <= width:
        return (f"every ratio's interval is within {width:g} of it (widest {widest:.3f}) at "
                f"{seeds} seeds")
    if seeds >= max_seeds:
        return (f"--max-seeds {max_seeds} reached; the widest interval is {widest:.3f} of its "
                f"ratio, more than {width:g}")
    return None


def method_of_label(label: str) -> str:
    return label.partition("@")[0]


def verdict(ratio: stats.Ratio, n_arm: int, n_base: int, needed: int | None,
            field: str = "throughput_samples_per_s") -> str:
    """One word and why: ``faster`` / ``slower`` (``higher`` / ``lower`` for a metric that
    is no speed or time; a time's ratio below 1 is faster) when the interval excludes 1,
    else ``cannot tell at N+M seeds`` and the seeds per arm that would tell."""
    if n_arm < 2 or n_base < 2 or ratio.lo != ratio.lo:
        return (f"cannot tell: an interval needs 2 or more seeds per arm (have "
                f"{n_arm}+{n_base})")
    if ratio.lo > 1 or ratio.hi < 1:
        up = ratio.lo > 1
        if field in SPEED_FIELDS:
            better = up == (field in HIGHER_BETTER)
            return "faster" if better else "slower"
        return "higher" if up else "lower"
    tell = ("no difference seen" if needed is None and ratio.ratio == 1 else
            f"more than {stats.MAX_SEEDS_TO_TELL} seeds per arm would be needed"
            if needed is None else f"~{needed} seeds per arm would tell x{ratio.ratio:.3g} "
            "from 1 if this difference and spread held")
    return f"cannot tell at {n_arm}+{n_base} seeds (the interval holds 1); {tell}"


def compare(observations: list[Observation], arms: list[str], *, reps: int = RESAMPLES,
            seed: int = BOOTSTRAP_SEED, field: str = "throughput_samples_per_s") -> Result:
    """Rows per arm (module doc), in the order of ``arms``; the first is the baseline."""
    values: dict[str, list[float]] = {}
    left: dict[str, list[str]] = {a: [] for a in arms}
    counts = {a: {"failed": 0, "no_value": 0, "repeats": 0} for a in arms}
    for a in arms:
        mine = [o for o in observations if o.arm == a]
        ok = [o for o in mine if o.status == "ok"]
        for o in mine:
            if o.status != "ok":
                counts[a]["failed"] += 1
                left[a].append(f"seed {o.seed} {o.status}: {o.reason or 'no reason recorded'}"
                               f" ({o.run})")
        latest: dict[int, Observation] = {}
        for o in sorted(ok, key=lambda o: (o.started_at, o.run)):
            if o.seed in latest:
                counts[a]["repeats"] += 1
                left[a].append(f"seed {o.seed}: an earlier run of the same seed "
                               f"({latest[o.seed].run})")
            latest[o.seed] = o
        vals = []
        for s in sorted(latest):
            o = latest[s]
            if o.value is None:
                counts[a]["no_value"] += 1
                left[a].append(f"seed {s}: no value of the metric ({o.run})")
            else:
                vals.append(o.value)
        values[a] = vals
    base = values[arms[0]] if arms else []
    rows = []
    for i, a in enumerate(arms):
        mean, half, n = stats.ci95(values[a])
        verdict_text, needed = None, None
        if i == 0:
            r = stats.Ratio(1.0 if n else math.nan, math.nan, math.nan)
            p = math.nan
        else:
            r = stats.log_ratio_t(values[a], base)
            p = stats.permutation_p(values[a], base, reps=reps, seed=seed)
            needed = stats.seeds_to_tell(values[a], base)
            verdict_text = verdict(r, n, len(stats.finite(base)), needed, field)
        width = (r.hi - r.lo) / r.ratio if r.ratio == r.ratio and r.ratio > 0 else math.nan
        method, _, rev = a.partition("@")
        rows.append({"arm": a, "method": method, "rev": rev or None, "n": n, "mean": mean,
                     "ci95": half, "ratio": r.ratio, "ratio_lo": r.lo, "ratio_hi": r.hi,
                     "ratio_width": width, "p": p, "verdict": verdict_text,
                     "seeds_to_tell": needed, **counts[a]})
    return Result(list(arms), rows, {a: v for a, v in left.items() if v})


def observation(arm: str, seed: int, summary: dict[str, Any], status: str, run: str,
                name: str) -> Observation:
    """One run as the comparison sees it (``name``: the metric's summary field)."""
    return Observation(arm, int(seed), status, value_of(summary, name) if status == "ok"
                       else None, run, summary.get("reason"), str(summary.get("started_at")
                                                               or ""))


def arms_from_json(folder: Path) -> list[str] | None:
    """The arms a comparison written into ``folder`` (ab.json) had, in order; None if none."""
    data = files.read_json(Path(folder) / "ab.json") or {}
    arms = data.get("arms")
    if isinstance(arms, list) and arms and all(isinstance(a, str) for a in arms):
        return arms
    return None


def from_runs(folder: Path, arms: list[str] | None, scenario: str | None, name: str,
              loaded: loading.Loaded | None = None
              ) -> tuple[list[str], list[Observation], list[loading.Excluded]]:
    """(arms, observations, damaged folders) of the run folders under ``folder`` (module
    doc: which arm a run is), as the run reader loaded them (``loaded``; default: read
    now); ABInputError when nothing there can be compared."""
    loaded = loaded if loaded is not None else loading.load_all(folder)
    runs = [r for r in loaded.runs if not any(p.startswith(".") for p in Path(r.run).parts)]
    if scenario is not None:
        runs = [r for r in runs if _scenario_of(r) == scenario]
        if not runs:
            raise ABInputError(f"--from-runs: no run folders of scenario {scenario!r} under "
                               f"{folder}")
    names = sorted({_scenario_of(r) for r in runs})
    if len(names) > 1:
        raise ABInputError(f"--from-runs: runs of {len(names)} scenarios under {folder} "
                           f"({', '.join(names)}); name one as SCENARIO")
    if not runs:
        raise ABInputError(f"--from-runs: no run folders (summary.json) under {folder}")
    runs.sort(key=lambda r: (str(r.config.get("started_at") or ""), r.run))
    if arms is None:
        arms = arms_from_json(folder) or list(dict.fromkeys(_method_of(r) for r in runs))
    by_slug = {slug(a): a for a in arms}
    by_method = {method_of_label(a): a for a in arms if "@" not in a}
    obs = []
    for r in runs:
        arm = by_slug.get(Path(r.run).parts[0]) or by_method.get(_method_of(r))
        if arm is None:
            continue
        seed = r.config.get("seed", r.summary.get("seed"))
        if not isinstance(seed, int):
            continue
        o = observation(arm, seed, {**r.summary, "reason": r.reason,
                                    "started_at": r.config.get("started_at")},
                        r.status, r.run, name)
        obs.append(o)
    found = {o.arm for o in obs}
    missing = [a for a in arms if a not in found]
    if missing:
        raise ABInputError(f"--arm {missing[0]!r}: no runs of it under {folder} (arms "
                           f"found: {', '.join(a for a in arms if a in found) or 'none'})")
    if len(arms) < 2:
        raise ABInputError(f"--from-runs: one arm ({arms[0]}) under {folder}; an A/B needs "
                           "two or more")
    return arms, obs, loaded.excluded


def known_fields(folder: Path, loaded: loading.Loaded | None = None) -> set[str]:
    """Numeric summary fields of the finished runs under ``folder`` (a metric may name any),
    as loaded (``loaded``; default: read now)."""
    out: set[str] = set()
    for r in (loaded if loaded is not None else loading.load_all(folder)).runs:
        out |= {k for k, v in r.summary.items() if value_of(r.summary, k) is not None}
    return out


def _scenario_of(r: loading.RunData) -> str:
    return str((r.config.get("scenario") or {}).get("name") or "")


def _method_of(r: loading.RunData) -> str:
    return str(r.summary.get("method") or r.config.get("method") or "")


INTERVALS = ("mean ±: half-width of the 95 % Student-t interval over seeds; ratio: geometric "
             "mean(arm) / geometric mean({base}), its interval Welch's 95 % t-interval on the "
             "logs (honest from 2 seeds per arm, and wide there: t = 12.7 at 1 degree of "
             "freedom; no bootstrap, which over 2 seeds has 3 distinct means per arm); p: "
             "two-sided permutation test of equal means (exact over every split of the seeds "
             "when there are at most {reps}, else {reps} random splits; with 2 + 2 seeds it "
             "cannot go below 0.33)")


def explain(result: Result, reps: int = RESAMPLES) -> str:
    """The line that says what the table's intervals are."""
    return INTERVALS.format(base=result.arms[0], reps=reps)


def write(folder: Path, result: Result, observations: list[Observation], info: dict[str, Any],
          stem: str = "ab") -> list[Path]:
    """<stem>.json (everything: arms, rows, runs, what was left out, ``info``) and
    <stem>.csv (the rows), atomically, in ``folder``; ``stem`` ab unless a read-back asks
    another comparison of a session's runs (:func:`readback_stem`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {**info, "arms": result.arms, "rows": result.rows, "left_out": result.left_out,
               "runs": [asdict(o) for o in observations], "intervals": explain(result)}
    files.write_json(folder / f"{stem}.json", payload)
    files.write_csv(folder / f"{stem}.csv", COLUMNS,
                    [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                      for k, v in r.items()} for r in result.rows])
    return [folder / f"{stem}.json", folder / f"{stem}.csv"]


def readback_stem(prior: dict[str, Any], arms: list[str], metric: str) -> str:
    """Where ``--from-runs`` writes: over ab.json when it asks what the session asked (its
    arms and metric, or no session record), else beside it, named for the comparison
    (``ab-throughput-fp16_vs_int8``: each arm's folder slug), so the session's own record
    is never overwritten."""
    if not prior or (prior.get("arms") == arms and prior.get("metric", "throughput") == metric):
        return "ab"
    return f"ab-{slug(metric)}-{'_vs_'.join(slug(a) for a in arms)}"


# ------------------------------------------------------------- committed comparisons, read
#: The file names an A/B's table has (a session's ab.json, a read-back's ab-<metric>-<arms>).
RECORD_GLOB = "ab*.json"


def records(folder: Path, runs_scenario: bool = True) -> list[dict[str, Any]]:
    """Every A/B table written under ``folder`` (a session's or a read-back's), as written,
    with ``path`` (the file) and ``scenario`` (the record's, else, with ``runs_scenario``,
    that of the first of its runs found beside it), folder by folder. What the report shows first: the committed
    comparisons are the evaluation's current answer. In each folder the session's own
    ab.json comes before its read-backs."""
    out = []
    for path in sorted(Path(folder).rglob(RECORD_GLOB),
                       key=lambda p: (p.parent, p.name != "ab.json", p.name)):
        data = files.read_json(path)
        if not (isinstance(data, dict) and isinstance(data.get("rows"), list)
                and isinstance(data.get("arms"), list) and data["rows"]):
            continue
        out.append({**data, "path": path, "scenario": data.get("scenario")
                    or (_record_scenario(path.parent, data) if runs_scenario else None)})
    return out


def _record_scenario(where: Path, data: dict[str, Any]) -> str | None:
    """The scenario of a record's first run whose config.json is found under ``where``."""
    for o in data.get("runs") or []:
        cfg = files.read_json(where / str(o.get("run", "")) / "config.json") \
            if isinstance(o, dict) and o.get("run") else None
        if isinstance(cfg, dict):
            return (cfg.get("scenario") or {}).get("name")
    return None


def related_records(root: Path, scenarios: set[str], committed: Path | None
                    ) -> list[dict[str, Any]]:
    """The comparisons :func:`records` finds under ``root``, and, where ``committed`` (the
    checkout's committed results, ``results/runs/``) is given, those under it of the
    ``scenarios`` ``root``'s runs ran: the evaluation's answer for a scenario may sit in a
    sibling tree (accel-crossover's d70 runs 2 seeds a method; its 6-seed A/B is
    ``accel-policy/d70``). Each record once; the scenario of one under ``root`` only as
    recorded (the caller holds its runs' configs: ``record_runs``)."""
    own = records(root, runs_scenario=False)
    seen = {Path(r["path"]).resolve() for r in own}
    more = [r for r in records(committed) if Path(r["path"]).resolve() not in seen
            and r.get("scenario") in scenarios] if committed is not None and \
        committed.is_dir() else []
    return own + more


def record_runs(rec: dict[str, Any], root: Path) -> list[str]:
    """The record's runs as paths relative to ``root`` (where it lies under ``root``)."""
    where = Path(rec["path"]).parent.resolve()
    if not where.is_relative_to(Path(root).resolve()):
        return []
    base = where.relative_to(Path(root).resolve())
    return [str(base / str(o["run"])) for o in rec.get("runs") or []
            if isinstance(o, dict) and o.get("run")]
