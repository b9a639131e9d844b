"""Real hosts instead of an emulated network: the per-host commands of one run.

A scenario with ``topology.kind: hosts`` lists real machines (address, NIC, ssh user). The
same workload and methods run there with ``torchrun`` (one node per host, ``procs_per_host``
processes each), and each host's NIC is shaped with the same HTB tree as the emulated links
(``topologies.shaping``: HTB class at ``rate_mbit``, pfifo of ``queue_pkts``, netem below it
only when delay/jitter/loss are asked for, which needs sch_netem in *that* host's kernel).
Only egress is shaped: every packet between two hosts leaves one shaped NIC, so each
direction sees the rate and queue once, as on an emulated access link.

This module only *generates* commands (argv lists), so they can be shown (``--dry-run``),
tested and recorded in config.json; ``testbed.orchestration.real_hosts`` runs them. Every
remote command that starts something long-lived (torchrun, iperf3) first writes its shell's
PID to a file under ``<workdir>/<run_id>``: sshd makes that shell a session leader and it
``exec``s the program, so ``kill -TERM -PID`` on that host stops the program and every child it
forked, whatever happened to the ssh connection (a closed channel alone does not signal a
remote process without a terminal). A host whose
address is local (localhost, 127.0.0.1, ::1) and that names no ssh user runs its commands
here without ssh. Commands that need root (tc) get ``sudo -n`` when the remote user is not
root (or, locally, when this process is not). No Mininet import here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from topologies import shaping, spec
from topologies.base import NamedTopo
from topologies.spec import BaseModel, ConfigDict, Field

try:
    from pydantic import model_validator
except ImportError:  # pragma: no cover - `mn --custom` under a Python without pydantic
    def model_validator(**_: Any) -> Any:  # noqa: D103
        return lambda f: f

LOCAL_ADDRESSES = ("localhost", "127.0.0.1", "::1")
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")


class RealHost(BaseModel):
    """One real machine of a ``hosts`` topology (docs/real-hosts.md)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    address: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    """Hostname or IP address ssh reaches the machine at."""
    interface: str = Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.@-]+$")
    """The NIC training traffic uses (shaped unless shape is false)."""
    ssh_user: str | None = Field(None, pattern=r"^[a-z_][a-z0-9_-]*$")
    """ssh user; none: ssh's default."""
    ssh_port: int = Field(22, gt=0, lt=65536)
    """ssh port. Default 22."""
    socket_ifname: str | None = Field(None, pattern=r"^[A-Za-z0-9_.@-]+$")  # default: interface
    """GLOO/NCCL socket interface; none: interface."""
    shape: bool = True  # False: leave this NIC alone (e.g. a shared head node)
    """Shape this NIC with the HTB tree (false: leave it alone, e.g. a shared head node). Default true."""
    iperf3: str = "iperf3"
    """iperf3 binary on this machine, for the timeline's cross traffic. Default iperf3."""


class HostsParams(spec.ShapedParams):
    """Real machines, one torchrun node each; their NICs shaped with the same HTB tree."""

    machines: list[RealHost] = Field(min_length=1, max_length=1024)
    """The real machines, rank order: each runs procs_per_host workers."""
    procs_per_host: int = Field(1, gt=0, le=64)
    """Workers per machine (torchrun --nproc-per-node). Default 1."""
    rate_mbit: float = Field(gt=0, le=100000)
    """Rate every shaped NIC is limited to, Mbit/s."""
    master_port: int = Field(29500, gt=1023, lt=65536)
    """Rendezvous TCP port on the first machine. Default 29500."""
    python: str = "python3"  # the interpreter (with netsense installed) on every host
    """Interpreter with netsense installed on every machine. Default python3."""
    workdir: str = Field("/tmp/netsense-hosts", pattern=r"^/[A-Za-z0-9_./-]*$")  # worker logs
    """Folder on each machine for worker logs. Default /tmp/netsense-hosts."""
    ssh_config: str | None = Field(None, pattern=r"^/[A-Za-z0-9_./-]*$")
    """ssh/scp config file (-F) for reaching the machines; none: ssh's own. Default none."""
    env: dict[str, str] = Field(default_factory=dict)
    """More environment for the workers on every machine (beside the socket interfaces)."""

    @model_validator(mode="after")
    def _rendezvous_reachable(self) -> HostsParams:
        if len(self.machines) > 1 and self.machines[0].address in LOCAL_ADDRESSES:
            raise ValueError("machines.0.address: the rendezvous (first) host must be reachable "
                             "from every host; localhost only works with one host")
        return self

    def worker_hosts(self) -> list[str]:
        """One name per rank (h<i>, or h<i>-<j> with several processes per host)."""
        if self.procs_per_host == 1:
            return [f"h{i}" for i in range(len(self.machines))]
        return [f"h{i}-{j}" for i in range(len(self.machines)) for j in range(self.procs_per_host)]

    def link_rates(self) -> dict[str, float | None]:
        return {f"h{i}": self.rate_mbit for i in range(len(self.machines))}

    def link_names(self) -> list[str]:
        return list(self.link_rates())


