"""One run on real hosts (``topology.kind: hosts``): shape NICs, torchrun, fetch, unshape.

The counterpart of ``run.run_scenario`` for real machines (``run_scenario`` hands such
scenarios here). The commands come from ``topologies.hosts.plan`` and are recorded in
config.json (``hosts_plan``); the run folder is the emulated runs' one (config.json,
steps.csv from the workers' JSONL, events.csv (empty: no timeline on real hosts),
summary.json, workers/), so tables, figures and sweeps read it unchanged.

Order: run folder; shape every host's NIC (a failing tc, e.g. netem missing on that kernel,
fails the run with its message); start torchrun on every host at once (its output to
``workers/h<i>.log``); wait up to the scenario's deadline; then, always: stop what is still
running (by the PIDs of the processes started here; an ssh client's exit hangs up the remote
torchrun), remove the shaping (``tc qdisc del ... root``, the NIC gets its kernel default
back), fetch the workers' logs, write steps.csv and summary.json. SIGINT/SIGTERM stop the run
the same way and re-raise after teardown, as emulated runs do.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.orchestration.interrupts import RunInterrupted, SignalGuard
from testbed.orchestration.rundir import RunFolder, RunOutcome, host_facts, versions
from testbed.orchestration.timeline import EVENT_COLUMNS
from testbed.orchestration.workers import tail, worker_argv
from topologies import hosts as host_plans

POLL_S = 0.2
CMD_TIMEOUT_S = 60


def host_plan(scenario: Any, method: str, seed: int, run_id: str) -> list[host_plans.HostPlan]:
    """The per-host commands for this scenario, method and seed (no side effects)."""
    argv = worker_argv(scenario, method, seed, Path("X"))[3:]  # drop: python -m workloads.train
    i = argv.index("--log-dir")
    del argv[i:i + 2]
    return host_plans.plan(scenario.topology, argv, run_id, local_is_root=os.geteuid() == 0)


def _run_cmd(argv: list[str], env: dict[str, str] | None = None) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=CMD_TIMEOUT_S,
                         env={**os.environ, **(env or {})}, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:8])}: {(res.stderr or res.stdout).strip()[:300]}")


def run_on_hosts(scenario: Any, method: str, seed: int, run_dir: Path) -> RunOutcome:
    folder = RunFolder(Path(run_dir))
    folder.prepare()
    plans = host_plan(scenario, method, seed, folder.path.name)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    folder.write_config({
        "scenario": scenario.model_dump(mode="json"), "method": method, "seed": seed,
        "run_id": folder.path.name, "world_size": scenario.world_size,
        "master_port": scenario.topology.master_port,
        "hosts_plan": [p.as_dict() for p in plans], "versions": versions(),
        "host": host_facts(), "started_at": started, "orchestrator_pid": os.getpid(),
    })
    summary: dict[str, Any] = {"scenario": scenario.name, "method": method, "seed": seed,
                               "run_id": folder.path.name, "status": "running",
                               "started_at": started}
    folder.write_summary(summary)
    guard = SignalGuard()
    guard.install()
    t_start = time.monotonic()
    procs: list[subprocess.Popen] = []
    shaped: list[host_plans.HostPlan] = []
    status, reason, launch_wall = "failed", None, time.time()
    interrupted: RunInterrupted | None = None
    try:
        for p in plans:
            if p.shape:
                shaped.append(p)  # before: a half-built tree is removed too
                for argv in p.shape:
                    _run_cmd(argv)
        launch_wall = time.time()
        for p in plans:
            log = open(folder.workers / f"{p.name}.log", "wb")  # noqa: SIM115
            try:
                procs.append(subprocess.Popen(
                    p.train, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, **p.env}, start_new_session=True))
            finally:
                log.close()
        folder.write_pids({"orchestrator": os.getpid(), "prefix": None,
                           "workers": [pr.pid for pr in procs], "iperf3": []})
        deadline = t_start + scenario.deadline_s()
        while any(pr.poll() is None for pr in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"deadline {scenario.deadline_s():.0f} s passed")
            time.sleep(POLL_S)
        bad = [(p.name, pr.returncode) for p, pr in zip(plans, procs, strict=True)
               if pr.returncode != 0]
        if bad:
            name, code = bad[0]
            reason = f"{name} exited {code}: {tail(folder.workers / f'{name}.log')}"
        else:
            status = "ok"
    except RunInterrupted as exc:
        interrupted, reason = exc, f"interrupted by signal {exc.signum}"
    except Exception as exc:  # noqa: BLE001 - every failure ends up in summary.json
        reason = f"{type(exc).__name__}: {exc}"
    finally:
        guard.protect()
        summary.update(_teardown(plans, procs, shaped, folder))
        guard.restore()
    try:
        summary.update(folder.collect_steps(scenario.world_size, launch_wall,
                                            scenario.workload.target_accuracy))
    except Exception as exc:  # noqa: BLE001
        status, reason = "failed", reason or f"collecting results: {type(exc).__name__}: {exc}"
    folder.write_events(EVENT_COLUMNS, [])
    if status == "ok" and not summary.get("steps"):
        status, reason = "failed", "no step records"
    summary.update(status=status, world_size=scenario.world_size, prefix=None,
                   wall_s=round(time.monotonic() - t_start, 3),
                   finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if reason:
        summary["reason"] = reason
    folder.write_summary(summary)
    if interrupted is not None:
        raise interrupted
    return RunOutcome(folder.path, status, summary)


def _teardown(plans: list[host_plans.HostPlan], procs: list[subprocess.Popen],
              shaped: list[host_plans.HostPlan], folder: RunFolder) -> dict[str, Any]:
    """Stop our processes, unshape, fetch logs; errors are recorded, never raised."""
    errors: list[str] = []
    for pr in procs:
        if pr.poll() is None:
            try:
                os.killpg(pr.pid, signal.SIGTERM)  # its own session: torchrun and its ranks
            except OSError:
                pass
    for pr in procs:
        try:
            pr.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(pr.pid, signal.SIGKILL)
            pr.wait()
    for p in shaped:
        for argv in p.unshape:
            try:
                _run_cmd(argv)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{p.name} unshape: {exc}")
    for p in plans:
        try:
            if p.local:
                src = Path(p.log_dir)
                for f in sorted(src.glob("rank*")):
                    shutil.copy2(f, folder.workers / f.name)
                shutil.rmtree(src.parent, ignore_errors=True)  # <workdir>/<run_id>: ours
            else:
                subprocess.run(p.fetch, cwd=folder.workers, capture_output=True,
                               timeout=CMD_TIMEOUT_S, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{p.name} fetch: {exc}")
    return {"teardown_errors": errors} if errors else {}
