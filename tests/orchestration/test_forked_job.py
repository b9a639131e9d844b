"""An own job forked from the pre-imported zygote runs as ``python ARGV`` would run it
(``workloads.job_runner``): argv, ``__main__``, ``sys.path``, the exit status, ``atexit`` and
non-daemon threads at its end; a job whose environment or path the pre-imported interpreter
cannot honour starts as a fresh one; ``tests/jobs/tiny_job.py`` on two forked ranks writes
its records without paying torch's imports.

Loopback tests (no emulation): a real ``workloads.zygote`` forks the jobs, ``netns_pid``
None. The emulated run of an own job is ``tests/orchestration/test_own_job.py``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from netsenseml import lifecycle, methods
from testbed.common.ports import free_port
from testbed.config.scenario import validate_scenario
from testbed.orchestration import launcher, stacks, workers
from workloads import job_runner

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "jobs" / "tiny_job.py"

PROBE = """\
import atexit, json, os, sys, threading, time
import torch
print(json.dumps({"argv": sys.argv, "name": __name__, "file": globals().get("__file__"),
                  "path0": sys.path[0], "threads": torch.get_num_threads(),
                  "main": sys.modules["__main__"].__dict__ is globals()}), flush=True)
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined", flush=True))).start()
mode = os.environ.get("MODE", "")
if mode == "exit": sys.exit(3)
if mode == "raise": raise RuntimeError("the job's own bug")
if mode == "ctrl-c": raise KeyboardInterrupt
"""


def _job(z: launcher.Zygote, tmp: Path, argv: list[str], **env: str) -> tuple[int, str]:
    log = tmp / f"job-{len(list(tmp.glob('job-*')))}.log"
    full = dict(os.environ, OMP_NUM_THREADS="2", PYTHONPATH=str(REPO), **env)
    w = z.spawn(argv, env=full, cwd=str(tmp), log=log, netns_pid=None, job=True)
    return w.wait(timeout=120), log.read_text()


def _first(out: str) -> dict:
    return json.loads(out.splitlines()[0])


def test_a_forked_job_runs_as_python_would(zygote, tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    code, out = _job(zygote, tmp_path, [str(script), "a", "--b"])
    assert code == 0, out
    seen = _first(out)
    assert seen == {"argv": [str(script), "a", "--b"], "name": "__main__", "file": str(script),
                    "path0": str(tmp_path), "threads": 2, "main": True}
    assert out.splitlines()[1:] == ["thread joined", "atexit ran"]  # the interpreter's end
    code, out = _job(zygote, tmp_path, [str(script)], MODE="exit")
    assert code == 3 and "atexit ran" in out
    code, out = _job(zygote, tmp_path, [str(script)], MODE="raise")
    assert code == 1 and out.splitlines()[1:4] == [
        "Traceback (most recent call last):", f'  File "{script}", line 10, in <module>',
        """    if mode == "raise": raise RuntimeError("the job's own bug")"""]
    assert "RuntimeError: the job's own bug" in out and "atexit ran" in out
    assert "job_runner" not in out  # the traceback starts at the job's own frame
    code, out = _job(zygote, tmp_path, [str(script)], MODE="ctrl-c")
    assert code == -signal.SIGINT and "KeyboardInterrupt" in out


def test_dash_m_and_dash_c_forms(zygote, tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(PROBE)
    code, out = _job(zygote, tmp_path, ["-m", "mymod", "x"])
    assert code == 0, out
    seen = _first(out)
    assert seen["argv"] == [str(tmp_path / "mymod.py"), "x"] and seen["name"] == "__main__"
    assert seen["path0"] == str(tmp_path)
    code, out = _job(zygote, tmp_path, ["-c", "import sys; print(sys.argv, repr(sys.path[0]))", "y"])
    assert code == 0 and out.strip() == "['-c', 'y'] ''"


def test_what_a_fork_cannot_honour_starts_a_fresh_interpreter(zygote, tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    code, out = _job(zygote, tmp_path, [str(script), "a"], PYTHONHASHSEED="7")
    assert code == 0 and "fresh interpreter: PYTHONHASHSEED differs" in out, out
    # the fresh interpreter runs the job through workloads/job_runner.py, as python would
    seen = json.loads(out.splitlines()[1])
    assert seen == {"argv": [str(script), "a"], "name": "__main__", "file": str(script),
                    "path0": str(tmp_path), "threads": 2, "main": True}
    assert out.splitlines()[2:] == ["thread joined", "atexit ran"]
    code, out = _job(zygote, tmp_path, [str(script)], PYTHONHASHSEED="7", MODE="exit")
    assert code == 3 and "atexit ran" in out
    code, out = _job(zygote, tmp_path, [str(script)], PYTHONHASHSEED="7", MODE="raise")
    assert code == 1 and "RuntimeError: the job's own bug" in out and "job_runner" not in out
    own = tmp_path / "vendored"
    (own / "netsenseml").mkdir(parents=True)
    (own / "netsenseml" / "__init__.py").write_text("WHO = 'the job'\n")
    (own / "job.py").write_text("import netsenseml; print(netsenseml.WHO)\n")
    code, out = _job(zygote, tmp_path, [str(own / "job.py")])
    assert code == 0 and "its own 'netsenseml'" in out and out.strip().endswith("the job"), out


def test_job_path_is_the_fresh_interpreters() -> None:
    base = ["/usr/lib/python3.11", "/venv/site-packages"]
    env = {"PYTHONPATH": os.pathsep.join(["/extra", "/venv/site-packages"])}
    # the script's folder, then PYTHONPATH, then the rest, each once (as site leaves it)
    assert job_runner.job_path(["/jobs/x/run.py"], env, base, "/w") == [
        "/jobs/x", "/extra", "/venv/site-packages", "/usr/lib/python3.11"]
    assert job_runner.job_path(["-m", "pkg"], env, base, "/w")[0] == "/w"
    assert job_runner.job_path(["-c", "pass"], {}, base, "/w") == ["", *base]
    assert job_runner.job_path(["/jobs/x/run.py"], {"PYTHONSAFEPATH": "1"}, base, "/w") == base
    boot = {"PYTHONPATH": "/repo"}
    assert job_runner.interpreter_entries(["/repo", "/repo", *base], boot) == base


def test_tiny_job_on_two_forked_ranks_skips_the_imports(zygote, tmp_path: Path) -> None:
    """The environment a run gives each rank (``job_env``, ``transport_env``: torchrun's
    TORCHELASTIC_* included), on loopback: the job runs in the fork, not a fresh interpreter."""
    scn = validate_scenario({
        "name": "forked", "topology": {"kind": "star", "n_workers": 2, "rate_mbit": 100},
        "workload": {"command": ["python", str(JOB), "--steps", "6"]}, "methods": ["fp16"]})
    argv = workers.job_argv(scn)
    assert workers.forkable(argv)
    port = free_port()
    ranks = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", **workers.job_env(scn, methods.parse("fp16"), 0, tmp_path / "workers", rank,
                                                     "run", 1.0),
                   **workers.transport_env("lo", rank, "nst", None))
        ranks.append(zygote.spawn(argv[1:], env=env, cwd=str(tmp_path),
                                  log=tmp_path / f"rank{rank}.log", netns_pid=None, job=True))
    assert [w.wait(timeout=120) for w in ranks] == [0, 0], (tmp_path / "rank0.log").read_text()
    for rank in range(2):
        assert "fresh interpreter" not in (tmp_path / f"rank{rank}.log").read_text()
        recs = [json.loads(line) for line in
                (tmp_path / "workers" / f"rank{rank}.jsonl").read_text().splitlines()]
        start = recs[0]
        assert start["kind"] == "start" and start["method"] == "fp16" and start["own_job"]
        # the fork's imports were the zygote's: register came well before a fresh
        # interpreter would have imported torch
        assert start["phases"]["job_setup"] < 1.5
        assert [r["step"] for r in recs if r["kind"] == "step"] == list(range(1, 7))
        assert recs[-1]["kind"] == "summary" and recs[-1]["status"] == "ok"
        assert f"rank {rank}: done 6 steps" in (tmp_path / f"rank{rank}.log").read_text()


def test_forkable_commands() -> None:
    forkable = workers.forkable
    py = sys.executable
    assert forkable([py, "/x/job.py", "--epochs", "2"])
    assert forkable([py, "-m", "pkg.train"]) and forkable([py, "-c", "pass"])
    assert not forkable([py, "-u", "/x/job.py"])  # its own interpreter options
    assert not forkable(["/x/run.sh"]) and not forkable([py, "-m"])


HANG = """\
import time
def wait_here():
    time.sleep(3600)
