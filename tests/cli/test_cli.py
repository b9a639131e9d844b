"""The ``netsense`` command: exit codes, one-line errors, nothing left behind.

Bad input must give exit 2, exactly one line on stderr naming the problem, no traceback,
and leave nothing behind. "Nothing behind" is checked two ways that do not depend on what
other tests on this machine are doing at the same time: the emulation registry directory
given to the command (NETSENSE_STATE_DIR; an Emulation registers its prefix *before*
creating anything) stays empty, and no process carrying this call's marker in its
environment (every child inherits it) is alive afterwards.

Most cases run the typer app in-process (CliRunner): a real subprocess costs a torch
import (seconds on a loaded 2-core machine) per case. Two cases run the installed
``netsense`` script as a real process, to show the same contract end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.emulation import kernel
from tests.cli.invoke import GOOD, netsense, netsense_proc
from topologies import spec


def _yaml(tmp_path: Path, data: dict | str, name: str = "bad.yaml") -> str:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


def _mod(path: str, value) -> dict:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return data


CASES = {
    "yaml-syntax": ("name: t\ntopology: {kind: star\n", "YAML syntax error at line"),
    "unknown-field": (_mod("workload.epochs", 3), "workload.epochs: unknown field"),
    "negative-rate": (_mod("topology.rate_mbit", -5), "topology.rate_mbit: Input should be "
                      "greater than or equal to 0.01 (got -5)"),
    "unknown-method": (_mod("methods", ["allreduce", "foo"]), "methods[1]:"),
    "malformed-method": (_mod("methods", ["topk:2.5"]), "methods[0]:"),
    "zero-workers": (_mod("topology.n_workers", 0), "topology.n_workers: Input should be "
                     "greater than 0 (got 0)"),
    "unknown-link": ({**GOOD, "timeline": [{"at_s": 1, "kind": "set_rate", "link": "bottleneck",
                                            "rate_mbit": 5}]},
                     "unknown link 'bottleneck'; links: w0, w1, x0"),
    "path-in-name": (_mod("name", "a/b"), "name: invalid name 'a/b'"),
    "netem": (_mod("topology.loss_pct", 1), "topology.loss_pct:"),
    "congestion-control": (_mod("topology.congestion_control", "nosuchcc"),
                           "topology.congestion_control: 'nosuchcc' is not allowed in an "
                           "emulated host's namespace on this kernel; allowed: "),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_scenario_exits_2_with_one_line(tmp_path, monkeypatch, case):
    data, needle = CASES[case]
    if case == "netem" and kernel.has_netem():
        pytest.skip("this kernel has netem, so netem fields are valid here")
    proc = netsense(["run", _yaml(tmp_path, data), "--results", str(tmp_path / "res")], tmp_path,
                    monkeypatch)
    assert proc.exit_code == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: scenario bad.yaml: "), lines[0]
    assert needle in lines[0], lines[0]
    if case in ("unknown-method", "malformed-method"):
        assert "accepted" in lines[0] or "form" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "res").exists()


def test_missing_file_unknown_name_and_bad_method_flag(tmp_path, monkeypatch):
    for args, needle in (
        (["run", str(tmp_path / "nope.yaml")], "scenario file not found"),
        (["run", "no-such-scenario"], "unknown scenario 'no-such-scenario'; available:"),
        (["run", "smoke", "--method", "bogus"], "--method:"),
        (["run", "smoke", "--set", "topology.rate_mbit=-1"], "topology.rate_mbit"),
    ):
        proc = netsense([*args, "--results", str(tmp_path / "res")], tmp_path, monkeypatch)
        assert proc.exit_code == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("case", ["yaml-syntax", "unknown-method"])
def test_real_process_bad_input(tmp_path, case):
    """The installed script, as `make experiment` runs it: exit 2, one line, no traceback."""
    data, needle = CASES[case]
    proc = netsense_proc(["run", _yaml(tmp_path, data), "--results", str(tmp_path / "res")],
                         tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "res").exists()


def test_list_and_help(tmp_path, monkeypatch):
    proc = netsense(["list"], tmp_path, monkeypatch)
    assert proc.exit_code == 0
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert "smoke" in names and "star-congestion" in names
    smoke = next(line for line in proc.stdout.splitlines() if line.strip().startswith("smoke "))
    assert "2-worker star" in smoke
    proc = netsense(["--help"], tmp_path, monkeypatch)
    for cmd in ("run", "list", "doctor", "clean"):
        assert cmd in proc.stdout


def test_doctor_reports_each_capability(tmp_path, monkeypatch):
    proc = netsense(["doctor"], tmp_path, monkeypatch)
    assert proc.exit_code == 0, proc.stderr
    for check in ("mode", "netns", "HTB", "TBF", "netem", "mnexec", "iperf3", "bridge", "TCP"):
        assert check in proc.stdout
    tcp_line = next(line for line in proc.stdout.splitlines() if "TCP" in line)
    assert (f"run {spec.DEFAULT_CONGESTION_CONTROL}" in tcp_line) == (
        kernel.congestion_control_error(spec.DEFAULT_CONGESTION_CONTROL) is None)
    netem_line = next(line for line in proc.stdout.splitlines() if "netem" in line)
    assert ("ok" in netem_line) == kernel.has_netem()


def test_doctor_advice_follows_the_cause():
    """A permission problem is not a missing kernel module, and the advice says which."""
    from testbed.cli.doctor import _fix

    perm = _fix("RTNETLINK answers: Operation not permitted", "sch_htb")
    module = _fix("Error: Specified qdisc kind is unknown.", "sch_netem")
    assert "permission" in perm and "modprobe" not in perm
    assert "modprobe" in module and "sch_netem" in module and "permission" not in module


def test_sigint_ignored_at_start_is_made_to_interrupt(tmp_path):
    """A ``netsense`` started with SIGINT ignored (a background job of a non-interactive
    shell) makes it interrupt again before any command runs: ``main`` leaves Python's
    KeyboardInterrupt handler in place of the inherited SIG_IGN (testbed.cli.app)."""
    code = ("import signal\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from testbed.cli.app import main\n"
            "rc = main(['list'])\n"
            "print(rc, signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "NETSENSE_STATE_DIR": str(tmp_path / "state")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 True", out.stdout


def test_the_run_table_says_not_reported_for_an_own_jobs_silent_accuracy(capsys, tmp_path):
    """pytorch/examples' multigpu_torchrun.py, run as an own job, reports no accuracy: the
    table after `netsense run` showed "-" (as for a run that failed to evaluate) and its
    21-parameter model's 0.02 MB as 0.0; compare and report said "not reported by the job"."""
    from testbed.cli.app import _print_table
    from testbed.orchestration.rundir import RunOutcome

    silent = {"method": "fp16", "seed": 0, "throughput_samples_per_s": 514.6,
              "final_accuracy": None, "time_to_accuracy_s": None, "bytes_sent_total": 21504,
              "accuracy_reported": False}
    told = {**silent, "method": "netsenseml", "final_accuracy": 0.91,
            "time_to_accuracy_s": 3.2, "bytes_sent_total": 2_500_000, "accuracy_reported": True}
    _print_table("stranger", [RunOutcome(tmp_path / "a", "ok", silent),
                              RunOutcome(tmp_path / "b", "ok", told)])
    out = capsys.readouterr().out
    fp16 = next(ln for ln in out.splitlines() if "fp16" in ln)
    assert fp16.count("not reported") == 2 and "0.022" in fp16, out
    ns = next(ln for ln in out.splitlines() if "netsenseml" in ln)
    assert "0.910" in ns and "3.2" in ns and "2.5" in ns, out
    assert "hooks.report(accuracy=...)" in out


def test_compare_never_cuts_two_groups_to_the_same_text() -> None:
    """netsenseml and netsenseml-paper were both shown as "netsense..." in a narrow
    terminal: the text columns wrap instead."""
    import pandas as pd
    from rich.console import Console

    from testbed.cli.analysis import _compare_table

    nan = float("nan")
    row = dict(runs=2, compute="paced a100-estimated, k 130", throughput=1.0, throughput_ci=nan,
               steps_per_s=nan, steps_per_s_ci=nan,
               tta_s=nan, tta_ci=nan, reached="2/2", final_accuracy=0.9, final_accuracy_ci=nan,
               mb_sent=1.0, overrun_share=0.0, host_other_pct=1.0, degraded="")
    groups = pd.DataFrame([dict(row, group=f"accel-crossover/d70 40000 Mbit/s {m}")
                           for m in ("netsenseml", "netsenseml-paper")])
    console = Console(width=120, record=True)  # the least compare prints at
    console.print(_compare_table(groups))
    lines = console.export_text().splitlines()
    cells = [ln.split("│")[1].strip() for ln in lines if ln.count("│") > 2]
    text = " ".join(cells)
    assert "…" not in text and "netsenseml-paper" in text.replace(" ", ""), text
