"""An own job that never calls ``hooks.report`` in every table, ``compare`` and ``report``.

Why (issue 50): a stranger's script with only the two hook lines showed samples/s "-" in
the tables, "0.0 samples/s" in compare, "not reached (0/1)" in the report and "NetSenseML
only: no baseline (methods: fp16, netsenseml)" for a run of two methods. Its step records
carry steps, bytes and (now) the batch the hook saw the model given; nothing measured its
accuracy, so no cell may say the target was missed.

The run folders are real: ``tests/jobs/tiny_job.py --no-report`` on 2 ranks on loopback,
forked from the session's zygote as ``netsense run`` starts an own job, writing through the
hook, steps.csv and the summary made by the orchestrator's own code
(``tests/analysis/own_job_runs.py``); no emulated network.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from testbed.analysis import compare, report, tables
from tests.analysis.own_job_runs import own_job_run
from tests.cli.invoke import netsense

#: tiny_job.py's default batch per rank, and 2 ranks
BATCH, WORLD = 32, 2


@pytest.fixture(scope="module")
def job_tree(tmp_path_factory: pytest.TempPathFactory, zygote) -> Path:
    root = tmp_path_factory.mktemp("own") / "my-job"
    for method in ("fp16", "netsenseml"):
        own_job_run(zygote, root / f"20261207-000000-{method}-s0", method,
                    job_args=["--steps", "12", "--no-report"])
    return root


def test_the_summary_has_samples_steps_and_bytes_and_says_no_accuracy_was_reported(
        job_tree: Path) -> None:
    import json

    for run in sorted(job_tree.iterdir()):
        s = json.loads((run / "summary.json").read_text())
        assert s["steps"] == 12 and s["samples_total"] == 12 * BATCH * WORLD
        assert s["throughput_samples_per_s"] > 0 and s["steps_per_s"] > 0
        # one definition: samples/s is the steps/s x the global batch
        assert s["throughput_samples_per_s"] == pytest.approx(
            s["steps_per_s"] * BATCH * WORLD, rel=1e-2)
        assert s["bytes_sent_total"] > 0
        assert s["accuracy_reported"] is False and s["samples_from"] == "model input"
        assert s["final_accuracy"] is None and s["time_to_accuracy_s"] is None


def test_the_runs_table_has_throughput_and_steps_per_s(job_tree: Path) -> None:
    runs, _ = tables.load_runs(job_tree)
    assert sorted(runs["method"]) == ["fp16", "netsenseml"]
    assert (runs["throughput"] > 0).all() and (runs["steps_per_s"] > 0).all()
    assert (runs["bytes_sent_total"] > 0).all()
    assert not runs["accuracy_reported"].any()
    rep = tables.reported_by(runs)
    assert set(rep.values()) == {0} and len(rep) == 2
    sp = tables.speedup_table(runs)
    fp16 = sp[sp["baseline"] == "fp16"].iloc[0]
    assert not math.isnan(fp16["throughput_speedup"])  # a baseline with samples/s now
    md = tables.speedup_markdown(sp, runs)
    assert tables.NOT_REPORTED in md and "not reached" not in md


def test_compare_shows_samples_per_s_and_not_reported(job_tree: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    runs, _ = compare.load([job_tree])
    groups = compare.table(runs)
    assert (groups["throughput"] > 0).all() and (groups["steps_per_s"] > 0).all()
    assert (groups["reached"] == tables.NOT_REPORTED).all()
    res = netsense(["compare", str(job_tree), "-o", str(tmp_path / "cmp")], tmp_path,
                   monkeypatch)
    assert res.exit_code == 0, res.output
    assert tables.NOT_REPORTED.split()[0] in res.output and "0.0 ±" not in res.output
    assert " 0/1" not in res.output


def test_report_says_not_reported_and_compares_the_two_methods(job_tree: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    runs, _ = tables.load_runs(job_tree)
    sp = tables.speedup_table(runs)
    head = report.headline(sp, runs)
    assert len(head) == 1 and head.iloc[0]["best_baseline"] == "fp16"
    assert pd.notna(head.iloc[0]["vs_best"]) and "no baseline" not in head.iloc[0]["note"]
    claim = report.claim_table(tables.tta_table(runs), sp, runs)
    assert (claim["tta"] == tables.NOT_REPORTED).all()
    assert (claim["final"] == tables.NOT_REPORTED).all()
    html = tmp_path / "report.html"
    res = netsense(["report", "-r", str(job_tree), "--html", str(html), "--figures",
                    str(tmp_path / "figs")], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    text = html.read_text()
    assert tables.NOT_REPORTED in text
    # no cell says the target was missed or that there was no baseline (the notes that
    # explain "n/a" in general may say "not reached")
    assert "not reached (" not in text and "no baseline" not in text
    assert "reached target</th>" in text and ">no</td>" not in text
    # no accuracy and no loss: no empty frame of axes (the stranger's report drew one),
    # the figure skipped with the reason
    assert not (tmp_path / "figs" / "accuracy_vs_time.png").exists()
    assert "recorded no accuracy and no loss" in (tmp_path / "figs" / "skipped.csv").read_text()


def test_the_hook_counts_the_model_inputs_or_takes_the_scenarios_samples(tmp_path: Path,
                                                                       zygote) -> None:
    import json

    stated = own_job_run(zygote, tmp_path / "stated", "fp16", job_args=["--steps", "4", "--no-report"],
                         samples=50)
    assert stated["samples_total"] == 4 * 50 * WORLD
    assert stated["samples_from"] == "scenario"
    told = own_job_run(zygote, tmp_path / "told", "fp16", job_args=["--steps", "4"])
    assert told["samples_total"] == 4 * BATCH * WORLD and told["samples_from"] == "report"
    assert told["accuracy_reported"] is True
    rows = [json.loads(x) for x in
            (tmp_path / "stated" / "workers" / "rank0.jsonl").read_text().splitlines()]
    assert rows[0]["own_job"] is True
    assert [r["samples"] for r in rows if r["kind"] == "step"] == [50 * WORLD] * 4
