"""The training workers of one run: their command line, their launch inside the emulated
hosts, failure detection and their end.

One worker per worker host, started in that host's network namespace, either forked from
a pre-imported zygote (``testbed.orchestration.launcher``: no ``import torch`` per run) or
as a fresh process (``Emulation.popen``: ``mnexec``, own process group); either way the
PID is registered with the emulation for teardown. Workers get
torch.distributed's ``env://`` variables and ``GLOO_SOCKET_IFNAME`` set to the host's
emulated interface (without it gloo binds to 127.0.0.1 and the ranks never meet).

An own job (a scenario's ``workload.command``) is started as torchrun starts a rank
(:func:`job_env`) with the run's method and record folder in ``NETSENSE_*`` variables
(``netsenseml.job``): forked from the zygote too when the command is ``python ...``
(:func:`forkable`; ``workloads.job_runner`` runs it as ``python`` would, without the imports a
fresh interpreter pays), else a fresh process. What a job leaves behind is found by
:func:`stragglers`; how far a hung rank got, by :func:`stage`.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from netsenseml import methods
from netsenseml.dilation import ENV as DILATION_ENV
from netsenseml.dilation import NONE, Dilation
from testbed.config.scenario import PYTHON_NAMES, Scenario
from testbed.orchestration import stacks, worker_records

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The job runner a fresh own-job interpreter runs its script through (``workloads.job_runner``:
#: the script's ending made safe, its stack on request), a file: nothing of the checkout is
#: imported before the job's path is set.
JOB_RUNNER = REPO_ROOT / "workloads" / "job_runner.py"


def worker_argv(scenario: Scenario, spec: methods.MethodSpec, seed: int, log_dir: Path,
                device: str | None = None, backend: str | None = None,
                dilation: Dilation | float = NONE) -> list[str]:
    """``python -m workloads.train`` command line for this scenario/method/seed.

    ``device``/``backend``: the orchestrator's resolved choice (``testbed.orchestration.gpus``);
    None leaves the worker's own default (auto). ``dilation``: the run's time-dilation
    factor (the worker's times, its time limit included, stay virtual).
    """
    wl = scenario.workload
    argv = [
        sys.executable, "-m", "workloads.train", "--model", wl.model, "--dataset", wl.dataset,
        "--method", str(spec), "--batch-size", str(wl.batch_size), "--seed", str(seed),
        "--log-dir", str(log_dir), "--threads", str(wl.threads),
    ]
    if device is not None:
        argv += ["--device", device]
    if backend is not None:
        argv += ["--backend", backend]
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
    if wl.grads != "real":
        argv += ["--grads", wl.grads]
    if scenario.accelerator is not None:
        argv += scenario.accelerator.worker_args()
    dilation = Dilation.of(dilation)
    if dilation.dilated:
        argv += ["--dilation", dilation.arg()]
    if scenario.convergence is not None and spec.reads_prior:
        argv += ["--convergence", scenario.convergence]
    for key, value in wl.args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def job_argv(scenario: Scenario) -> list[str]:
    """An own job's command line: ``python``/``python3`` (or a ``.py`` program) run with the
    testbed's interpreter, the paths already absolute (``testbed.config.scenario``)."""
    cmd = list(scenario.workload.command or [])
    if cmd[0] in PYTHON_NAMES:
        return [sys.executable, *cmd[1:]]
    if cmd[0].endswith(".py"):
        return [sys.executable, *cmd]
    return cmd


def forkable(argv: list[str]) -> bool:
    """An own job's command (``job_argv``) that the zygote can run: the testbed's ``python``
    with a script, ``-m module`` or ``-c code`` (no interpreter options of its own)."""
    return len(argv) >= 2 and argv[0] == sys.executable and (
        argv[1] in ("-m", "-c") and len(argv) >= 3 or not argv[1].startswith("-"))


def job_env(scenario: Scenario, spec: methods.MethodSpec, seed: int, records: Path, rank: int,
            run_id: str, dilation: Dilation | float) -> dict[str, str]:
    """What torchrun gives a rank (one process per emulated host: LOCAL_RANK 0 and
    LOCAL_WORLD_SIZE 1, each host a node) and what the hook reads (``netsenseml.job``).
    The env:// variables and the interface ones are the launch's (``WorkerGroup.launch``).
    The job's folder (``workload.cwd``, default the scenario file's) is ``NETSENSE_JOB_DIR``
    and first on ``PYTHONPATH``; its working directory is its host's own
    (``RunFolder.host_dir``)."""
    wl = scenario.workload
    world = scenario.world_size
    env = {**wl.env,
           "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank), "GROUP_WORLD_SIZE": str(world),
           "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default",
           "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0",
           "TORCHELASTIC_MAX_RESTARTS": "0", "OMP_NUM_THREADS": str(wl.threads),
           "MKL_NUM_THREADS": str(wl.threads),
           "NETSENSE_METHOD": str(spec), "NETSENSE_RECORDS": str(records),
           "NETSENSE_SEED": str(seed), DILATION_ENV: Dilation.of(dilation).env(),
           # the job's folder: its modules import as they did from there (`-m module`
           # included) though each host runs in a working directory of its own
           "NETSENSE_JOB_DIR": str(wl.cwd or ""),
           # the job imports netsenseml from this checkout even where it is not installed
           "PYTHONPATH": os.pathsep.join(p for p in (wl.cwd, wl.env.get("PYTHONPATH",
                                                                  os.environ.get("PYTHONPATH")),
                                                     str(REPO_ROOT)) if p)}
    if wl.target_accuracy is not None:
        env["NETSENSE_TARGET_ACCURACY"] = f"{wl.target_accuracy:g}"
    if wl.samples_per_step is not None:  # samples/s of a job that reports none
        env["NETSENSE_SAMPLES"] = str(wl.samples_per_step)
    acc = scenario.accelerator
    if acc is not None and acc.step_ms is not None:
        env["NETSENSE_STEP_MS"] = f"{acc.step_ms:g}"
    return env


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(process group, session, command line) of a live process, None if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
        fields = data[data.rindex(")") + 2:].split()
        if fields[0] == "Z":
            return None
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
        return int(fields[2]), int(fields[3]), cmd or data[data.index("(") + 1:data.rindex(")")]
    except (OSError, ValueError, IndexError):
        return None


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def stragglers(leaders: list[int], hosts: list[int], exclude: set[int]
               ) -> list[tuple[int, int, str]]:
    """Processes an own job left: ``(rank, pid, command)`` of every live process in a
    rank's process group or session (``leaders[rank]``, whose own exit is the rank's) or,
    when it escaped them (``setsid``), in a rank's emulated host (``hosts[rank]``: the
    host shell's PID, whose namespace is the host's), ``exclude`` (the testbed's own
    processes: iperf3, host shells) left out."""
    nets = {_netns(h): r for r, h in enumerate(hosts)}
    nets.pop(None, None)
    by_leader = {pid: r for r, pid in enumerate(leaders)}
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in exclude or pid == os.getpid():
            continue
        st = _proc_stat(pid)
        if st is None:
            continue
        pgrp, session, cmd = st
        rank = by_leader.get(pgrp, by_leader.get(session))
        if rank is None and pid not in by_leader:
            rank = nets.get(_netns(pid))
        if rank is not None and pid not in by_leader:
            out.append((rank, pid, cmd[:200]))
    return sorted(out)


def _tcp_sockets(host_pid: int) -> list[tuple[str, int, str, int, str]]:
    """(local ip, local port, remote ip, remote port, state hex) of the IPv4 TCP sockets in
    a host's namespace (``/proc/<pid>/net/tcp``)."""
    def addr(text: str) -> tuple[str, int]:
        ip, port = text.split(":")
        return socket.inet_ntoa(int(ip, 16).to_bytes(4, "little")), int(port, 16)

    out = []
    try:
        lines = Path(f"/proc/{host_pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        try:
            (lip, lport), (rip, rport) = addr(f[1]), addr(f[2])
        except (ValueError, IndexError):
            continue
        out.append((lip, lport, rip, rport, f[3]))
    return out


def stage(host_pid: int, ip: str, master: tuple[str, int], peers: list[str]) -> str:
    """How far a rank that has not registered the hook got, from its host's sockets:
    gloo/NCCL connections to a peer worker (past ``init_process_group``), a connection to
    the rendezvous store at MASTER_ADDR:MASTER_PORT (inside it), or neither (before it)."""
    established = [s for s in _tcp_sockets(host_pid) if s[4] == "01"]
    store = [s for s in established if master[1] in (s[1], s[3])]
    peer = [s for s in established if s[2] in peers and master[1] not in (s[1], s[3])]
    if peer:
        return ("past init_process_group (connected to its peers), but hooks.register(model) "
                "not reached")
    if store:
        return "inside init_process_group (at the rendezvous, waiting for the other ranks)"
    return (f"before init_process_group (no connection to the rendezvous at "
            f"{master[0]}:{master[1]})")


def transport_env(intf: str, rank: int, run_prefix: str,
                  gpus: list[str] | None = None) -> dict[str, str]:
    """Environment that keeps rank ``rank``'s collectives on its emulated interface ``intf``.

    gloo: ``GLOO_SOCKET_IFNAME`` (without it gloo binds to the hostname's address). NCCL
    (set too when the rank uses a GPU; harmless to gloo): NCCL treats every process with
    the same boot id as one node and then talks over shared memory or GPU peer-to-peer,
    never touching the shaped links. A per-host ``NCCL_HOSTID`` makes each emulated host a
    node of its own; ``NCCL_P2P_DISABLE``/``NCCL_SHM_DISABLE`` forbid the intra-node paths
    anyway, ``NCCL_IB_DISABLE`` plus ``NCCL_NET=Socket`` pick the socket transport (no
    RDMA device may take the traffic past the veth), ``NCCL_SOCKET_IFNAME`` binds it to the
    host's interface (``=`` prefix: exactly this name, not every name starting with it).
    Each emulated host sees only its own GPU (``CUDA_VISIBLE_DEVICES``, so ``LOCAL_RANK``
    is 0 in every host, as on a real one-GPU machine). Unverified on a GPU so far: run
    ``benchmarks/gpu_smoke.sh``, whose byte-conservation figures say whether it holds.
    """
    env = {"GLOO_SOCKET_IFNAME": intf, "LOCAL_RANK": "0",
           "NCCL_SOCKET_IFNAME": "=" + intf, "NCCL_HOSTID": f"{run_prefix}-host{rank}",
           "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
           "NCCL_NET": "Socket"}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
    return env


#: Log lines that never explain a failure: c10d's notes on an unresolvable hostname
#: (every emulated host), Python warnings and their source lines.
NOISE = ("hostname cannot be retrieved", "Warning:", "warnings.warn(", "[W socket",
         "[W ProcessGroup", "[W Utils", "FutureWarning", "UserWarning", "DeprecationWarning")


def _noise(line: str) -> bool:
    return any(n in line for n in NOISE) or line.startswith("  warnings.warn")


def tail(path: Path, n: int = 3) -> str:
    """The last ``n`` informative lines of a log, joined on one line (for a failure
    reason): noise (``NOISE``) left out, the worker's own ``FAILED`` line first."""
    try:
        text = path.read_text(errors="replace")[-64_000:]
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not _noise(ln)]
    failed = [ln for ln in lines if "FAILED" in ln]
    keep = failed[-1:] + [ln for ln in lines[-n:] if ln not in failed[-1:]]
    return " | ".join(ln[:300] for ln in keep[:n])


_EXCEPTION_RE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Fault)(: .*)?$")


