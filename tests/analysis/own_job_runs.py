"""Run folders of an own job made without an emulated network: ``tests/jobs/tiny_job.py``
on 2 ranks on loopback (gloo), forked from the session's pre-imported zygote with the
environment a run gives each rank (``workers.job_env``: torchrun's variables and the hook's;
``workers.transport_env``), as ``netsense run`` starts an own job, writes its records through
the hook (``netsenseml.job``) into the run folder's ``workers/``, exactly where and how the
testbed has it write them; steps.csv and the summary's metrics are then made by the
orchestrator's own ``RunFolder.collect_steps``, config.json as the own-job scenario's. What
the emulated path adds (the network, events.csv, the run's phases) is not here: the tables,
``compare`` and ``report`` read none of it for these columns. (Under torchrun, outside the
testbed, the same job is tests/netsenseml/test_own_job_records.py's.)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from netsenseml import methods
from testbed.common.ports import free_port
from testbed.config.scenario import validate_scenario
from testbed.orchestration import launcher, workers
from testbed.orchestration.rundir import RunFolder

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "jobs" / "tiny_job.py"


def own_job_scenario(name: str = "my-job", samples: int | None = None) -> dict[str, Any]:
    """The scenario an own job's config.json holds (resolved, as ``validate_scenario``
    leaves it: the command made absolute)."""
    wl: dict[str, Any] = {"command": [sys.executable, str(JOB)], "target_accuracy": 0.3,
                          "cwd": str(JOB.parent)}
    if samples is not None:
        wl["samples_per_step"] = samples
    return {"name": name, "topology": {"kind": "star", "n_workers": 2, "n_cross": 1,
                                       "rate_mbit": 50},
            "workload": wl, "methods": ["fp16", "netsenseml"], "seeds": [0]}


def own_job_run(zygote: launcher.Zygote, run_dir: Path, method: str, seed: int = 0,
                job_args: list[str] | None = None, samples: int | None = None
                ) -> dict[str, Any]:
    """One finished own-job run folder at ``run_dir`` (its 2 ranks forked from ``zygote``);
    returns its summary."""
    folder = RunFolder(run_dir)
    folder.prepare()
    scn = own_job_scenario(samples=samples)
    spec = validate_scenario({**scn, "workload": {  # `python`: the testbed's interpreter
        **scn["workload"], "command": ["python", str(JOB), *(job_args or [])]}})
    argv = workers.job_argv(spec)
    assert workers.forkable(argv), argv
    base = {k: v for k, v in os.environ.items() if not k.startswith("NETSENSE_")}
    port = free_port()
    started = time.time()
    ranks = []
    for rank in range(2):
        env = dict(base, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2",
                   **workers.job_env(spec, methods.parse(method), seed, folder.workers, rank,
                                     run_dir.name, 1.0),
                   **workers.transport_env("lo", rank, "nst", None))
        ranks.append(zygote.spawn(argv[1:], env=env, cwd=str(run_dir),
                                  log=folder.workers / f"rank{rank}.log", netns_pid=None,
                                  job=True))
    codes = [w.wait(timeout=240) for w in ranks]
    assert codes == [0, 0], (codes, (folder.workers / "rank0.log").read_text())
    folder.write_config({"scenario": scn, "method": method, "seed": seed, "world_size": 2,
                         "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                     time.gmtime(started))})
    summary = {"run_id": run_dir.name, "scenario": scn["name"], "method": method,
               "seed": seed, "status": "ok", "world_size": 2,
               **folder.collect_steps(2, started, 0.3),
               "wall_s": round(time.time() - started, 3),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())}
    folder.write_summary(summary)
    return summary