def main():
    wait_here()
main()
"""


def test_a_hung_job_says_where_it_is(zygote, tmp_path: Path) -> None:
    """Forked or fresh, a job asked for its stack (``stacks.dump``: the signal the testbed
    sends at a run's deadline) writes it to ``NETSENSE_STACK_FILE``; the innermost frame
    is the job's own function, and the process goes on (the signal does not end it)."""
    assert job_runner.STACK_SIGNAL == lifecycle.STACK_SIGNAL
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    for rank, more in ((0, {}), (1, {"PYTHONHASHSEED": "7"})):  # forked, then fresh
        env = dict(os.environ, PYTHONPATH=str(REPO), **stacks.env(tmp_path, rank), **more)
        w = zygote.spawn([str(script)], env=env, cwd=str(tmp_path),
                         log=tmp_path / f"rank{rank}.log", netns_pid=None, job=True)
        try:
            frames: dict = {}
            for _ in range(100):  # until the job is inside wait_here (a fresh one imports)
                frames = stacks.dump({rank: w.pid}, tmp_path, wait_s=1.0)
                if frames and frames[rank][0].func == "wait_here":
                    break
                time.sleep(0.1)
            assert stacks.where(frames[rank], str(tmp_path)) == "in wait_here (hang.py:3)", frames
            assert [f.func for f in frames[rank][:3]] == ["wait_here", "main", "<module>"]
            assert w.poll() is None  # still running: the dump is no exit
        finally:
            os.killpg(w.pid, signal.SIGKILL)
            w.wait(timeout=10)


def test_where_names_the_library_call_and_the_jobs_frame() -> None:
    lib = stacks.PYTHON_DIRS[0]
    frames = [stacks.Frame(f"{lib}/torch/distributed/distributed_c10d.py", 2800, "all_reduce"),
              stacks.Frame(f"{lib}/torch/distributed/c10d_logger.py", 81, "wrapper"),
              stacks.Frame("/jobs/train.py", 42, "main"),
              stacks.Frame("/jobs/train.py", 50, "<module>")]
    assert stacks.where(frames, "/jobs") == (
        "in all_reduce (torch/distributed/distributed_c10d.py:2800) from main (train.py:42)")
    frames = [stacks.Frame(str(REPO / "netsenseml" / "lifecycle.py"), 158, "_destroy_bounded"),
              stacks.Frame(str(REPO / "netsenseml" / "lifecycle.py"), 146, "destroy_process_group"),
              stacks.Frame("/jobs/train.py", 60, "main")]
    assert stacks.where(frames, "/jobs") == ("in _destroy_bounded (netsenseml/lifecycle.py:158) "
                                             "via destroy_process_group from main (train.py:60)")
    dump = ("Thread 0x00007f0000000001 (most recent call first):\n"
            '  File "/x/threading.py", line 1 in run\n\n'
            "Current thread 0x00007f0000000002 (most recent call first):\n"
            '  File "/jobs/train.py", line 9 in f\n  File "/jobs/train.py", line 12 in <module>\n')
    threads = stacks.parse(dump)
    assert [t[0].func for t in threads] == ["run", "f"]  # the main thread last