class HostsTopo(NamedTopo):
    """Registered so that ``kind: hosts`` validates; real hosts are never built in Mininet
    (``testbed.orchestration.real_hosts`` runs them)."""

    Params = HostsParams

    def build(self, prefix="", **_params):
        raise NotImplementedError("kind hosts runs on real machines (testbed.orchestration"
                                  ".hosts), not in Mininet")


@dataclass(frozen=True)
class HostPlan:
    """What one host runs, in order: shape, train (torchrun), fetch logs, unshape, clean.

    ``ssh`` is the prefix that runs a command there (empty for a local host), ``sudo`` what
    tc needs before it; ``run_dir`` is the run's folder on the host (``log_dir``'s parent,
    also where the PID files are)."""

    name: str
    address: str
    local: bool
    node_rank: int
    env: dict[str, str]
    shape: list[list[str]] = field(default_factory=list)  # argv, already wrapped in ssh
    train: list[str] = field(default_factory=list)
    unshape: list[list[str]] = field(default_factory=list)
    log_dir: str = ""  # on the host
    fetch: list[str] = field(default_factory=list)  # scp argv; empty when local
    interface: str = ""
    ssh: list[str] = field(default_factory=list)
    sudo: list[str] = field(default_factory=list)
    iperf3: str = "iperf3"

    @property
    def run_dir(self) -> str:
        return self.log_dir.rsplit("/", 1)[0]

    def remote(self, argv: list[str]) -> list[str]:
        """``argv`` run on this host (through ssh unless it is local)."""
        return [*self.ssh, shlex.join(argv)] if self.ssh else list(argv)

    def pid_file(self, name: str) -> str:
        """Named after the host too: hosts may share one disk (NFS homes, or the test's
        namespaces), and a PID means something only on its own host."""
        return f"{self.run_dir}/{name}-{self.name}.pid"

    def started(self, name: str, argv: list[str]) -> list[str]:
        """``argv`` started on this host with its PID in ``pid_file(name)``."""
        cmd = (f"mkdir -p {shlex.quote(self.run_dir)} && echo $$ > "
               f"{shlex.quote(self.pid_file(name))} && exec {shlex.join(argv)}")
        return self.remote(["sh", "-c", cmd])

    def stop(self, name: str, sig: str = "TERM") -> list[str]:
        """Stops what ``started(name, ...)`` started, and all its children (no error when
        it has already exited)."""
        f = shlex.quote(self.pid_file(name))
        # the group first, then the process alone (not a group leader); it fails only if
        # both kills failed and the process is still there. No "--": dash's kill (Debian's
        # sh) takes "-SIG -PGID" but refuses "--".
        return self.remote(["sh", "-c", f"test -f {f} || exit 0; p=$(cat {f}); "
                            f"kill -{sig} -$p 2>/dev/null || kill -{sig} $p 2>/dev/null "
                            "|| ! kill -0 $p 2>/dev/null"])

    def set_rate(self, rate_mbit: float) -> list[str]:
        return self.remote([*self.sudo, "tc", *shaping.change_rate_line(
            self.interface, rate_mbit).split()])

    def class_stats(self) -> list[str]:
        """The HTB class's counters: what the shaping let through."""
        return self.remote(["tc", "-s", "class", "show", "dev", self.interface])

    def cleanup(self) -> list[str]:
        """Removes this run's folder on the host (after its logs were fetched)."""
        return self.remote(["rm", "-rf", self.run_dir])

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "local": self.local,
                "node_rank": self.node_rank, "env": self.env,
                "shape": [shlex.join(a) for a in self.shape], "train": shlex.join(self.train),
                "unshape": [shlex.join(a) for a in self.unshape], "log_dir": self.log_dir,
                "fetch": shlex.join(self.fetch) if self.fetch else "",
                "cleanup": shlex.join(self.cleanup())}


def _get(obj: Any, key: str, default: Any = None) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def is_local(host: Any) -> bool:
    return _get(host, "address") in LOCAL_ADDRESSES and not _get(host, "ssh_user")


def _ssh_target(host: Any) -> str:
    user = _get(host, "ssh_user")
    return f"{user}@{_get(host, 'address')}" if user else str(_get(host, "address"))


