"""``netsense ab`` without running anything: the interleaved order, the input it refuses
(one line, exit 2, nothing made) and ``--from-runs`` on run folders written here, its
numbers against ``testbed.common.stats`` on the same values."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from testbed.analysis import ab_stats
from testbed.common import stats
from testbed.orchestration import ab as run_ab
from tests.cli.invoke import netsense_proc
from tests.reliability.helpers import one_line_error


def _run(root: Path, rel: str, method: str, seed: int, *, thr: float | None = None,
         status: str = "ok", started: str = "2026-01-01T00:00:00", scenario: str = "smoke",
         tta: float | None = None) -> Path:
    """A minimal run folder: config.json, summary.json and (ok) a steps.csv."""
    d = root / rel
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "scenario": {"name": scenario, "topology": {"kind": "star", "rate_mbit": 100}},
        "method": method, "seed": seed, "started_at": started}))
    summary = {"status": status, "method": method, "seed": seed,
               "throughput_samples_per_s": thr, "time_to_accuracy_s": tta}
    if status != "ok":
        summary["reason"] = "workers exited 1"
    (d / "summary.json").write_text(json.dumps(summary))
    if status == "ok":
        rows = ["rank,t,samples,step"] + [f"{r},{s * 0.1:.2f},32,{s}" for r in (0, 1)
                                          for s in range(1, 6)]
        (d / "steps.csv").write_text("\n".join(rows) + "\n")
    return d


BASE = [100.0, 104.0, 97.0, 101.0]
FAST = [120.0, 131.0, 115.0, 126.0]


def _ab_folder(root: Path) -> Path:
    """What `netsense ab smoke -a allreduce -a allreduce@abc --seeds 0-3` would leave:
    the same method in two arms, told apart by folder; one failed run of the second arm."""
    for s, (b, f) in enumerate(zip(BASE, FAST, strict=True)):
        _run(root, f"allreduce/smoke/r-allreduce-s{s}", "allreduce", s, thr=b,
             started=f"2026-01-01T00:0{s}:00")
        _run(root, f"allreduce-abc/smoke/r-allreduce-s{s}", "allreduce", s, thr=f,
             started=f"2026-01-01T00:0{s}:30")
    _run(root, "allreduce-abc/smoke/r-allreduce-s4", "allreduce", 4, status="failed",
         started="2026-01-01T00:09:00")
    return root


# ------------------------------------------------------------------------- pure parts


def test_plan_alternates_the_order_seed_by_seed() -> None:
    assert run_ab.plan(["A", "B"], [0, 1, 2, 3]) == [
        ("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("B", 3), ("A", 3)]
    assert run_ab.plan(["A", "B", "C"], [5, 9]) == [
        ("A", 5), ("B", 5), ("C", 5), ("C", 9), ("B", 9), ("A", 9)]
    # a seed added later continues the alternation where the session left it
    assert run_ab.plan(["A", "B"], [7], start=3) == [("B", 7), ("A", 7)]
    assert run_ab.next_seeds([0, 1, 5]) == [6]


def test_seeds_and_arms_parse_or_name_what_is_wrong() -> None:
    assert run_ab.parse_seeds("0-3,8") == [0, 1, 2, 3, 8]
    assert run_ab.parse_seeds("4") == [4]
    for bad, needle in (("3-1", "backwards"), ("0,0", "twice"), ("a", "not N or N-M"),
                        ("", "not N or N-M"), ("0-99999", "more than")):
        with pytest.raises(run_ab.ABError, match=needle):
            run_ab.parse_seeds(bad)
    arms = run_ab.parse_arms(["fp16", "topk:0.01", "netsenseml@HEAD~1"])
    assert [(a.method, a.rev, a.slug) for a in arms] == [
        ("fp16", None, "fp16"), ("topk:0.01", None, "topk-0.01"),
        ("netsenseml", "HEAD~1", "netsenseml-HEAD-1")]
    with pytest.raises(run_ab.ABError, match="given twice"):
        run_ab.parse_arms(["fp16", "fp16"])
    with pytest.raises(run_ab.ABError, match="at least 2"):
        run_ab.parse_arms(["fp16"])


def test_a_revision_resolves_to_its_commit_or_is_refused() -> None:
    (arm,) = run_ab.resolve_revisions([run_ab.parse_arm("fp16@HEAD")])
    assert arm.commit is not None and len(arm.commit) == 40
    with pytest.raises(run_ab.ABError, match="no revision 'no-such-rev-x'"):
        run_ab.resolve_revisions([run_ab.parse_arm("fp16@no-such-rev-x")])


# ------------------------------------------------------------------------- statistics


def test_compare_rows_are_the_stats_of_the_arms_values() -> None:
    obs = [ab_stats.Observation("A", s, "ok", v, f"a{s}") for s, v in enumerate(BASE)]
    obs += [ab_stats.Observation("B", s, "ok", v, f"b{s}") for s, v in enumerate(FAST)]
    obs += [ab_stats.Observation("B", 9, "failed", None, "b9", "boom"),
            ab_stats.Observation("B", 8, "ok", None, "b8")]  # no value of the metric
    res = ab_stats.compare(obs, ["A", "B"])
    a, b = res.rows
    assert (a["n"], a["ratio"]) == (4, 1.0) and math.isnan(a["p"])
    assert (a["mean"], a["ci95"]) == tuple(stats.ci95(BASE)[:2])
    r = stats.log_ratio_t(FAST, BASE)
    assert (b["ratio"], b["ratio_lo"], b["ratio_hi"]) == tuple(r)
    assert b["verdict"] == "faster" and b["seeds_to_tell"] == stats.seeds_to_tell(FAST, BASE)
    assert b["p"] == stats.permutation_p(FAST, BASE) == pytest.approx(2 / 70)
    assert b["ratio_width"] == pytest.approx((r.hi - r.lo) / r.ratio)
    assert (b["n"], b["failed"], b["no_value"]) == (4, 1, 1)
    assert any("seed 9 failed: boom" in x for x in res.left_out["B"])
    assert res.widest() == b["ratio_width"]


# ------------------------------------------------------------------------- the command


def test_from_runs_tells_arms_apart_by_folder_and_writes_ab_json_and_csv(tmp_path) -> None:
    root = _ab_folder(tmp_path / "ab-smoke")
    proc = netsense_proc(["ab", "--from-runs", str(root), "-a", "allreduce",
                          "-a", "allreduce@abc"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "allreduce@abc" in out and "x allreduce" in out
    assert "t-interval on the logs" in out and "permutation test" in out
    assert "verdict: allreduce@abc vs allreduce: faster" in out
    assert "left out of allreduce@abc: 1 run(s): seed 4 failed" in out
    r = stats.log_ratio_t(FAST, BASE)
    assert f"[{r.lo:.3f}, {r.hi:.3f}]" in out and f"{2 / 70:.3g}" in out
    data = json.loads((root / "ab.json").read_text())
    assert data["arms"] == ["allreduce", "allreduce@abc"]
    row = data["rows"][1]
    assert (row["n"], row["failed"]) == (4, 1)
    assert row["ratio"] == pytest.approx(
        math.exp(sum(map(math.log, FAST)) / 4 - sum(map(math.log, BASE)) / 4))
    assert data["rows"][0]["p"] is None  # NaN is written as null: strict JSON
    with open(root / "ab.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [x["arm"] for x in rows] == ["allreduce", "allreduce@abc"]
    assert float(rows[1]["p"]) == pytest.approx(2 / 70)

    # read back without --arm: the arms of its ab.json, in the same order
    again = netsense_proc(["ab", "--from-runs", str(root)], tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((root / "ab.json").read_text())["rows"] == data["rows"]

    # another comparison of the same runs goes beside the session's record, not over it
    other = netsense_proc(["ab", "--from-runs", str(root), "-a", "allreduce@abc",
                           "-a", "allreduce", "--metric", "tta"], tmp_path)
    assert other.returncode == 0, other.stderr
    assert json.loads((root / "ab.json").read_text())["rows"] == data["rows"]
    beside = json.loads((root / "ab-tta-allreduce-abc_vs_allreduce.json").read_text())
    assert beside["arms"] == ["allreduce@abc", "allreduce"] and beside["metric"] == "tta"


def test_from_runs_by_method_counts_a_seed_once_and_names_the_metric(tmp_path) -> None:
    root = tmp_path / "results"
    for s, (b, f) in enumerate(zip(BASE, FAST, strict=True)):
        _run(root, f"smoke/r-allreduce-s{s}", "allreduce", s, thr=b, tta=10.0 + s)
        _run(root, f"smoke/r-fp16-s{s}", "fp16", s, thr=f, tta=8.0 + s)
    # a repeat of seed 0 for fp16, started later: it replaces the first, counted once
    _run(root, "smoke/r-fp16-s0-2", "fp16", 0, thr=FAST[0], tta=8.0,
         started="2026-01-02T00:00:00")
    proc = netsense_proc(["ab", "--from-runs", str(root), "--metric", "tta"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((root / "ab.json").read_text())
    assert data["arms"] == ["allreduce", "fp16"] and data["field"] == "time_to_accuracy_s"
    assert data["rows"][1]["n"] == 4 and data["rows"][1]["repeats"] == 1
    assert data["rows"][1]["ratio"] == pytest.approx(  # geometric means
        stats.log_ratio_t([8.0 + s for s in range(4)], [10.0 + s for s in range(4)]).ratio)
    # a time's ratio below 1 is faster; the per-run lines name the metric, not samples/s
    assert "verdict: fp16 vs allreduce: " in proc.stdout
    # the order of --arm decides the baseline (another comparison: written beside ab.json)
    proc = netsense_proc(["ab", "--from-runs", str(root), "-a", "fp16", "-a", "allreduce"],
                         tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((root / "ab-throughput-fp16_vs_allreduce.json").read_text())["rows"][1]["ratio"] == pytest.approx(
        stats.log_ratio_t(BASE, FAST).ratio)


@pytest.mark.parametrize(("args", "needles"), [
    (["--metric", "nonsense"], ["--metric 'nonsense'", "unknown"]),
    (["-a", "allreduce", "-a", "allreduce"], ["--arm 'allreduce'", "given twice"]),
    (["-a", "allreduce", "-a", "int8"], ["--arm 'int8'", "no runs of it"]),
])
def test_from_runs_refuses_bad_input_in_one_line(tmp_path, args, needles) -> None:
    root = _ab_folder(tmp_path / "ab-smoke")
    proc = netsense_proc(["ab", "--from-runs", str(root), *args], tmp_path)
    assert proc.returncode == 2, proc.stdout
    one_line_error(proc.stderr, *needles)
    assert not (root / "ab.json").exists()


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*")) if root.exists() else set()


@pytest.mark.parametrize(("args", "needles"), [
    (["-a", "fp16", "-a", "fp16"], ["--arm 'fp16'", "given twice"]),
    (["-a", "fp16", "-a", "int8@v/1", "-a", "int8@v-1"], ["'int8@v-1'", "folder", "unique"]),
    (["-a", "fp16"], ["at least 2 arms"]),
    (["-a", "fp16", "-a", "nosuch"], ["--arm 'nosuch'", "unknown method"]),
    (["-a", "fp16", "-a", "int8@"], ["--arm 'int8@'", "no revision"]),
    (["-a", "fp16", "-a", "int8@no-such-rev-x"], ["no revision 'no-such-rev-x'"]),
    (["-a", "fp16", "-a", "int8", "--seeds", "5-2"], ["--seeds '5-2'", "backwards"]),
    (["-a", "fp16", "-a", "int8", "--seeds", "0,x"], ["--seeds '0,x'"]),
    (["-a", "fp16", "-a", "int8", "--metric", "speed"], ["--metric 'speed'", "unknown"]),
    (["-a", "fp16", "-a", "int8", "--until-width", "-1"], ["--until-width"]),
    (["-a", "fp16", "-a", "int8", "--until-width", "0.1", "--seeds", "0-7",
      "--max-seeds", "4"], ["--max-seeds 4"]),
    (["-a", "fp16", "-a", "int8", "--set", "workload.nosuch=1"], ["nosuch"]),
])
def test_bad_input_is_one_line_exit_2_and_nothing_made(tmp_path, args, needles) -> None:
    proc = netsense_proc(["ab", "smoke", "-r", str(tmp_path / "res"), *args], tmp_path)
    assert proc.returncode == 2, proc.stdout
    one_line_error(proc.stderr, *needles)
    assert _tree(tmp_path / "res") == set()
    assert str(tmp_path) not in run_ab._git("worktree", "list").stdout


def test_until_width_stops_when_every_interval_is_narrow_or_at_max_seeds() -> None:
    wide = ab_stats.compare(
        [ab_stats.Observation("A", s, "ok", v, "") for s, v in enumerate(BASE)]
        + [ab_stats.Observation("B", s, "ok", v, "") for s, v in enumerate(FAST)], ["A", "B"])
    w = wide.widest()
    assert 0 < w < 1
    assert ab_stats.stop_reason(wide, w / 2, 4, 16) is None  # add a seed
    assert "--max-seeds 16 reached" in ab_stats.stop_reason(wide, w / 2, 16, 16)
    assert "within" in ab_stats.stop_reason(wide, w * 1.01, 4, 16)
    one = ab_stats.compare([ab_stats.Observation("A", 0, "ok", 1.0, ""),
                            ab_stats.Observation("B", 0, "ok", 2.0, "")], ["A", "B"])
    assert one.widest() == math.inf and ab_stats.stop_reason(one, 10.0, 1, 16) is None


def test_the_verdict_says_faster_slower_or_the_seeds_that_would_tell() -> None:
    told = stats.log_ratio_t(FAST, BASE)
    assert ab_stats.verdict(told, 4, 4, 2) == "faster"
    assert ab_stats.verdict(stats.log_ratio_t(BASE, FAST), 4, 4, 2) == "slower"
    # a time: below 1 is faster; another metric: higher / lower
    assert ab_stats.verdict(stats.log_ratio_t(BASE, FAST), 4, 4, 2, "time_to_accuracy_s") == "faster"
    assert ab_stats.verdict(told, 4, 4, 2, "bytes_sent_total") == "higher"
    # 2 + 2 seeds of the kind (each arm +-61 %): the interval holds 1, and says so
    a, b = [100.0, 160.0], [95.0, 140.0]
    r = stats.log_ratio_t(a, b)
    assert r.lo < 1 < r.hi
    text = ab_stats.verdict(r, 2, 2, stats.seeds_to_tell(a, b))
    assert text.startswith("cannot tell at 2+2 seeds (the interval holds 1); ~")
    assert "seeds per arm would tell" in text
    assert ab_stats.verdict(stats.log_ratio_t([1.0], b), 1, 2, None).startswith(
        "cannot tell: an interval needs 2 or more seeds per arm (have 1+2)")


def test_a_runs_line_shows_the_metric_it_is_compared_by() -> None:
    from testbed.cli.ab import metric_text

    s = {"throughput_samples_per_s": 123.45, "time_to_accuracy_s": 41.234}
    assert metric_text(s, "throughput_samples_per_s", "throughput") == "123.5 samples/s"
    assert metric_text(s, "time_to_accuracy_s", "tta") == "tta 41.23 s"
    assert metric_text({}, "time_to_accuracy_s", "tta") == "no tta"