def exception_line(path: Path) -> str | None:
    """The last line of a log that is a Python traceback's verdict (``RuntimeError: ...``):
    an own job's cause, which it writes nowhere else."""
    try:
        text = path.read_text(errors="replace")[-64_000:]
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if _EXCEPTION_RE.match(line.strip()):
            return line.strip()[:400]
    return None


def own_error(jsonl: Path) -> str | None:
    """The reason a worker wrote in its own failed summary record, if it wrote one."""
    summ = worker_records.last_summary(jsonl)
    if summ is None or summ.get("status") != "failed" or not summ.get("error"):
        return None
    return str(summ["error"])


def _is_wait(cause: str) -> bool:
    return any(m in cause for m in ("Timed out", "timed out", "Timeout", "no progress",
                                    "time limit passed"))


class WorkerGroup:
    """The worker processes of one run, one per worker host, rank = host order."""

    def __init__(self, emu: Any, workers_dir: Path, gpus: list[str] | None = None) -> None:
        """``gpus``: the GPU of each rank (a CUDA device id, ``gpu_plan``) or None (CPU)."""
        self.emu = emu
        self.gpus = gpus
        self.prefix = str(getattr(emu, "prefix", "nst"))
        self.workers_dir = workers_dir
        self.procs: list[Any] = []  # Popen, or launcher.ForkedWorker
        self._logs: list[IO[bytes]] = []
        self.exit_anomalies: list[str] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def launch(self, hosts: list[str], argv: list[str], master_port: int,
               zygote: Any = None, on_spawn: Callable[[], None] | None = None,
               extra_env: list[dict[str, str]] | None = None,
               cwd: list[str] | None = None) -> None:
        """Starts rank r on ``hosts[r]``; rank 0's host is the rendezvous master.

        With ``zygote`` (a ready ``launcher.Zygote``) each rank is forked from it into its
        host's namespace; else a fresh interpreter is started there. ``on_spawn`` runs
        after each start (the run records its PIDs there: a rank can be training before
        the last one is started, and a killed orchestrator must leave every PID on record).
        ``extra_env`` and ``cwd`` (per rank): an own job's (``job_env``, its hosts' working
        directories), whose ``argv`` is
        its whole command (``job_argv``); with ``zygote`` it must be :func:`forkable`.
        """
        base_env = dict(os.environ)
        base_env.update(
            WORLD_SIZE=str(len(hosts)), MASTER_ADDR=self.emu.ip(hosts[0]),
            MASTER_PORT=str(master_port), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        base_env.pop("LOCAL_RANK", None)
        envs = [dict(base_env, **(extra_env[r] if extra_env else {}), RANK=str(r),
                     **transport_env(self.transport_intf(h), r, self.prefix, self.gpus),
                     **stacks.env(self.workers_dir, r))
                for r, h in enumerate(hosts)]
        for rank, host in enumerate(hosts):
            log_path = self.workers_dir / f"rank{rank}.log"
            where = cwd[rank] if cwd else str(REPO_ROOT)
            if zygote is not None and extra_env is not None:  # an own job
                proc: Any = zygote.spawn(argv[1:], env=envs[rank], cwd=where,
                                         log=log_path, netns_pid=self.emu.host_pid(host),
                                         job=True)
                self.emu.adopt(proc, host, Path(argv[1]).name, argv=argv)
            elif zygote is not None:
                proc = zygote.spawn(argv[3:], env=envs[rank], cwd=str(REPO_ROOT),
                                    log=log_path, netns_pid=self.emu.host_pid(host))
                self.emu.adopt(proc, host, "workloads.train")
            else:
                log = open(log_path, "wb")  # noqa: SIM115
                self._logs.append(log)
                run_argv = argv
                if extra_env is not None and forkable(argv):  # python ...: through the runner
                    run_argv = [argv[0], str(JOB_RUNNER), *argv[1:]]
                proc = self.emu.popen(host, run_argv, env=envs[rank], stdout=log,
                                      stderr=subprocess.STDOUT, cwd=where)
            self.procs.append(proc)
            if on_spawn is not None:
                on_spawn()

    def transport_intf(self, host: str) -> str:
        """The interface the collectives must use: the host's emulated (shaped) one."""
        return self.emu.intf(host)

    def states(self) -> dict[int, str]:
        """rank -> the scheduler state letter of each live worker (R, S, D, T stopped ...)."""
        out = {}
        for rank, p in enumerate(self.procs):
            if p.poll() is not None:
                continue
            try:
                data = Path(f"/proc/{p.pid}/stat").read_text()
                out[rank] = data[data.rindex(")") + 2:].split()[0]
            except (OSError, ValueError, IndexError):
                continue
        return out

    def ask_stacks(self) -> dict[int, list[stacks.Frame]]:
        """Each live rank's main-thread frames, asked for now (``stacks.dump``)."""
        live = {r: p.pid for r, p in enumerate(self.procs) if p.poll() is None}
        return stacks.dump(live, self.workers_dir)

    def exit_codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def failure(self, codes: list[int | None]) -> str | None:
        """A one-line reason when a worker exited non-zero, else None.

        Several at once: the one killed by a signal is the cause, the others (exit 1 on a
        reset connection) are collateral.
        """
        failed = [(r, c) for r, c in enumerate(codes)
                  if c not in (None, 0) and not self._finished_ok(r, c)]
        if not failed:
            return None
        rank, code = min(failed, key=lambda rc: (rc[1] >= 0, self._collateral(rc[0]), rc[0]))
        others = ", ".join(f"rank {r}: {c}" for r, c in failed if r != rank)
        own = own_error(self.workers_dir / f"rank{rank}.jsonl")
        log = self.workers_dir / f"rank{rank}.log"
        said = tail(log)  # the worker's own FAILED line first; else a traceback's verdict
        cause = own or (said if "FAILED" in said else exception_line(log) or said)
        alive = [r for r, c in enumerate(codes) if c is None]
        stuck = ""
        if alive and _is_wait(cause):
            stuck = (f"rank {', '.join(map(str, alive))} stopped answering (still running "
                     f"after rank {rank} gave up waiting); ")
        also = f"; also {others}" if others else ""
        if own:  # the worker's own words are the cause; the exit code follows
            return f"{stuck}rank {rank}: {own} (exit code {code}{also})"
        return f"{stuck}worker rank {rank} exited with code {code}{also}: {cause}"

    def _collateral(self, rank: int) -> bool:
        """A rank whose own error is a peer's disappearance, not a cause of its own."""
        log = self.workers_dir / f"rank{rank}.log"  # an own job says it in its log only
        err = own_error(self.workers_dir / f"rank{rank}.jsonl") or exception_line(log) or ""
        return any(m in err for m in ("Connection reset", "Connection closed", "peer",
                                      "Broken pipe"))

    def _finished_ok(self, rank: int, code: int) -> bool:
        """A rank that exited non-zero *after* writing an ``ok`` summary finished its run.

        Its records are complete and agree with its peers' (they passed the same final
        collectives), so the run is judged on them; the exit code is kept
        (``exit_anomalies``, and summary.json's ``worker_exit_codes``) because it still
        says something broke.
        """
        summ = worker_records.last_summary(self.workers_dir / f"rank{rank}.jsonl")
        if summ is None or summ.get("status") != "ok":
            return False
        note = f"rank {rank} exited with code {code} after its ok summary"
        if not any(a.startswith(note) for a in self.exit_anomalies):
            last = tail(self.workers_dir / f"rank{rank}.log", 1)
            self.exit_anomalies.append(note + (f": {last}" if last else ""))
        return True

    def kill(self) -> None:
        """Kills every worker still running (through the emulation, else by its PID)."""
        for p in self.procs:
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

    def close_logs(self) -> None:
        for fh in self._logs:
            fh.close()
