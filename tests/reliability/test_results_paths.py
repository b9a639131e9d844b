"""Paths and files near a results tree: what a run folder names is checked like an input,
links are never written through nor read out of the tree, files are as readable as the
umask says, and a YAML key given twice is refused.

* a crafted sweep.json (``"sweep": "../../<elsewhere>/secret"``, an absolute path) must not
  put that YAML file's text into report.html, a page meant to be shared;
* a symlinked ``figures/`` is refused by plot and report (one line, exit 2), its target
  untouched; a summary.json linking out of the tree excludes its run;
* a run folder of a sweep that is a link is refused (the sweep goes on, no traceback), its
  target untouched;
* every atomically written file gets 0666 less the umask (mkstemp alone gives 0600);
* duplicate YAML keys: one line naming both lines, exit 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.analysis import loading
from testbed.common import files
from tests.reliability.helpers import one_line_error, run_cli
from tests.reliability.run_folders import good_run

SECRET = "top-secret-token-5f1c"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for rate in (10, 50):
        for m in ("allreduce", "netsenseml"):
            good_run(root, rate, m)
    return root


def test_a_crafted_sweep_name_never_puts_a_file_into_the_report(tmp_path):
    root = _tree(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.yaml").write_text(f"token: {SECRET}\n")
    runs = sorted(root.rglob("sweep.json"))
    for path, name in zip(runs, [str(outside / "secret"), "../../../elsewhere/secret"],
                          strict=False):
        meta = json.loads(path.read_text())
        meta["sweep"] = name
        path.write_text(json.dumps(meta))
    proc = run_cli(["report", str(root)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (root / "report.html").read_text()
    assert SECRET not in page
    assert "testbed/sweeps/sw.yaml" not in page  # no such committed sweep: nothing shown


def test_plot_and_report_refuse_a_symlinked_figures_folder(tmp_path):
    root = _tree(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (root / "figures").symlink_to(target)
    for cmd in (["plot", str(root)], ["report", str(root)]):
        proc = run_cli(cmd, tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        one_line_error(proc.stderr, "figures", "symbolic link")
    assert list(target.iterdir()) == []
    assert not (root / "report.html").exists()


def test_a_summary_linking_out_of_the_tree_excludes_its_run(tmp_path):
    root = _tree(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"status": "ok", "method": "allreduce", "seed": 0}))
    victim = next(root.rglob("allreduce-s0"))
    (victim / "summary.json").unlink()
    (victim / "summary.json").symlink_to(outside)
    loaded = loading.load_all(root)
    assert [e.run for e in loaded.excluded] == [str(victim.relative_to(root))]
    assert "symbolic link out of the results folder" in loaded.excluded[0].reason


def test_a_symlinked_run_folder_of_a_sweep_is_refused_not_followed(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    run_dir = tmp_path / "res" / "sw" / "main" / "base" / "allreduce-s0"
    run_dir.parent.mkdir(parents=True)
    run_dir.symlink_to(target)
    sweep = tmp_path / "sw.yaml"
    sweep.write_text(json.dumps({
        "name": "sw", "methods": ["allreduce"], "grid": {},
        "scenario": {"name": "t", "topology": {"kind": "star", "n_workers": 2, "n_cross": 0,
                                  "rate_mbit": 50},
                     "workload": {"model": "mlp", "dataset": "digits", "steps": 3},
                     "methods": ["allreduce"]}}))
    proc = run_cli(["sweep", str(sweep), "--results", str(tmp_path / "res"), "-q"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "symbolic link" in proc.stdout and "refused" in proc.stdout, proc.stdout
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    assert run_dir.is_symlink()


def test_written_files_are_as_readable_as_the_umask_says(tmp_path):
    for mask, mode in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
        old = os.umask(mask)
        try:
            path = tmp_path / f"m{mask:o}.json"
            files.write_json(path, {"a": 1})
            with files.atomic_path(tmp_path / f"m{mask:o}.png") as tmp:
                tmp.write_bytes(b"x")
        finally:
            os.umask(old)
        assert path.stat().st_mode & 0o777 == mode, (oct(mask), oct(path.stat().st_mode))
        assert (tmp_path / f"m{mask:o}.png").stat().st_mode & 0o777 == mode


def test_a_duplicate_yaml_key_is_refused_with_both_lines(tmp_path):
    scn = tmp_path / "dup.yaml"
    scn.write_text("name: dup\ntopology:\n  kind: star\n  rate_mbit: 10\n"
                   "workload:\n  model: mlp\n  dataset: digits\n  steps: 3\n"
                   "topology:\n  kind: star\n")
    proc = run_cli(["show", str(scn)], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    one_line_error(proc.stderr, "duplicate key 'topology'", "lines 2 and 9")
    nested = tmp_path / "nested.yaml"
    nested.write_text("name: n\ntopology:\n  kind: star\n  rate_mbit: 10\n  rate_mbit: 20\n")
    proc = run_cli(["show", str(nested)], tmp_path)
    assert proc.returncode == 2
    one_line_error(proc.stderr, "duplicate key 'rate_mbit'", "lines 4 and 5")
