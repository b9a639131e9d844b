"""The real-hosts backend of the run lifecycle (``topology.kind: hosts``).

``HostsRun`` is ``lifecycle.RunLifecycle`` with the work done on real machines over ssh:
the commands come from ``topologies.hosts.plan`` and are recorded in config.json
(``hosts_plan``); the run folder is the emulated runs' one (config.json, steps.csv from the
workers' JSONL, events.csv, summary.json, workers/), so tables, figures and sweeps read it
unchanged.

Work: shape every host's NIC (a failing tc, e.g. netem missing on that kernel, fails the
run with its message); start the iperf3 servers the timeline's cross traffic needs; start
torchrun on every host at once (its output to ``workers/h<i>.log``); run the timeline
(``set_rate``: ``tc class change`` on that host's NIC; ``cross_start``/``cross_stop``:
iperf3 clients between the listed hosts) from the launch or from rank 0's first step; wait
up to the scenario's deadline. Teardown, always: stop the timeline, stop torchrun and iperf3
on every host by the PID files their commands wrote (``HostPlan.stop``) and then the local
ssh clients by PID, read each shaped NIC's HTB counters (``network.shaping`` in
summary.json: the bytes the shaping let through), remove the shaping (``tc qdisc del ...
root``, the NIC gets its kernel default back), fetch the workers' logs and remove the run's
folder on every host.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from netsenseml.methods import MethodSpec
from testbed.orchestration import worker_records
from testbed.orchestration.run_lifecycle import RunFailed, RunLifecycle
from testbed.orchestration.timeline import Action, Timeline, expand
from testbed.orchestration.workers import tail, worker_argv
from topologies import hosts as host_plans

POLL_S = 0.2
CMD_TIMEOUT_S = 60
IPERF_PORT0 = 5301


def host_plan(scenario: Any, spec: MethodSpec, seed: int, run_id: str) -> list[host_plans.HostPlan]:
    """The per-host commands for this scenario, method and seed (no side effects)."""
    argv = worker_argv(scenario, spec, seed, Path("X"))[3:]  # drop: python -m workloads.train
    i = argv.index("--log-dir")
    del argv[i:i + 2]
    return host_plans.plan(scenario.topology, argv, run_id, local_is_root=os.geteuid() == 0)


def _run_cmd(argv: list[str], env: dict[str, str] | None = None) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=CMD_TIMEOUT_S,
                         env={**os.environ, **(env or {})}, check=False,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:8])}: {(res.stderr or res.stdout).strip()[:300]}")
    return res.stdout


class _Proc:
    """A command this run started on a host: the local process (ssh client or the program
    itself) and the remote PID file's name."""

    def __init__(self, plan: host_plans.HostPlan, name: str, argv: list[str], log: Path,
                 env: dict[str, str] | None = None, sig: str = "TERM") -> None:
        self.plan, self.name, self.sig = plan, name, sig
        with open(log, "ab") as fh:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh,
                                          stderr=subprocess.STDOUT,
                                          env={**os.environ, **(env or {})},
                                          start_new_session=True)

    def stop(self, errors: list[str]) -> None:
        if self.popen.poll() is None and not self.plan.local:
            try:
                _run_cmd(self.plan.stop(self.name, self.sig))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{self.plan.name} stop {self.name}: {exc}")
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)  # its own session: all its children
            except OSError:
                pass
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