def _ssh_options(ssh_config: str | None) -> list[str]:
    return [*(["-F", ssh_config] if ssh_config else []), *SSH_OPTIONS]


def _ssh_prefix(host: Any, ssh_config: str | None = None) -> list[str]:
    if is_local(host):
        return []
    return ["ssh", *_ssh_options(ssh_config), "-p", str(_get(host, "ssh_port", 22)),
            _ssh_target(host)]


def _remote(host: Any, argv: list[str], env: dict[str, str] | None = None,
            ssh_config: str | None = None) -> list[str]:
    """argv as run from the driver: itself for a local host, else one ssh command."""
    if is_local(host):
        return list(argv)
    assign = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    remote_cmd = " ".join([*(["env", *assign] if assign else []), shlex.join(argv)])
    return [*_ssh_prefix(host, ssh_config), remote_cmd]


def _needs_sudo(host: Any, local_is_root: bool) -> bool:
    if is_local(host):
        return not local_is_root
    return _get(host, "ssh_user") not in (None, "root")


def _none_if_zero(v: Any) -> Any:
    return v if v else None


def plan(topo: Any, worker_args: list[str], run_id: str, *,
         local_is_root: bool = True) -> list[HostPlan]:
    """The commands of every host for one run.

    ``worker_args`` are ``workloads.train``'s arguments without ``--log-dir`` (each host
    gets ``<workdir>/<run_id>/workers``). Rank order: host order, then local rank.
    """
    hosts = list(_get(topo, "machines"))
    master = _get(hosts[0], "address")
    if master in LOCAL_ADDRESSES and len(hosts) > 1:
        raise ValueError("topology.hosts[0].address: the rendezvous address must be reachable "
                         "from every host; localhost only works with one host")
    python = _get(topo, "python", "python3")
    workdir = str(_get(topo, "workdir", "/tmp/netsense-hosts")).rstrip("/")
    procs = int(_get(topo, "procs_per_host", 1))
    ssh_config = _get(topo, "ssh_config")
    extra_env = dict(_get(topo, "env", None) or {})
    out = []
    for i, h in enumerate(hosts):
        iface = _get(h, "interface")
        env = {"GLOO_SOCKET_IFNAME": _get(h, "socket_ifname") or iface,
               "NCCL_SOCKET_IFNAME": _get(h, "socket_ifname") or iface,
               "OMP_NUM_THREADS": "1", **extra_env}
        log_dir = f"{workdir}/{run_id}/workers"
        sudo = ["sudo", "-n"] if _needs_sudo(h, local_is_root) else []
        shape, unshape = [], []
        if _get(h, "shape", True):
            lines = shaping.shape_lines(
                iface, float(_get(topo, "rate_mbit")), int(_get(topo, "queue_pkts", 100)),
                _none_if_zero(_get(topo, "delay_ms")), _none_if_zero(_get(topo, "jitter_ms")),
                _none_if_zero(_get(topo, "loss_pct")))
            shape = [_remote(h, [*sudo, "tc", *ln.split()], ssh_config=ssh_config)
                     for ln in lines]
            unshape = [_remote(h, [*sudo, "tc", "qdisc", "del", "dev", iface, "root"],
                               ssh_config=ssh_config)]
        torchrun = [python, "-m", "torch.distributed.run", f"--nnodes={len(hosts)}",
                    f"--nproc-per-node={procs}", f"--node-rank={i}",
                    f"--master-addr={master}", f"--master-port={_get(topo, 'master_port')}",
                    "-m", "workloads.train", *worker_args, "--log-dir", log_dir]
        run_dir = f"{workdir}/{run_id}"
        cmd = (f"mkdir -p {shlex.quote(log_dir)} && echo $$ > "
               f"{shlex.quote(run_dir)}/train-h{i}.pid && exec {shlex.join(torchrun)}")
        train = ["sh", "-c", cmd] if not is_local(h) else torchrun
        fetch = [] if is_local(h) else [
            "scp", *_ssh_options(ssh_config), "-P", str(_get(h, "ssh_port", 22)), "-q",
            f"{_ssh_target(h)}:{log_dir}/rank*", "."]
        out.append(HostPlan(
            name=f"h{i}", address=str(_get(h, "address")), local=is_local(h), node_rank=i,
            env=env, shape=shape, train=_remote(h, train, env, ssh_config), unshape=unshape,
            log_dir=log_dir, fetch=fetch, interface=iface, ssh=_ssh_prefix(h, ssh_config),
            sudo=sudo, iperf3=str(_get(h, "iperf3", "iperf3"))))
    return out
