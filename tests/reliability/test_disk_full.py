"""A results filesystem with (almost) no room: every command that writes says so in one
line, exits non-zero, builds nothing and leaves no record that says ``running``.

A small tmpfs is mounted in a private mount namespace of the test's own (``unshare
--mount``), so nothing outside the test sees it and it vanishes with the namespace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.orchestration.rundir import RESERVE_NAME
from tests.reliability.helpers import NETSENSE, env_for, in_private_mount, state_empty

pytestmark = pytest.mark.root("to mount a small tmpfs in a private mount namespace", "unshare")


def _in_small_tmpfs(tmp_path: Path, size: str, commands: list[str], fill: bool = False
                    ) -> subprocess.CompletedProcess:
    """Run ``commands`` (netsense argument strings) with ``$D`` a fresh tmpfs of ``size``;
    ``fill``: fill it to the last byte first. Prints ``rc=N`` after each command, then
    every summary.json left under it."""
    d = tmp_path / "small"
    d.mkdir()
    env, _ = env_for(tmp_path)
    script = f"mount -t tmpfs -o size={size} none {d} || exit 99; D={d}; "
    if fill:
        script += f"dd if=/dev/zero of={d}/filler bs=4k 2>/dev/null; "
    for c in commands:
        script += f"{NETSENSE} {c}; echo \"rc=$?\"; "
    script += _print_summaries(d)
    proc = in_private_mount(script, env, tmp_path, timeout=300)
    return proc


def _codes(stdout: str) -> list[int]:
    return [int(w[3:]) for w in stdout.split() if w.startswith("rc=")]


def _print_summaries(folder: Path) -> str:
    """Shell: every summary.json under ``folder``, each between SUMMARY and END lines."""
    return (f"find {folder} -name summary.json -exec sh -c 'echo SUMMARY; cat \"$1\"; echo; "
            "echo END' _ {} \\; ; ")


def _summaries(stdout: str) -> list[dict]:
    parts = [p.split("END")[0].strip() for p in stdout.split("SUMMARY")[1:]]
    return [json.loads(p) for p in parts if p]


def test_run_and_sweep_on_a_small_results_filesystem_refuse_in_one_line(tmp_path):
    """Too small for one run: refused by the free-space check, before anything is built."""
    proc = _in_small_tmpfs(tmp_path, "64k", ["run smoke --results $D/res",
                                             "sweep tiny --results $D/res"])
    codes = _codes(proc.stdout)
    assert len(codes) == 2 and all(c != 0 for c in codes), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and all("space" in ln and str(tmp_path) in ln for ln in lines), lines
    assert _summaries(proc.stdout) == []
    assert state_empty(tmp_path / "state")


def _fill_mid_run(tmp_path: Path, runs: int) -> subprocess.CompletedProcess:
    """``runs`` smoke runs on a fresh 32 MiB tmpfs each filled to the last byte once the
    workers have logged a few steps; prints ``rc=N`` per run and every summary left."""
    d = tmp_path / "small"
    d.mkdir()
    env, _ = env_for(tmp_path)
    script = f"mount -t tmpfs -o size=32m none {d} || exit 99; "
    for i in range(runs):
        res = f"{d}/res{i}"
        script += (
            f"{NETSENSE} run smoke --method allreduce --quiet --results {res} "
            "--set workload.time_limit_s=30 & P=$!; "
            # wait (<= 120 s) for rank 0's step log, then take every byte left
            f"for _ in $(seq 1200); do f=$(find {res} -name rank0.jsonl -size +2k "
            "2>/dev/null | head -1); [ -n \"$f\" ] && break; sleep 0.1; done; "
            f"dd if=/dev/zero of={d}/filler{i} bs=4k 2>/dev/null; "
            "wait $P; echo \"rc=$?\"; "
            + _print_summaries(res) +
            f"find {res} -name {RESERVE_NAME} -exec echo RESERVE-LEFT {{}} \\; ; "
            f"rm -f {d}/filler{i}; ")
    proc = in_private_mount(script, env, tmp_path, timeout=600)
    return proc


@pytest.mark.emulation  # the runs build their network before the disk fills
def test_disk_filling_mid_run_ends_in_a_final_record(tmp_path):
    """The disk fills while the workers train: each run fails with the cause in its
    record, which is final (never ``running``, its registration gone), without a
    traceback, and nothing of the run is left. The final record is written into the
    space the folder reserved at the start (rundir.RESERVE_NAME). Before the fix all 3
    runs kept their ``running`` record: teardown's pids.json write raised out of the
    run before its final record."""
    runs = 3
    proc = _fill_mid_run(tmp_path, runs)
    codes = _codes(proc.stdout)
    assert len(codes) == runs and all(c != 0 for c in codes), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "RESERVE-LEFT" not in proc.stdout, proc.stdout
    summaries = _summaries(proc.stdout)
    assert len(summaries) == runs, proc.stdout
    for s in summaries:
        assert s["status"] == "failed", s
        assert "space" in s.get("reason", ""), s
        prefix = s.get("prefix")
        if prefix:
            links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
            assert prefix not in links, (prefix, links)
    assert state_empty(tmp_path / "state")
