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

Failures never raise out of ``run_scenario``: they end up in summary.json. The one thing
that does propagate is an interruption (SIGINT/SIGTERM), *after* teardown, as
``RunInterrupted`` (a KeyboardInterrupt carrying the signal number), so that a sweep stops
and the CLI exits 130/143. A second signal during teardown is recorded and ignored:
teardown must finish, or the machine keeps our interfaces and processes.
"""

from __future__ import annotations

import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from subprocess import Popen
from typing import IO, Any

from testbed.common import files
from testbed.config.scenario import (
    DumbbellTopology,
    LeafSpineTopology,
    Scenario,
    build_params,
    link_names,
)
from testbed.emulation import rootless
from testbed.emulation.traffic import CrossTraffic
from testbed.orchestration import records
from testbed.orchestration.timeline import EVENT_COLUMNS, Action, Timeline, expand

REPO_ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.2


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # "ok" | "failed"
    summary: dict[str, Any]


class RunInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM during a run, re-raised after teardown; exit code 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _RunFailed(Exception):
    """A run-level failure with a one-line reason for summary.json."""


def sanitize_method(method: str) -> str:
    """Method spec as a path component: 'topk:0.01' -> 'topk-0.01'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", method)


def make_run_id(method: str, seed: int, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{sanitize_method(method)}-s{seed}"


def worker_argv(scenario: Scenario, method: str, seed: int, log_dir: Path) -> list[str]:
    """``python -m workloads.train`` command line for this scenario/method/seed."""
    wl = scenario.workload
    argv = [
        sys.executable, "-m", "workloads.train", "--model", wl.model, "--dataset", wl.dataset,
        "--method", method, "--batch-size", str(wl.batch_size), "--seed", str(seed),
        "--log-dir", str(log_dir), "--threads", str(wl.threads),
    ]
    if wl.steps is not None:
        argv += ["--steps", str(wl.steps)]
    if wl.time_limit_s is not None:
        argv += ["--time-limit", f"{wl.time_limit_s:g}"]
    for flag, value in (
        ("--eval-every", wl.eval_every), ("--target-accuracy", wl.target_accuracy),
        ("--lr", wl.lr), ("--data-dir", wl.data_dir), ("--pg-timeout", wl.pg_timeout_s),
    ):
        if value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    for key, value in wl.args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def probe_pairs(scenario: Scenario) -> dict[str, tuple[str, str]]:
    """For each probe-able link, a (src, dst) host pair whose traffic crosses it.

    Access link of host h: from another host behind the same switch toward h (so no
    other shaped link is narrower in between, except the other host's own access link of
    the same rate). Dumbbell bottleneck: first left worker to first right worker.
    Leaf-spine uplinks are not probed: STP chooses which uplink carries traffic.
    """
    topo = scenario.topology
    links = link_names(topo)
    hosts = [n for n in links if n[0] in "wx" and n[1:].isdigit()]

    def side(h: str) -> Any:
        if isinstance(topo, DumbbellTopology):
            i = int(h[1:])
            if h[0] == "w":
                return 0 if i < topo.n_left else 1
            return i % 2
        if isinstance(topo, LeafSpineTopology):
            return int(h[1:]) // topo.hosts_per_leaf
        return 0

    pairs: dict[str, tuple[str, str]] = {}
    for h in hosts:
        peers = [p for p in hosts if p != h and side(p) == side(h)]
        if peers:
            pairs[h] = (peers[0], h)
    if isinstance(topo, DumbbellTopology):
        pairs["bottleneck"] = ("w0", f"w{topo.n_left}")
    return pairs


# --------------------------------------------------------------------------- progress


class _Progress:
    """One status line per run: rich Live on a terminal, a plain line every 10 s otherwise."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self._live: Any = None
        self._last_plain = 0.0
        if enabled:
            from rich.console import Console

            self.console = Console(stderr=True)
            if self.console.is_terminal:
                from rich.live import Live

                self._live = Live("", console=self.console, refresh_per_second=4,
                                  transient=True)
                self._live.start()

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        line = f"{self.label}: {text}"
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text(line))
        elif force or time.monotonic() - self._last_plain >= 10.0:
            self._last_plain = time.monotonic()
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def close(self, final: str | None = None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.enabled and final:
            self.console.print(f"{self.label}: {final}", highlight=False, markup=False,
                               soft_wrap=True)


# --------------------------------------------------------------------------- the run


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("netsense", "torch", "mininet", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "?"
    try:
        out["iperf3"] = subprocess.run(
            ["iperf3", "--version"], capture_output=True, text=True, check=False, timeout=5
        ).stdout.split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        out["iperf3"] = "missing"
    return out


def _host_facts() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "euid": os.geteuid(),  # 0 also in the rootless mode: root of the run's user namespace
        "emulation": "rootless" if rootless.in_namespace() else "native",
    }


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(ln.strip()[:200] for ln in lines[-n:])


class _Run:
    def __init__(
        self, scenario: Scenario, method: str, seed: int, run_dir: Path, progress: bool
    ) -> None:
        self.scn = scenario
        self.method = method
        self.seed = seed
        self.run_dir = Path(run_dir)
        self.workers_dir = self.run_dir / "workers"
        self.progress = _Progress(progress, f"[{scenario.name}] {method} seed {seed}")
        self.emu: Any = None
        self.traffic: CrossTraffic | None = None
        self.timeline: Timeline | None = None
        self.workers: list[Popen] = []
        self.logs: list[IO[bytes]] = []
        self.launch_wall: float | None = None
        self.timing: dict[str, float] = {}
        self.config: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self._teardown = False
        self._pending_signal: int | None = None
        self._old_handlers: dict[int, Any] = {}

    # signals --------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self._teardown or self._pending_signal is not None:
            self._pending_signal = self._pending_signal or signum
            return  # never interrupt teardown
        self._pending_signal = signum
        raise RunInterrupted(signum)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signals(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    # files ----------------------------------------------------------------------
    def _prepare_dir(self) -> None:
        old = files.read_json(self.run_dir / "summary.json")
        if old and old.get("status") == "ok":
            raise ValueError(f"{self.run_dir} holds a finished run (status ok); not overwriting")
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)  # an earlier failed attempt of this same run
        self.workers_dir.mkdir(parents=True)

    def _write_pids(self) -> None:
        data = {
            "orchestrator": os.getpid(),
            "prefix": getattr(self.emu, "prefix", None),
            "workers": [p.pid for p in self.workers],
            "iperf3": self.traffic.pids if self.traffic else [],
        }
        files.write_json(self.run_dir / "pids.json", data)

    # phases ---------------------------------------------------------------------
    def _build(self) -> None:
        from testbed.emulation import Emulation

        t = time.monotonic()
        self.progress.update("building network", force=True)
        self.emu = Emulation(self.scn.topology.kind, build_params(self.scn.topology))
        self.config["prefix"] = self.emu.prefix
        files.write_json(self.run_dir / "config.json", self.config)
        self.emu.start()
        self.timing["build_s"] = round(time.monotonic() - t, 3)
        expected = set(link_names(self.scn.topology))
        actual = set(self.emu.links())
        if expected != actual:  # the schema's names must be the emulation's names
            raise _RunFailed(
                f"link names differ from the emulation's: expected {sorted(expected)}, "
                f"got {sorted(actual)}"
            )

    def _probe(self) -> None:
        rows = []
        pairs = probe_pairs(self.scn)
        for link in self.emu.links():
            configured = self.emu.link_rate(link)
            pair = pairs.get(link)
            if pair is None:
                rows.append({"link": link, "configured_mbit": configured})
                continue
            self.progress.update(f"probing link {link}", force=True)
            measured = self.emu.iperf3_goodput(pair[0], pair[1], self.scn.probe_seconds)
            rows.append({
                "link": link, "src": pair[0], "dst": pair[1], "configured_mbit": configured,
                "measured_mbit": round(measured, 3), "seconds": self.scn.probe_seconds,
            })
        files.write_csv(self.run_dir / "link.csv", records.LINK_COLUMNS, rows)

    def _apply(self, action: Action) -> str:
        assert self.traffic is not None
        if action.kind == "set_rate":
            self.emu.set_rate(action.target, float(action.value))
            return f"{action.value:g} Mbit/s"
        if action.kind == "cross_start":
            detail = self.traffic.start_slot(action.target, action.slot)
            self._write_pids()
            return detail
        if action.kind == "cross_stop":
            return self.traffic.stop(action.target)
        raise ValueError(f"unknown action {action.kind}")

    def _launch(self) -> None:
        hosts = list(self.emu.worker_hosts)
        world = len(hosts)
        if world != self.scn.world_size:
            raise _RunFailed(f"emulation has {world} worker hosts, scenario wants "
                             f"{self.scn.world_size}")
        argv = worker_argv(self.scn, self.method, self.seed, self.workers_dir)
        base_env = dict(os.environ)
        base_env.update(
            WORLD_SIZE=str(world), MASTER_ADDR=self.emu.ip(hosts[0]),
            MASTER_PORT=str(self.config["master_port"]), OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
        )
        base_env.pop("LOCAL_RANK", None)
        self.launch_wall = time.time()
        self.timing["launch_wall"] = self.launch_wall
        for rank, host in enumerate(hosts):
            env = dict(base_env, RANK=str(rank), GLOO_SOCKET_IFNAME=self.emu.intf(host))
            log = open(self.workers_dir / f"rank{rank}.log", "wb")  # noqa: SIM115
            self.logs.append(log)
            proc = self.emu.popen(host, argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  cwd=str(REPO_ROOT))
            self.workers.append(proc)
        self._write_pids()

    def _monitor(self) -> None:
        assert self.timeline is not None and self.launch_wall is not None
        deadline = time.monotonic() + self.scn.deadline_s()
        rank0 = self.workers_dir / "rank0.jsonl"
        if self.scn.timeline_origin == "launch":
            self.timeline.start(self.launch_wall)
        while True:
            codes = [p.poll() for p in self.workers]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                # Several at once: the one killed by a signal is the cause, the others
                # (exit 1 on a reset connection) are collateral.
                rank, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))
                others = ", ".join(f"rank {r}: {c}" for r, c in failed if r != rank)
                tail = _tail(self.workers_dir / f"rank{rank}.log")
                raise _RunFailed(f"worker rank {rank} exited with code {code}"
                                 + (f" (also {others})" if others else "") + f": {tail}")
            if all(c == 0 for c in codes):
                return
            if self.timeline.error:
                raise _RunFailed(f"timeline event failed: {self.timeline.error}")
            if time.monotonic() > deadline:
                raise _RunFailed(f"timeout: workers still running after "
                                 f"{self.scn.deadline_s():.0f} s")
            rec = records.last_step(rank0)
            if rec is not None and not self.timeline.started:
                self.timeline.start(self.launch_wall, origin_wall=float(rec.get("wall", 0)))
            self.progress.update(self._status_text(rec))
            time.sleep(POLL_S)

    def _status_text(self, rec: dict[str, Any] | None) -> str:
        elapsed = time.time() - (self.launch_wall or time.time())
        if rec is None:
            return f"starting workers  {elapsed:5.1f} s"
        parts = [f"step {rec.get('step')}", f"{elapsed:5.1f} s"]
        if isinstance(rec.get("kept_ratio"), int | float):
            parts.append(f"kept {rec['kept_ratio']:.3g}")
        if isinstance(rec.get("comm_s"), int | float):
            parts.append(f"comm {rec['comm_s']:.3f} s")
        if self.timeline is not None and self.timeline.records:
            last = self.timeline.records[-1]
            parts.append(f"last event {last.kind} {last.target}")
        return "  ".join(parts)

    def _teardown_all(self) -> None:
        self._teardown = True
        t = time.monotonic()
        errors: list[str] = []
        if self.timeline is not None:
            self.timeline.stop()
        for step, fn in (
            ("cross-traffic", lambda: self.traffic and self.traffic.close()),
            ("workers", self._kill_workers),
            ("emulation", lambda: self.emu and self.emu.stop()),
        ):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - every teardown step must get its turn
                errors.append(f"{step}: {type(exc).__name__}: {exc}")
        for fh in self.logs:
            fh.close()
        self.timing["teardown_s"] = round(time.monotonic() - t, 3)
        if errors:
            self.summary["teardown_errors"] = errors

    def _kill_workers(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                try:
                    self.emu.kill(p)
                except Exception:  # noqa: BLE001 - fall back to our own PID kill
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass

    def _collect(self) -> None:
        ws = self.scn.world_size
        recs = records.load_worker_records(self.workers_dir, ws)
        origin = self.launch_wall or time.time()
        rows, columns = records.step_rows(recs, origin)
        files.write_csv(self.run_dir / "steps.csv", columns, rows)
        events = [vars(r) for r in (self.timeline.snapshot() if self.timeline else [])]
        files.write_csv(self.run_dir / "events.csv", EVENT_COLUMNS, events)
        self.summary.update(records.metrics(recs, self.scn.workload.target_accuracy))
        self.summary["events_applied"] = len(events)
        self.summary["events_scheduled"] = len(self.timeline.actions) if self.timeline else 0

    # main -----------------------------------------------------------------------
    def execute(self) -> RunOutcome:
        self._prepare_dir()
        started = datetime.now(timezone.utc)
        self.config = {
            "scenario": self.scn.model_dump(mode="json"),
            "method": self.method,
            "seed": self.seed,
            "run_id": self.run_dir.name,
            "world_size": self.scn.world_size,
            "master_port": 29500 + random.randrange(1000),
            "worker_argv": worker_argv(self.scn, self.method, self.seed, self.workers_dir),
            "versions": _versions(),
            "host": _host_facts(),
            "started_at": started.isoformat(timespec="seconds"),
            "orchestrator_pid": os.getpid(),
        }
        files.write_json(self.run_dir / "config.json", self.config)
        self.summary = {
            "scenario": self.scn.name, "method": self.method, "seed": self.seed,
            "run_id": self.run_dir.name, "status": "running",
            "started_at": self.config["started_at"],
        }
        files.write_json(self.run_dir / "summary.json", self.summary)

        interrupted: RunInterrupted | None = None
        status, reason = "failed", None
        t_start = time.monotonic()
        self._install_signals()
        try:
            actions, plans = expand(self.scn.timeline)
            self._build()
            if self.scn.probe_links:
                self._probe()
            self.traffic = CrossTraffic(self.emu, self.run_dir / "cross")
            for plan in plans:
                self.traffic.plan(plan.id, plan.src, plan.dst, plan.streams, plan.bitrate_mbit)
            self.traffic.start_servers()
            self.timeline = Timeline(actions, self._apply)
            self._launch()
            self._monitor()
            status = "ok"
        except RunInterrupted as exc:
            interrupted, reason = exc, f"interrupted by {signal.Signals(exc.signum).name}"
        except KeyboardInterrupt:
            interrupted, reason = RunInterrupted(signal.SIGINT), "interrupted by SIGINT"
        except _RunFailed as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - recorded, the run is failed, the sweep goes on
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
            (self.run_dir / "orchestrator-error.txt").write_text(traceback.format_exc())
        finally:
            # Signals from here on are remembered but do not interrupt the teardown.
            self._teardown = True
            try:
                self.progress.update("tearing down", force=True)
                self._teardown_all()
                if self.traffic is not None or self.workers:
                    self._write_pids()
                try:
                    self._collect()
                except Exception as exc:  # noqa: BLE001
                    status = "failed"
                    reason = reason or f"collecting results: {type(exc).__name__}: {exc}"
                if status == "ok" and self.summary.get("worker_status") not in ("ok", None):
                    status, reason = "failed", "a worker reported failure"
                if status == "ok" and not self.summary.get("steps"):
                    status, reason = "failed", "no step records"
                self.summary.update(
                    status=status,
                    reason=reason,
                    world_size=self.scn.world_size,
                    prefix=getattr(self.emu, "prefix", None),
                    build_s=self.timing.get("build_s"),
                    teardown_s=self.timing.get("teardown_s"),
                    wall_s=round(time.monotonic() - t_start, 3),
                    finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                )
                if self.summary.get("reason") is None:
                    self.summary.pop("reason")
                files.write_json(self.run_dir / "summary.json", self.summary)
            finally:
                self._restore_signals()
                self.progress.close(_final_line(self.summary))
        if interrupted is None and self._pending_signal is not None:
            interrupted = RunInterrupted(self._pending_signal)
        if interrupted is not None:
            raise interrupted
        return RunOutcome(self.run_dir, status, self.summary)


def _final_line(s: dict[str, Any]) -> str:
    if s.get("status") == "ok":
        tp = s.get("throughput_samples_per_s")
        return (f"ok  {s.get('steps')} steps  {tp:.1f} samples/s  "
                f"build {s.get('build_s')} s  teardown {s.get('teardown_s')} s"
                if tp else "ok")
    return f"{s.get('status')}: {s.get('reason')}"


def run_scenario(
    scenario: Scenario, method: str, seed: int, run_dir: Path, *, progress: bool = True
) -> RunOutcome:
    """Run one (scenario, method, seed) into ``run_dir``; never raises for run failures.

    Returns RunOutcome(run_dir, status, summary). ``status`` is "ok" or "failed" (the
    summary then has a one-line ``reason``). Raises ``RunInterrupted`` (a
    KeyboardInterrupt) after teardown if SIGINT/SIGTERM arrived, and ValueError if
    ``run_dir`` already holds a finished (ok) run, which a caller must never overwrite.
    """
    if method not in scenario.methods:
        # allowed (the CLI may run any valid method), but validate it the same way
        from testbed.config.scenario import check_method

        check_method(method)
    return _Run(scenario, method, seed, Path(run_dir), progress).execute()


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
        })
    return rows


__all__ = [
    "RunInterrupted", "RunOutcome", "make_run_id", "run_scenario", "sanitize_method",
    "summary_table_rows", "worker_argv",
]
