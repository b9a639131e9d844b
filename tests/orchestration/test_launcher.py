"""Workers forked from the pre-imported zygote behave like fresh worker processes.

Loopback tests (no emulation): a real ``workloads.zygote`` forks real 2-rank gloo runs. The
emulation test at the end runs the same fixed-step scenario through ``run_scenario`` both
ways and compares the run folders.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from testbed.common.ports import free_port
from testbed.orchestration import launcher
from tests.workloads.ranks import TINY, read_log, run_ranks

ARGS = [*TINY["mlp"], "--steps", "6", "--batch-size", "8", "--seed", "3", "--eval-every", "4",
        "--method", "topk:0.05"]


def _fork_ranks(z: launcher.Zygote, tmp: Path, args: list[str]) -> list[launcher.ForkedWorker]:
    port = free_port()
    workers = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        workers.append(z.spawn([*args, "--log-dir", str(tmp / "logs")], env=env,
                               cwd=os.getcwd(), log=tmp / f"rank{rank}.out", netns_pid=None))
    return workers


def _steps(tmp: Path, rank: int) -> list[dict]:
    return [r for r in read_log(tmp, rank) if r["kind"] == "step"]


def test_forked_workers_match_fresh_processes(zygote, tmp_path: Path) -> None:
    fresh, forked = tmp_path / "fresh", tmp_path / "forked"
    fresh.mkdir()
    forked.mkdir()
    assert run_ranks(fresh, ARGS) == [0, 0], (fresh / "rank0.out").read_text()
    workers = _fork_ranks(zygote, forked, ARGS)
    codes = [w.wait(timeout=120) for w in workers]
    assert codes == [0, 0], (forked / "rank0.out").read_text()
    for rank in range(2):
        a, b = _steps(fresh, rank), _steps(forked, rank)
        assert len(a) == len(b) == 6
        assert [r.keys() for r in a] == [r.keys() for r in b]
        assert [r["bytes_sent"] for r in a] == [r["bytes_sent"] for r in b]
        assert [r["loss"] for r in a] == pytest.approx([r["loss"] for r in b], rel=1e-6)
        start_a, start_b = read_log(fresh, rank)[0], read_log(forked, rank)[0]
        assert start_a.keys() == start_b.keys()
        # the forked worker's imports were paid by the zygote, and its own clock restarted
        assert start_b["imports_s"] < 0.5 < start_a["imports_s"]
        assert start_b["proc_wall"] > zygote.started


def test_forked_worker_exit_codes_and_kill(zygote, tmp_path: Path) -> None:
    # bad argument: the worker's parser exits 2 and says why in its log
    bad = zygote.spawn(["--model", "mlp", "--batch-size", "0"], env=dict(os.environ), cwd=os.getcwd(),
                       log=tmp_path / "bad.out", netns_pid=None)
    assert bad.wait(timeout=30) == 2
    assert "error:" in (tmp_path / "bad.out").read_text()
    # a long run killed through its process group, as the emulation's teardown does
    long = _fork_ranks(zygote, tmp_path, [*TINY["mlp"], "--steps", "100000", "--batch-size",
                                          "8", "--seed", "0", "--method", "allreduce"])
    with pytest.raises(subprocess.TimeoutExpired):
        long[0].wait(timeout=1.0)
    assert all(w.poll() is None for w in long)
    assert all(os.getpgid(w.pid) == w.pid for w in long)  # each leads its own session
    for w in long:
        os.killpg(w.pid, signal.SIGKILL)
    assert [w.wait(timeout=30) for w in long] == [-signal.SIGKILL] * 2


def test_zygote_exits_when_its_orchestrator_goes() -> None:
    z = launcher.Zygote()
    z.wait_ready()
    assert z.proc.stdin is not None
    z.proc.stdin.close()  # what the kernel does when the orchestrator dies
    assert z.proc.wait(timeout=10) == 0
    z.close()


@pytest.mark.emulation
@pytest.mark.slow
def test_run_results_unchanged_by_forked_workers(tmp_path: Path, monkeypatch) -> None:
    """Same fixed-step, fixed-seed run with fresh processes and with forked workers.

    top-k, not netsenseml: netsenseml's choices follow the measured network timing, so its
    bytes differ between any two runs; top-k's depend only on the seed and the data.
    """
    from testbed.config.scenario import apply_overrides, load_scenario
    from testbed.orchestration.run import run_scenario

    scn = apply_overrides(load_scenario("smoke"), {"workload.steps": 12, "timeline": []})
    outs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("NETSENSE_ZYGOTE", mode)
        outs[mode] = run_scenario(scn, "topk:0.01", 5, tmp_path / f"z{mode}", progress=False)
        assert outs[mode].status == "ok", outs[mode].summary
    assert outs["0"].summary["launcher"] == "process"
    assert outs["1"].summary["launcher"] == "fork"
    tables = {}
    for mode, out in outs.items():
        with open(out.run_dir / "steps.csv", newline="") as fh:
            tables[mode] = list(csv.DictReader(fh))
    assert tables["0"] and list(tables["0"][0]) == list(tables["1"][0])  # same columns

    def per_step(rows: list[dict]) -> list[tuple[str, str, str]]:
        return sorted((r["rank"], r["step"], r["bytes_sent"]) for r in rows)

    assert per_step(tables["0"]) == per_step(tables["1"])
    losses = [[float(r["loss"]) for r in sorted(tables[m], key=lambda r: (r["rank"], r["step"]))
               if r["loss"]] for m in ("0", "1")]
    assert losses[0] and losses[0] == pytest.approx(losses[1], rel=1e-6)
    for out in outs.values():
        s = json.loads((out.run_dir / "summary.json").read_text())
        assert s["worker_exit_codes"] == [0, 0]
        assert set(s["phases_s"]) >= {"build", "launch", "imports", "rendezvous",
                                      "first_step", "final_eval", "teardown"}
