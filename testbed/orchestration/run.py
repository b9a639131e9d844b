"""The orchestrator: one run = one scenario x one method x one seed, in its own folder.

Order of a run (DESIGN.md, "Data flow of one run"):

1. write config.json and summary.json {"status": "running"};
2. build the emulated network (``testbed.emulation.Emulation``, per-run name prefix);
3. optionally probe each shaped link with iperf3 (link.csv);
4. start the iperf3 servers the timeline will need, and wait until they listen;
5. launch one worker per worker host inside its namespace (env://, GLOO_SOCKET_IFNAME),
   remembering the launch wall time as the run's time origin;
6. run the timeline in a thread while the main thread watches the workers, the deadline
   and the progress line;
7. in ``finally``: stop the timeline, kill cross-traffic and workers by PID, stop the
   emulation (which removes every interface with the run's prefix), then write steps.csv,
   events.csv and the final summary.json ("ok", or "failed" + reason).

Failures never raise out of ``run_scenario``: they end up in summary.json. A run is ``ok``
only if the workers reported ok, wrote step records, *and* every scheduled timeline event
was applied (``events_applied == events_scheduled``); otherwise it is ``failed`` with the
reason ("timeline incomplete: K of N events applied ..."), because a scenario whose events
did not happen did not run as described. The exception: a run told to stop at its target
(``stop-at-target``) that reached it is ``ok`` with the events due later unapplied
(``timeline_note`` says how many): a dynamic scenario's schedule must be long enough for
its slowest method, and the faster ones end earlier by design. The folder never exists without its records:
config.json, sweep.json (for a sweep) and the ``running`` summary naming the orchestrator
are written together with signals held off, and the run is registered for `netsense clean`
(``rundir``) until its final summary is written. The one thing
that does propagate is an interruption (SIGINT/SIGTERM), *after* teardown, as
``RunInterrupted`` (``testbed.orchestration.interrupts``), so that a sweep stops and the CLI
exits 130/143.

Who does what: the lifecycle itself (config, folder, work, teardown, status, the final
record, signals held off around the first and last writes) is ``lifecycle.RunLifecycle``'s,
written once for both backends; this module is the emulated-network backend (``_Run``: the
phases above and their teardown), ``hosts`` the real-hosts one. The run folder's files are
``rundir``'s, the worker processes ``workers``', signals ``interrupts``', the status line
``progress``'.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from netsenseml.dilation import Dilation
from netsenseml.methods import MethodSpec
from testbed.common.names import slug
from testbed.config import faithful
from testbed.config.scenario import Scenario
from testbed.emulation import Emulation, bottleneck, capture, counters
from testbed.emulation.traffic import CrossTraffic
from testbed.orchestration import dilation, gpus, health, hostload, launcher, stacks, worker_records
from testbed.orchestration.interrupts import RunInterrupted
from testbed.orchestration.real_hosts import HostsRun
from testbed.orchestration.run_lifecycle import RunFailed, RunLifecycle, bounded
from testbed.orchestration.rundir import RunOutcome
from testbed.orchestration.timeline import Action, Timeline, expand
from testbed.orchestration.workers import (
    WorkerGroup,
    forkable,
    job_argv,
    job_env,
    stage,
    stragglers,
    worker_argv,
)

POLL_S = 0.1
#: Deadline of each teardown step (seconds): the emulation's own steps are bounded
#: tighter (``testbed.emulation.emulated_network``); this catches anything else that blocks.
TEARDOWN_STEP_S = {"cross-traffic": 10.0, "workers": 10.0, "own job's leftovers": 5.0,
                   "emulation": 15.0, "zygote": 5.0}
#: A worker stopped (SIGSTOP, a debugger) this long fails the run at once: its peers
#: would otherwise wait for it until the collective timeout.
STOPPED_RANK_S = 2.0
#: After an own job's ranks all exited, how long what they started may take to exit too
#: before it counts as left behind (a data loader's workers end just after their parent).
STRAGGLER_GRACE_S = 2.0


def sanitize_method(method: str) -> str:
    """Method spec as a path component: 'topk:0.01' -> 'topk-0.01'."""
    return slug(method)


def make_run_id(method: str, seed: int, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{sanitize_method(method)}-s{seed}"


class _Run(RunLifecycle):
    """The emulated-network backend of the run lifecycle (``lifecycle.RunLifecycle``): its
    phases; every resource it creates is torn down in ``_teardown_all``."""

    def __init__(
        self, scenario: Scenario, spec: MethodSpec, seed: int, run_dir: Path, progress: bool,
        meta: dict[str, Any] | None = None,
        gpu_plan: gpus.GpuPlan | None = None,
        pace: tuple[float, dict[str, Any]] = (1.0, {"mode": "native"}),
    ) -> None:
        super().__init__(scenario, spec, seed, run_dir, progress, meta)
        self.gpu_plan = gpu_plan or gpus.GpuPlan("cpu", "gloo", None)
        k, self.pace_facts = pace
        self.dilation = Dilation(k)  # the one value every conversion below asks
        self.hostload: hostload.HostLoad | None = None
        self.sampler: bottleneck.BottleneckSampler | None = None
        self.cross_pairs: list[tuple[str, str]] = []
        self.counters_before: dict[str, counters.IntfCounters] = {}
        self.counters_after: dict[str, counters.IntfCounters] = {}
        self.intfs: dict[str, str] = {}
        self.tcp_before: dict[str, dict[str, int]] = {}
        self.tcp_after: dict[str, dict[str, int]] = {}
        self.capture: Any = None
        self.capture_fallback: list[str] = []
        self.capture_ips: set[str] = set()
        self._first_step_wall: float | None = None  # progress line: start-up vs training
        self.emu: Any = None
        self.traffic: CrossTraffic | None = None
        self.timeline: Timeline | None = None
        self.workers: WorkerGroup | None = None
        self._own_zygote: launcher.Zygote | None = None
        self._stopped_since: dict[int, float] = {}

    def _write_pids(self) -> None:
        self.folder.write_pids({
            "orchestrator": os.getpid(),
            "prefix": getattr(self.emu, "prefix", None),
            "workers": self.workers.pids if self.workers else [],
            "iperf3": self.traffic.pids if self.traffic else [],
        })

    # phases ---------------------------------------------------------------------
    def _build(self) -> None:
        t = time.monotonic()
        self.progress.update("building network", force=True)
        topo = self.scn.topology
        self.emu = Emulation(topo.kind, dilation.topology_params(topo.build_params(), self.dilation),
                             congestion_control=getattr(topo, "congestion_control", None),
                             ack_first=bool(getattr(topo, "ack_first", False)))
        self.config["prefix"] = self.emu.prefix
        self.folder.write_config(self.config)
        self.emu.start()
        # What the hosts' TCP then is (the setting, or the machine's default they inherited),
        # in config.json before any worker or iperf3 starts: one value, or one per host.
        used = self.emu.congestion_controls()
        self.config["tcp_congestion_control"] = (next(iter(used.values()))
                                                 if len(set(used.values())) == 1 else used)
        self.folder.write_config(self.config)
        if self.dilation.dilated:  # TCP's minimum RTO dilated with the rest (testbed.orchestration.dilation)
            self.emu.set_rto_min(dilation.rto_min_ms(self.dilation))
        self.timing["build_s"] = round(time.monotonic() - t, 3)
        # The topology's declared names (validated against the scenario) must be the
        # names it built: a plug-in whose Params and build() disagree stops here.
        for what, expected, actual in (
            ("link names", sorted(topo.link_names()), sorted(self.emu.links())),
            ("worker hosts", topo.worker_hosts(), list(self.emu.worker_hosts)),
            ("cross hosts", topo.cross_hosts(), list(self.emu.cross_hosts)),
        ):
            if expected != actual:
                raise RunFailed(f"{what} differ from the emulation's: declared {expected}, "
                                 f"built {actual}")

    def _probe(self) -> None:
        rows = []
        pairs = self.scn.topology.probe_pairs()
        for link in self.emu.links():
            configured = self.emu.link_rate(link)
            pair = pairs.get(link)
            if pair is None:
                rows.append({"link": link, "configured_mbit": self.dilation.virtual_mbit(configured)})
                continue
            self.progress.update(f"probing link {link}", force=True)
            measured = self.emu.iperf3_goodput(pair[0], pair[1], self.scn.probe_s)
            rows.append({
                "link": link, "src": pair[0], "dst": pair[1], "configured_mbit": self.dilation.virtual_mbit(configured),
                "measured_mbit": round(self.dilation.virtual_mbit(measured), 3), "seconds": self.scn.probe_s,
            })
        self.folder.write_links(rows)

    def _start_traffic(self, plans: list[Any]) -> None:
        self.traffic = CrossTraffic(self.emu, self.folder.path / "cross")
        for plan in plans:
            self.traffic.plan(plan.id, plan.src, plan.dst, plan.streams,
                              None if plan.bitrate_mbit is None else self.dilation.real_mbit(plan.bitrate_mbit))
        self.traffic.start_servers()

    def _apply(self, action: Action) -> str:
        """Apply one timeline action (``ACTIONS``); the detail goes to events.csv."""
        assert self.traffic is not None
        try:
            apply = ACTIONS[action.kind]
        except KeyError:
            raise ValueError(f"unknown action {action.kind}") from None
        return apply(self, action)

    def _set_rate(self, action: Action) -> str:
        d = self.dilation
        self.emu.set_rate(action.target, d.real_mbit(float(action.value)))
        return f"{action.value:g} Mbit/s" + (f" (real {d.real_mbit(action.value):g})" if d.dilated else "")

    def _cross_start(self, action: Action) -> str:
        detail = self.traffic.start_slot(action.target, action.slot)
        self._write_pids()
        return detail

    def _cross_stop(self, action: Action) -> str:
        return self.traffic.stop(action.target)

    def _launch(self) -> None:
        hosts = list(self.emu.worker_hosts)
        if len(hosts) != self.scn.world_size:
            raise RunFailed(f"emulation has {len(hosts)} worker hosts, scenario wants "
                             f"{self.scn.world_size}")
        self.workers = WorkerGroup(self.emu, self.folder.workers, gpus=self.gpu_plan.per_rank)
        zygote = self._ready_zygote()
        self.counters_before = self._read_counters()
        self.launch_wall = time.time()
        self.timing["launch_wall"] = self.launch_wall
        self._start_sampler()
        self.hostload = hostload.HostLoad(
            self.folder.path / "host.csv",
            lambda: (self.workers.pids if self.workers else []) + (self.traffic.pids if self.traffic else []),
            self.launch_wall, self.dilation)
        self.hostload.start()
        own = self.scn.workload.own_job
        homes = [self.folder.host_dir(h) for h in hosts] if own else []
        for home in homes:
            home.mkdir(parents=True, exist_ok=True)
        self.workers.launch(
            hosts, self.config["worker_argv"], self.config["master_port"],
            zygote, on_spawn=self._write_pids,
            extra_env=[job_env(self.scn, self.spec, self.seed, self.folder.workers, r,
                               self.folder.path.name, self.dilation) for r in range(len(hosts))]
            if own else None,
            cwd=[str(h) for h in homes] if own else None)

    def _forkable(self) -> bool:
        """Whether this run's workers can come from the zygote: the built-in worker, or an
        own job run by ``python`` (``workers.forkable``; any other program is exec'd fresh)."""
        return not self.scn.workload.own_job or forkable(self.config["worker_argv"])

    def _start_zygote(self) -> None:
        """A zygote for this run alone, when no shared one exists (imports overlap the build)."""
        if not launcher.enabled() or launcher.current() is not None or not self._forkable():
            return
        try:
            self._own_zygote = launcher.Zygote()
        except OSError as exc:
            self.summary["launcher_note"] = f"zygote did not start: {exc}"

    def _ready_zygote(self) -> launcher.Zygote | None:
        """The zygote to fork workers from, or None for fresh processes (noted why)."""
        zygote = (launcher.current() or self._own_zygote) if launcher.enabled() else None
        if zygote is None or not self._forkable():  # another program than python: as is
            self.summary["launcher"] = "process"
            return None
        t = time.monotonic()
        try:
            zygote.wait_ready()
        except launcher.ZygoteError as exc:
            self.summary.update(launcher="process", launcher_note=str(exc))
            return None
        self.timing["zygote_wait_s"] = round(time.monotonic() - t, 3)
        self.summary["launcher"] = "fork"
        return zygote

    def _monitor(self) -> None:
        assert self.timeline is not None and self.launch_wall is not None
        assert self.workers is not None
        deadline = time.monotonic() + self.dilation.real_s(self.scn.deadline_s())
        rank0 = self.folder.rank0_log()
        if self.scn.timeline_origin == "launch":
            self.timeline.start(self.launch_wall)
        while True:
            codes = self.workers.exit_codes()
            failure = self.workers.failure(codes)
            if failure:
                raise RunFailed(failure)
            if all(c is not None for c in codes):
                self.timing["workers_done_wall"] = time.time()
                self.counters_after = self._read_counters()
                if self.scn.workload.own_job:
                    self._own_job_end()
                return
            if self.timeline.error:
                raise RunFailed(f"timeline event failed: {self.timeline.error}")
            self._check_health()
            if time.monotonic() > deadline:
                frames = self.workers.ask_stacks()  # before anything is killed
                stuck = (self._own_job_stages(codes, frames) if self.scn.workload.own_job
                         else self._worker_stacks(frames))
                raise RunFailed(f"timeout: workers still running after "
                                 f"{self.dilation.real_s(self.scn.deadline_s()):.0f} s{stuck}")
            rec = worker_records.last_step(rank0)
            if rec is not None and not self.timeline.started:
                self.timeline.start(self.launch_wall, origin_wall=float(rec.get("wall", 0)))
            self.progress.update(self._status_text(rec))
            time.sleep(POLL_S)

    # an own job ------------------------------------------------------------------
    def _job_dir(self) -> str | None:
        """The folder of an own job's script (its frames are named relative to it)."""
        argv = self.config.get("worker_argv") or []
        if self.scn.workload.own_job and len(argv) > 1 and argv[1] not in ("-m", "-c"):
            return os.path.dirname(argv[1])
        return self.scn.workload.cwd

    def _worker_stacks(self, frames: dict[int, list[stacks.Frame]]) -> str:
        """`` (rank 0 in FUNC (FILE:LINE); ...; stacks in workers/rank<N>.stack)``."""
        if not frames:
            return ""
        parts = [f"rank {r} {stacks.where(f, self._job_dir())}" for r, f in sorted(frames.items())]
        return f" ({'; '.join(parts)}; {self._stack_files(frames)})"

    @staticmethod
    def _stack_files(frames: dict[int, list[stacks.Frame]]) -> str:
        ranks = sorted(frames)
        return ("stacks in workers/rank" + (f"{ranks[0]}" if len(ranks) == 1 else
                                            "{" + ",".join(map(str, ranks)) + "}") + ".stack")

    def _own_job_stages(self, codes: list[int | None],
                        frames: dict[int, list[stacks.Frame]] | None = None) -> str:
        """Where each rank of a hung own job is (its Python stack, ``stacks``; else
        ``workers.stage``, its records), read before anything is killed:
        ``; rank 0: ...; ranks 1, 2: ...``."""
        frames = frames or {}
        hosts = list(self.emu.worker_hosts)
        ips = [self.emu.ip(h) for h in hosts]
        master = (ips[0], int(self.config["master_port"]))
        recs = worker_records.load_worker_records(self.folder.workers, self.scn.world_size)
        by_stage: dict[str, list[int]] = {}
        for rank, host in enumerate(hosts):
            if codes[rank] is not None:
                where = f"exited with code {codes[rank]}"
            elif any(r.get("kind") == "start" for r in recs.get(rank, [])):
                steps = [r for r in recs.get(rank, []) if r.get("kind") == "step"]
                where = ("registered the hook, then no step finished (a backward's bucket 0 "
                         "never came back)" if not steps else
                         f"registered the hook; its last finished step is {steps[-1].get('step')}"
                         + ("" if rank in frames else " (inside a step or a collective since)"))
            else:
                where = stage(self.emu.host_pid(host), ips[rank], master,
                              [ip for i, ip in enumerate(ips) if i != rank])
            if rank in frames:
                where += f", {stacks.where(frames[rank], self._job_dir())}"
            by_stage.setdefault(where, []).append(rank)
        parts = [f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {w}"
                 for w, r in by_stage.items()]
        files = f"; {self._stack_files(frames)}" if frames else ""
        return " (the own job's ranks: " + "; ".join(parts) + files + ")"

    def _own_job_end(self) -> None:
        """Every rank of an own job exited 0 (a non-zero exit failed the run already):
        what they left running is killed and fails the run, as do a job that never
        registered the hook and one that registered another method than the run's."""
        assert self.workers is not None
        left = self._stragglers(wait_s=STRAGGLER_GRACE_S)
        if left:
            self._kill_stragglers(left)
            shown = "; ".join(f"rank {r}: pid {pid} ({cmd})" for r, pid, cmd in left[:4])
            more = f" and {len(left) - 4} more" if len(left) > 4 else ""
            self.summary["left_behind"] = [{"rank": r, "pid": pid, "command": cmd}
                                           for r, pid, cmd in left]
            raise RunFailed(f"the own job left {len(left)} process{'es' if len(left) > 1 else ''} "
                             f"running after its ranks exited (killed): {shown}{more}")
        recs = worker_records.load_worker_records(self.folder.workers, self.scn.world_size)
        for rank in range(self.scn.world_size):
            start = next((r for r in recs.get(rank, []) if r.get("kind") == "start"), None)
            if start is None:
                raise RunFailed(
                    f"rank {rank} exited 0 without ever calling hooks.register (no records in "
                    f"workers/rank{rank}.jsonl): the testbed measures an own job through the "
                    "hook; add `hooks.register(model)` after wrapping the model in DDP")
            if start.get("method") != self.method:
                raise RunFailed(
                    f"rank {rank} registered method {start.get('method')!r}, not the run's "
                    f"{self.method!r}: call hooks.register(model) without a method so that "
                    "the run's method (NETSENSE_METHOD) reaches it")

    def _stragglers(self, wait_s: float = 0.0) -> list[tuple[int, int, str]]:
        """What the own job's ranks left running (``workers.stragglers``), after waiting up
        to ``wait_s`` for it to end by itself."""
        assert self.workers is not None
        hosts = [self.emu.host_pid(h) for h in self.emu.worker_hosts]
        exclude = set(hosts) | set(self.traffic.pids if self.traffic else [])
        end = time.monotonic() + wait_s
        while True:
            left = stragglers(self.workers.pids, hosts, exclude)
            if not left or time.monotonic() >= end:
                return left
            time.sleep(0.1)

    @staticmethod
    def _kill_stragglers(left: list[tuple[int, int, str]]) -> None:
        for _, pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _check_health(self) -> None:
        """Faults the workers cannot report themselves, found within a poll or two: an
        emulated host whose shell died, a worker stopped by a signal."""
        dead = self.emu.dead_hosts() if hasattr(self.emu, "dead_hosts") else []
        if dead:
            raise RunFailed(f"emulated host {', '.join(dead)} is gone: its shell died "
                             "during the run (killed, or the OOM killer)")
        assert self.workers is not None
        now = time.monotonic()
        for rank, state in self.workers.states().items():
            if state not in ("T", "t"):
                self._stopped_since.pop(rank, None)
                continue
            since = self._stopped_since.setdefault(rank, now)
            if now - since >= STOPPED_RANK_S:
                raise RunFailed(f"rank {rank} is stuck: its process is stopped (state "
                                 f"{state}, e.g. SIGSTOP) for {now - since:.0f} s; its peers "
                                 "wait for it in their collectives")

    def _status_text(self, rec: dict[str, Any] | None) -> str:
        now = time.time()
        elapsed = now - (self.launch_wall or now)
        if rec is None:
            return f"start-up (torch import, rendezvous)  {elapsed:5.1f} s"
        if self._first_step_wall is None:
            self._first_step_wall = now
        start_up = self._first_step_wall - (self.launch_wall or now)
        parts = [f"training: step {rec.get('step')}", f"{now - self._first_step_wall:5.1f} s",
                 f"(after {start_up:.1f} s start-up)"]
        if isinstance(rec.get("kept_ratio"), int | float):
            parts.append(f"kept {rec['kept_ratio']:.3g}")
        if isinstance(rec.get("comm_s"), int | float):
            parts.append(f"comm {rec['comm_s']:.3f} s")
        if self.timeline is not None and self.timeline.records:
            last = self.timeline.records[-1]
            parts.append(f"last event {last.kind} {last.target}")
        return "  ".join(parts)

    # network truth ------------------------------------------------------------------
    def _read_counters(self) -> dict[str, counters.IntfCounters]:
        """Each worker host's interface counters, read in its namespace (no subprocess),
        and its TCP stack's counters (``tcp_before`` / ``tcp_after``)."""
        self.intfs = {h: self.emu.intf(h) for h in self.emu.worker_hosts}
        tcp = {h: counters.read_tcp_counters(self.emu.host_pid(h)) for h in self.emu.worker_hosts}
        if self.tcp_before:
            self.tcp_after = tcp
        else:
            self.tcp_before = tcp
        return {h: counters.read_counters(self.emu.host_pid(h), self.intfs[h])
                for h in self.emu.worker_hosts}

    def _start_sampler(self) -> None:
        """bottleneck.csv: the watched links' qdisc truth at 10 Hz (testbed.emulation.bottleneck)."""
        targets = [a.target for a in (self.timeline.actions if self.timeline else [])
                   if a.kind == "set_rate"]
        links = bottleneck.watched_links(self.emu.links(), targets, self.cross_pairs,
                                         list(self.emu.worker_hosts))
        ends = [bottleneck.LinkEnd(link, dev, pid, toward)
                for link in links for dev, pid, toward in self.emu.link_ends(link)]
        # Under dilation the qdiscs are read less often in real time (each read is a `tc`
        # process, whose start-up takes CPU from the paced workers): every 10 ms virtual,
        # but never more often than undilated nor more than 1 s apart.
        base = bottleneck.PERIOD_S
        period = min(max(self.dilation.real_s(base / 10), base), 10 * base)
        self.sampler = bottleneck.BottleneckSampler(
            ends, self.emu.link_rate, self.folder.path / "bottleneck.csv", self.launch_wall,
            period_s=period, dilation=self.dilation)
        self.sampler.start()
        if self.scn.capture:
            self._start_capture(ends)

    def _start_capture(self, ends: list[bottleneck.LinkEnd]) -> None:
        """capture.pcap on the first watched end in this namespace (a switch's end: it
        sees both directions of its link); the analysis runs after teardown."""
        dst_hosts = [d for _, d in self.cross_pairs]
        local = [e for e in ends if e.pid is None]
        if not local:
            self.network["capture"] = {"error": "no watched link end in this namespace"}
            return
        end = next((e for e in local if e.toward in dst_hosts), local[0])
        self.capture_ips = {self.emu.ip(h) for h in self.emu.worker_hosts}
        try:
            self.capture, why_not = capture.open_capture(end.dev,
                                                         self.folder.path / "capture.pcap")
        except capture.CaptureError as exc:
            self.network["capture"] = {"error": str(exc)}
            return
        self.capture_fallback = why_not
        if self.capture.pid is not None:  # tcpdump: killed and registered like iperf3
            self.emu.adopt(self.capture.proc, None, "capture:tcpdump")

    def _stop_truth(self) -> None:
        """Last counters (if the workers did not all finish) and the sampler, before the
        emulation goes; errors here are recorded, never raised past teardown."""
        if not self.counters_after and self.counters_before and self.emu is not None:
            try:
                self.counters_after = self._read_counters()
            except (OSError, LookupError) as exc:
                self.network["bytes_error"] = f"{type(exc).__name__}: {exc}"
        if self.sampler is not None:
            self.network["bottleneck"] = self.sampler.stop()
        if self.hostload is not None:
            self.summary["host_load"] = self.hostload.stop()
            self.hostload = None
        if self.capture is not None:
            self.network["capture"] = self.capture.stop()
            if self.capture_fallback:
                self.network["capture"]["fallback"] = self.capture_fallback

    def _analyse_capture(self) -> None:
        """capture.csv: bytes per flow class over time and retransmissions (scapy)."""
        if self.capture is None:
            return
        ports = {}
        if self.traffic is not None:
            for g in self.traffic.groups.values():
                for slot in g.slots:
                    ports[slot.port] = f"cross:{g.id}"
        try:
            self.network["capture"].update(capture.write_analysis(
                self.capture.path, self.folder.path / "capture.csv", self.launch_wall or 0.0,
                ports, self.capture_ips))
        except Exception as exc:  # noqa: BLE001 - the capture is information, not the result
            self.network["capture"]["error"] = f"{type(exc).__name__}: {exc}"

    def _conservation(self) -> None:
        """summary.json's ``network.bytes`` and its warnings (testbed.emulation.counters)."""
        if not (self.counters_before and self.counters_after):
            return
        recs = worker_records.load_worker_records(self.folder.workers, self.scn.world_size)
        cross_hosts = {h for pair in self.cross_pairs for h in pair}
        ranks = []
        for rank, host in enumerate(self.emu.worker_hosts):
            rank_recs = recs.get(rank, [])
            sent, colls, steps = counters.hook_totals(rank_recs)
            grad = next((int(r.get("grad_bytes") or 0) for r in rank_recs
                         if r.get("kind") == "start"), 0)
            ranks.append(counters.rank_bytes(
                rank, host, self.intfs[host], self.counters_before[host],
                self.counters_after[host], sent, colls, steps, self.scn.world_size,
                grad_bytes=grad, cross_endpoint=host in cross_hosts))
        block, warns = counters.verdict(ranks, self.scn.world_size)
        self.network["bytes"] = block
        self.warnings += warns
        if self.tcp_after:  # the job's own retransmissions and timeouts, per rank
            self.network["tcp"] = [
                {"rank": rank, "host": host,
                 **{k: self.tcp_after[host].get(k, 0) - v
                    for k, v in self.tcp_before.get(host, {}).items()}}
                for rank, host in enumerate(self.emu.worker_hosts) if host in self.tcp_after]

    def _cross_reports(self) -> None:
        if self.traffic is None or not self.traffic.groups:
            return
        reports = self.traffic.reports()
        origin = self.launch_wall or 0.0
        for r in reports:
            if r.get("started_wall") is not None:
                r["started_t"] = round(r.pop("started_wall") - origin, 3)
        self.network["cross_traffic"] = dilation.virtual_reports(reports, self.dilation)

    def _teardown_all(self) -> None:
        t = time.monotonic()
        errors: list[str] = []
        if self.timeline is not None:
            self.timeline.stop()
        try:
            self._stop_truth()
        except Exception as exc:  # noqa: BLE001 - truth is information; teardown goes on
            errors.append(f"network truth: {type(exc).__name__}: {exc}")
        for step, fn in (
            ("cross-traffic", lambda: self.traffic and self.traffic.close()),
            ("workers", lambda: self.workers and self.workers.kill()),
            ("own job's leftovers", self._teardown_stragglers),
            ("emulation", lambda: self.emu and self.emu.stop()),
            ("zygote", lambda: self._own_zygote and self._own_zygote.close()),
        ):
            self._teardown_step = step
            error = bounded(fn, TEARDOWN_STEP_S[step])
            if error:
                errors.append(f"{step}: {error}")
        self._teardown_step = None
        if self.workers is not None:
            try:
                self.workers.close_logs()
            except OSError as exc:  # a log's last bytes on a full disk: not the record
                errors.append(f"worker logs: {exc}")
        self.timing["teardown_s"] = round(time.monotonic() - t, 3)
        incomplete = [e for e in errors if "did not finish" in e]
        if self.emu is not None and getattr(self.emu, "leftovers", None):
            incomplete.append(f"left {', '.join(self.emu.leftovers)}")
        if incomplete:
            self.summary["teardown_incomplete"] = incomplete
            if hasattr(self.emu, "abandon"):
                self.emu.abandon("; ".join(incomplete))
        if self.emu is not None and getattr(self.emu, "dead_shells", None):
            self.summary["dead_host_shells"] = list(self.emu.dead_shells)
        if errors:
            self.summary["teardown_errors"] = errors

    def _teardown_stragglers(self) -> None:
        """An own job's processes that escaped its process group (setsid) are not the
        emulation's to kill: found here (in the workers' hosts), killed, and named."""
        if not (self.scn.workload.own_job and self.workers and self.emu):
            return
        left = self._stragglers()
        if left:
            self._kill_stragglers(left)
            self.summary.setdefault("left_behind", []).extend(
                {"rank": r, "pid": pid, "command": cmd, "at": "teardown"} for r, pid, cmd in left)

    def _collect_more(self) -> None:
        if self.workers is not None:
            stacks.drop_empty(self.folder.workers)  # every rank opened one; kept: the asked
            self.summary["worker_exit_codes"] = self.workers.exit_codes()
            if self.workers.exit_anomalies:
                self.summary["exit_anomalies"] = list(self.workers.exit_anomalies)
        self._cross_reports()
        self._conservation()
        self._analyse_capture()

    # lifecycle hooks ---------------------------------------------------------------
    def _config_extra(self) -> dict[str, Any]:
        return {
            "master_port": 29500 + random.randrange(1000),
            "worker_argv": job_argv(self.scn) if self.scn.workload.own_job else worker_argv(
                self.scn, self.spec, self.seed, self.folder.workers, self.gpu_plan.device,
                self.gpu_plan.backend, self.dilation),
            "accelerator": {**self.pace_facts, "dilation": self.dilation.k},
            "gpu_plan": vars(self.gpu_plan),
        }

    def _make_config(self) -> None:
        super()._make_config()
        self.warnings += self.scn.warnings()  # valid but probably not meant (the scenario's)
        above = faithful.warning(self.config["scenario"], self.dilation)
        if above:  # stated in summary.json and the report; the run still runs
            self.warnings.append(above)

    def _work(self) -> None:
        if "error" in self.pace_facts:  # the factor `auto` could not be measured
            raise RunFailed(self.pace_facts["error"])
        actions, plans = expand(self.scn.timeline, end_s=self.scn.workload.time_limit_s)
        self.cross_pairs = [(p.src, p.dst) for p in plans]
        self._start_zygote()
        self._build()
        if self.scn.probe_links:
            self._probe()
        self._start_traffic(plans)
        self.timeline = Timeline(actions, self._apply, self.dilation)
        self._launch()
        self._monitor()

    def _after_teardown(self) -> None:
        if self.traffic is not None or self.workers is not None:
            try:
                self._write_pids()
            except OSError as exc:  # (a full disk) named in the reason; the record follows
                raise OSError(f"writing pids.json: {exc}") from exc

    def _final_fields(self) -> dict[str, Any]:
        return {"prefix": getattr(self.emu, "prefix", None),
                "build_s": self.timing.get("build_s"),
                "teardown_s": self.timing.get("teardown_s")}

    def _abandon(self, why: str) -> None:
        if self.emu is not None and hasattr(self.emu, "abandon"):
            self.emu.abandon(why)


#: How each primitive action of ``testbed.config.events.ACTION_KINDS`` is applied.
ACTIONS: dict[str, Callable[[_Run, Action], str]] = {
    "set_rate": _Run._set_rate, "cross_start": _Run._cross_start, "cross_stop": _Run._cross_stop,
}


def run_scenario(
    scenario: Scenario, method: str | MethodSpec, seed: int, run_dir: Path, *, progress: bool = True,
    meta: dict[str, Any] | None = None,
) -> RunOutcome:
    """Run one (scenario, method, seed) into ``run_dir``; never raises for run failures.

    Returns RunOutcome(run_dir, status, summary). ``status`` is "ok" or "failed" (the
    summary then has a one-line ``reason``). Raises ``RunInterrupted`` (a
    KeyboardInterrupt) after teardown if SIGINT/SIGTERM arrived, and ValueError if
    ``run_dir`` already holds a finished (ok) run, which a caller must never overwrite.
    ``meta`` (a sweep's record of the run) is written as sweep.json together with the
    first summary, so a run folder never exists without it. Raises ``gpus.GpuPlanError``
    (a ValueError) before anything exists when the scenario needs GPUs this machine does
    not have.
    """
    # the scenario's own methods were parsed with it; another (the CLI and the API may run
    # any valid method) is checked as the scenario checks its own; a spec passes as is
    spec = scenario.method_spec(method)
    if scenario.topology.kind == "hosts":  # real machines: torchrun + tc on their NICs
        return HostsRun(scenario, spec, seed, Path(run_dir).absolute(), progress,
                        meta).execute()
    wl = scenario.workload
    plan = gpus.plan(wl.device, wl.backend, scenario.world_size, gpus.visible_gpus())
    health.check_space(Path(run_dir), scenario)  # files.NotEnoughSpace: nothing is written
    try:
        pace = dilation.choose(scenario, spec)
    except dilation.DilationError as exc:  # the run fails with that reason, in its folder
        pace = (1.0, {"mode": "paced", "error": str(exc)})
    # absolute: workers (forked by the zygote, which works elsewhere) open files under it
    return _Run(scenario, spec, seed, Path(run_dir).absolute(), progress, meta,
                plan, pace).execute()


def summary_table_rows(outcomes: list[RunOutcome]) -> list[dict[str, Any]]:
    """Rows for the per-method table printed after ``netsense run``."""
    rows = []
    for o in outcomes:
        s = o.summary
        rows.append({
            "method": s.get("method"), "seed": s.get("seed"), "status": o.status,
            "throughput": s.get("throughput_samples_per_s"),
            "final_acc": s.get("final_accuracy"), "tta": s.get("time_to_accuracy_s"),
            "mb_sent": (s.get("bytes_sent_total") or 0) / 1e6,
            "reason": s.get("reason"), "run_dir": str(o.run_dir),
            "warnings": s.get("warnings", []),
            # an own job that never called hooks.report(accuracy=...): no accuracy to show
            "accuracy_reported": s.get("accuracy_reported", True),
        })
    return rows


__all__ = [
    "RunInterrupted", "RunOutcome", "make_run_id", "run_scenario", "sanitize_method",
    "summary_table_rows", "worker_argv",
]
