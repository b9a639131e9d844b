"""Run folders of an own job made without an emulated network: ``tests/jobs/tiny_job.py``
under ``torchrun`` on loopback (2 ranks, gloo) writes its records through the hook
(``netsenseml.job``) into the run folder's ``workers/``, exactly where and how the testbed
has it write them; steps.csv and the summary's metrics are then made by the orchestrator's
own ``RunFolder.collect_steps``, config.json as the own-job scenario's. What the emulated
path adds (the network, events.csv, the run's phases) is not here: the tables, ``compare``
and ``report`` read none of it for these columns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


def own_job_run(run_dir: Path, method: str, seed: int = 0, job_args: list[str] | None = None,
                samples: int | None = None) -> dict[str, Any]:
    """One finished own-job run folder at ``run_dir``; returns its summary."""
    folder = RunFolder(run_dir)
    folder.prepare()
    scn = own_job_scenario(samples=samples)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETSENSE_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", NETSENSE_METHOD=method,
               NETSENSE_RECORDS=str(folder.workers), NETSENSE_SEED=str(seed),
               NETSENSE_TARGET_ACCURACY="0.3")
    if samples is not None:
        env["NETSENSE_SAMPLES"] = str(samples)
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    started = time.time()
    p = subprocess.run([*cmd, "--standalone", "--nproc-per-node", "2", str(JOB),
                        *(job_args or [])], cwd=run_dir, env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
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