class HostsRun(RunLifecycle):
    """One run on real machines (see the module docstring)."""

    def __init__(self, scenario: Any, spec: MethodSpec, seed: int, run_dir: Path,
                 progress: bool = True, meta: dict[str, Any] | None = None) -> None:
        super().__init__(scenario, spec, seed, run_dir, progress, meta)
        self.plans = host_plan(scenario, spec, seed, self.folder.path.name)
        self.by_name = {p.name: p for p in self.plans}
        self.train: list[_Proc] = []
        self.shaped: list[host_plans.HostPlan] = []
        self.flows: dict[str, list[tuple[Any, int, int]]] = {}  # id -> (plan, streams, port)
        self.cross: dict[str, list[_Proc]] = {}  # group id -> its clients
        self.servers: list[_Proc] = []
        self._lock = threading.Lock()

    def _config_extra(self) -> dict[str, Any]:
        return {"master_port": self.scn.topology.master_port,
                "hosts_plan": [p.as_dict() for p in self.plans]}

    def _write_pids(self) -> None:
        with self._lock:
            procs = [*self.servers, *(c for cs in self.cross.values() for c in cs)]
            self.folder.write_pids({
                "orchestrator": os.getpid(), "prefix": None,
                "workers": [p.popen.pid for p in self.train],
                "iperf3": [p.popen.pid for p in procs]})

    # work -------------------------------------------------------------------------
    def _work(self) -> None:
        actions, flow_plans = expand(self.scn.timeline, end_s=self.scn.workload.time_limit_s)
        for p in self.plans:
            if p.shape:
                self.shaped.append(p)  # before: a half-built tree is removed too
                for argv in p.shape:
                    _run_cmd(argv)
        self._start_servers(flow_plans)
        self.timeline = Timeline(actions, self._apply)
        self.launch_wall = time.time()
        self.timing["launch_wall"] = self.launch_wall
        for p in self.plans:
            self.train.append(_Proc(p, "train", p.train, self.folder.workers / f"{p.name}.log",
                                    p.env if p.local else None))
        self._write_pids()
        self._monitor()

    def _start_servers(self, flow_plans: list[Any]) -> None:
        """One iperf3 server per stream group slot on the destination host, each on its own
        port; waited for until it accepts (a client started too early fails)."""
        port = IPERF_PORT0
        for fp in flow_plans:
            dst = self.by_name[fp.dst]
            slots = []
            for streams in fp.streams:
                name = f"iperf3-s-{fp.id}-{port}"
                argv = dst.started(name, [dst.iperf3, "-s", "-B", dst.address, "-p", str(port)])
                self.servers.append(_Proc(dst, name, argv, self.folder.path / "cross.log",
                                          sig="KILL"))
                slots.append((fp, streams, port))
                port += 1
            self.flows[fp.id] = slots
        deadline = time.monotonic() + 20
        for slots in self.flows.values():
            for fp, _, port in slots:
                dst = self.by_name[fp.dst]
                while True:  # listening: ss prints the socket (iproute2, beside tc)
                    res = subprocess.run(dst.remote(["ss", "-Hltn", f"sport = :{port}"]),
                                         capture_output=True, text=True, timeout=CMD_TIMEOUT_S,
                                         stdin=subprocess.DEVNULL, check=False)
                    if res.returncode == 0 and res.stdout.strip():
                        break
                    if time.monotonic() > deadline:
                        raise RunFailed(f"iperf3 server {fp.dst}:{port} did not start")
                    time.sleep(0.2)

    def _apply(self, action: Action) -> str:
        if action.kind == "set_rate":
            _run_cmd(self.by_name[action.target].set_rate(float(action.value)))
            return f"{action.value:g} Mbit/s"
        if action.kind == "cross_start":
            fp, streams, port = self.flows[action.target][action.slot]
            src, dst = self.by_name[fp.src], self.by_name[fp.dst]
            name = f"iperf3-c-{fp.id}-{port}"
            argv = [src.iperf3, "-c", dst.address, "-p", str(port), "-P", str(streams),
                    "-t", "86400", *(["-b", f"{fp.bitrate_mbit}M"] if fp.bitrate_mbit else [])]
            # KILL: a terminated iperf3 client first reports to its server, seconds late
            proc = _Proc(src, name, src.started(name, argv), self.folder.path / "cross.log",
                         sig="KILL")
            with self._lock:
                self.cross.setdefault(fp.id, []).append(proc)
            self._write_pids()
            total = sum(s for _, s, _ in self.flows[fp.id][: action.slot + 1])
            return f"+{streams} streams (total {total}) pid {proc.popen.pid}"
        if action.kind == "cross_stop":
            with self._lock:
                procs = self.cross.pop(action.target, [])
            errors: list[str] = []
            for p in procs:
                p.stop(errors)
            if errors:
                raise RuntimeError("; ".join(errors))
            return f"stopped {len(procs)} clients"
        raise ValueError(f"unknown action {action.kind}")

    def _monitor(self) -> None:
        assert self.timeline is not None and self.launch_wall is not None
        deadline = time.monotonic() + self.scn.deadline_s()
        if self.scn.timeline_origin == "launch":
            self.timeline.start(self.launch_wall)
        rank0 = self.plans[0]
        last_look = 0.0
        while True:
            codes = [p.popen.poll() for p in self.train]
            bad = [(p.plan.name, c) for p, c in zip(self.train, codes, strict=True)
                   if c not in (None, 0)]
            if bad:
                name, code = bad[0]
                raise RunFailed(f"{name} exited {code}: {tail(self.folder.workers / f'{name}.log')}")
            if all(c == 0 for c in codes):
                self.timing["workers_done_wall"] = time.time()
                return
            if self.timeline.error:
                raise RunFailed(f"timeline event failed: {self.timeline.error}")
            if time.monotonic() > deadline:
                raise RunFailed(f"timeout: workers still running after "
                                f"{self.scn.deadline_s():.0f} s")
            if not self.timeline.started and time.monotonic() - last_look > 0.5:
                last_look = time.monotonic()
                wall = self._first_step_wall(rank0)
                if wall is not None:
                    self.timeline.start(self.launch_wall, origin_wall=wall)
            self.progress.update(f"training on {len(self.plans)} hosts  "
                                 f"{time.time() - self.launch_wall:5.1f} s")
            time.sleep(POLL_S)

    def _first_step_wall(self, plan: host_plans.HostPlan) -> float | None:
        """The wall time of rank 0's first step record (read on host 0), or None yet."""
        path = f"{plan.log_dir}/rank0.jsonl"
        if plan.local:
            rec = worker_records.last_step(Path(path))
            return float(rec["wall"]) if rec and rec.get("wall") is not None else None
        res = subprocess.run(plan.remote(["sh", "-c", f"grep -m1 '\"kind\": *\"step\"' "
                                          f"{shlex.quote(path)} 2>/dev/null; true"]),
                             capture_output=True, text=True, timeout=CMD_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, check=False)
        for line in res.stdout.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("wall") is not None:
                return float(rec["wall"])
        return None

    # teardown and results --------------------------------------------------------
    def _teardown_all(self) -> None:
        """Stop our processes, read and remove the shaping, fetch logs, remove the run's
        folders on the hosts; errors are recorded, never raised."""
        t = time.monotonic()
        errors: list[str] = []
        if self.timeline is not None:
            self.timeline.stop()
        with self._lock:
            clients = [c for cs in self.cross.values() for c in cs]
            self.cross.clear()
        for p in [*self.train, *clients, *self.servers]:
            try:
                p.stop(errors)
            except OSError as exc:
                errors.append(f"{p.plan.name} {p.name}: {exc}")
        shaping: dict[str, Any] = {}
        for p in self.shaped:
            try:
                shaping[p.name] = _htb_bytes(_run_cmd(p.class_stats()))
            except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
                errors.append(f"{p.name} tc stats: {exc}")
            for argv in p.unshape:
                try:
                    _run_cmd(argv)
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                    errors.append(f"{p.name} unshape: {exc}")
        if shaping:
            self.network["shaping"] = {
                "rate_mbit": self.scn.topology.rate_mbit,
                "sent_bytes": {k: v for k, v in shaping.items() if v is not None}}
        for p in self.plans:  # every host's logs first: hosts may share one disk
            try:
                if p.local:
                    for f in sorted(Path(p.log_dir).glob("rank*")):
                        shutil.copy2(f, self.folder.workers / f.name)
                else:
                    subprocess.run(p.fetch, cwd=self.folder.workers, capture_output=True,
                                   timeout=CMD_TIMEOUT_S, check=True, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{p.name} fetch: {exc}")
        for p in self.plans:
            try:
                if p.local:
                    shutil.rmtree(p.run_dir, ignore_errors=True)  # <workdir>/<run_id>: ours
                else:
                    _run_cmd(p.cleanup())
            except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                errors.append(f"{p.name} cleanup: {exc}")
        self.timing["teardown_s"] = round(time.monotonic() - t, 3)
        if errors:
            self.summary["teardown_errors"] = errors

    def _after_teardown(self) -> None:
        if self.train:
            self._write_pids()

    def _collect_more(self) -> None:
        self.summary["worker_exit_codes"] = [p.popen.returncode for p in self.train]

    def _final_fields(self) -> dict[str, Any]:
        return {"prefix": None, "teardown_s": self.timing.get("teardown_s")}


def _htb_bytes(tc_text: str) -> int | None:
    """Bytes sent by the HTB class 1:1 (``tc -s class show``: its block's ``Sent N bytes``;
    tc's ``-j`` is not JSON for classes in every iproute2), None if absent."""
    m = re.search(r"^class htb 1:1 .*?\n\s*Sent (\d+) bytes", tc_text or "", re.M | re.S)
    return int(m.group(1)) if m else None
