"""One emulated network: build it, shape it, run processes in it, tear it down completely.

Life cycle (what the orchestrator relies on):

* ``Emulation(topology, params)`` validates the topology kind (a name in
  ``topologies.registry`` or a plug-in ``package.module:Class``) and its build() kwargs and
  builds the Topo object (pure Python: names, links, validation), so ``worker_hosts`` etc.
  are known before anything is created.
* ``start()`` writes the run's registry (``testbed.emulation.leftovers``) *before* creating anything,
  then builds Mininet (Linux bridges, no controller, veth links shaped by our own HTB tree,
  see ``topologies.shaping``), registering every host/switch shell PID as it is created, and
  sets the TCP congestion control in every host's namespace (the ``congestion_control``
  argument, else ``topologies.spec.DEFAULT_CONGESTION_CONTROL``, whatever the machine's
  default is; the testbed's own default falls back to the machine's, said, where this
  kernel cannot give it).  Any failure inside start() tears down what exists and re-raises.
* ``popen()`` starts a process inside a host's network namespace (``mnexec -a <shell pid>``)
  in its own session/process group and registers its PID + start time.
* ``stop()`` (idempotent, safe after a partial start, fine from ``finally`` or a signal
  handler) kills every tracked process group (SIGTERM, short grace, SIGKILL), stops Mininet,
  makes sure every host shell is gone, then lists ``ip -br link`` and deletes whatever still
  carries this run's prefix.  Only when nothing is left is the registry removed, so
  ``netsense clean`` can finish the job after a crash.

Teardown has a deadline at every step. Mininet talks to each node through its shell's
terminal and reads the answer with no timeout; a shell that died (kill -9, the OOM killer,
`netsense clean --force`) never answers, and our process still holds the terminal's other
end, so the read would wait for ever. So: a network with a dead shell is not stopped through
Mininet at all (every shell is killed by PID, the namespaces go with their last process, the
root namespace's ends and bridges are deleted by name); a live one gets ``NET_STOP_S`` for
Mininet's stop, after which its shells are killed and their terminals closed, which makes a
blocked read fail at once. The registry is written in the constructor, before the
topology's ``build()`` runs, and names every interface the run will create before it is
created (``planned_interfaces``), then what was found after the build.

Name resolution: the hosts share the machine's /etc/resolv.conf, but no name server is
reachable from inside the emulated network. Where the server's address falls inside an
emulated subnet (here 10.255.255.53 inside the hosts' 10.0.0.0/8) every lookup ARPs for it on
the emulated link and times out: 6.1 s per ``getnameinfo``, and torch's TCPStore formats
each socket's peer with one (on connect and on accept, server side one after another), which
was most of a 2-worker run's 8 s rendezvous. ``start()`` therefore gives every host an
``unreachable`` route to each IPv4 name server: a lookup fails in microseconds, as it would
on a host without DNS, and no DNS or ARP packet enters the emulated links.

Names: every node is ``<prefix><logical>`` with prefix ``nst`` + 4 base36 chars, so a
worker's interface is ``<prefix>w0-eth0`` (what GLOO_SOCKET_IFNAME needs, see ``intf()``).
Nothing here ever calls ``mn -c`` or kills by name.
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

from testbed.common import names
from testbed.emulation import kernel, leftovers, netns, rootless
from topologies import registry, shaping, spec
from topologies.spec import IMPAIRMENT_FIELDS

log = logging.getLogger(__name__)



class EmulationError(RuntimeError):
    """The emulated network could not be built or used; the message says why."""


def new_prefix(state_dir: Path | None = None) -> str:
    """'nst' + 4 random base36 chars, used by no interface and no registry right now."""
    sdir = Path(state_dir) if state_dir else leftovers.default_state_dir()
    in_use = leftovers.list_interfaces()
    for _ in range(100):
        p = names.random_prefix()
        if not any(n.startswith(p) for n in in_use) and not (sdir / f"{p}.json").exists():
            return p
    raise EmulationError("could not find a free interface prefix")


def topo_class(topology: str):
    """The Topo class a kind names (``topologies.registry``: a name or package.module:Class)."""
    try:
        return registry.topo_class(topology)
    except registry.TopologyKindError as exc:
        raise ValueError(f"topology: {exc} (got {topology!r})") from None


def topo_params(topology: str) -> dict:
    """The build() kwargs a topology accepts, with defaults (prefix excluded): its
    ``Params`` fields where build() takes them as ``**kwargs`` (the built-ins: the one
    declaration, ``topologies.spec``), else build()'s own signature (a plug-in's)."""
    cls = topo_class(topology)
    sig = inspect.signature(cls.build)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return {k: v for k, v in spec.fields_of(cls.Params).items()
                if k not in spec.NAMESPACE_FIELDS}
    return {k: v.default for k, v in sig.parameters.items() if k not in ("self", "prefix")}


def _quiet_mininet() -> None:
    from mininet.log import setLogLevel

    setLogLevel("error")  # also silences LinuxBridge's bridge-nf warnings
    warnings.filterwarnings("ignore", message="The 'warn' method is deprecated",
                            category=DeprecationWarning)


class Emulation:
    """A Mininet network of one topology with per-run prefixed names (see module doc)."""

    def __init__(self, topology: str, params: dict | None = None, prefix: str | None = None,
                 state_dir: Path | None = None, congestion_control: str | None = None,
                 ack_first: bool = False) -> None:
        cls = topo_class(topology)
        params = dict(params or {})
        # Namespace settings, not build() arguments (topologies.spec.NAMESPACE_FIELDS).
        congestion_control = params.pop("congestion_control", None) or congestion_control
        ack_first = bool(params.pop("ack_first", False) or ack_first)
        if congestion_control is not None:  # asked for: refused here if the kernel cannot
            why = kernel.congestion_control_error(congestion_control)
            if why:
                raise ValueError(f"congestion_control: {why}")
        allowed = topo_params(topology)
        for key in params:
            if key not in allowed:
                raise ValueError(f"params.{key}: unknown for topology {topology!r}; allowed: "
                                 f"{', '.join(allowed)}")
        if prefix is not None and not names.is_prefix(prefix):
            raise ValueError(f"prefix: must match nst + 4 chars [0-9a-z], got {prefix!r}")
        self.topology = topology
        self.params = params
        #: TCP congestion control set in every host's namespace by start() (the testbed's
        #: default where none was asked; None once start() fell back to the machine's own);
        #: what the hosts then use: ``congestion_controls``
        self.congestion_control = congestion_control or spec.DEFAULT_CONGESTION_CONTROL
        self._congestion_control_asked = congestion_control is not None
        #: pure ACKs ahead of data in every host's own end of its links (``_set_ack_first``)
        self.ack_first = ack_first
        self.state_dir = Path(state_dir) if state_dir else leftovers.default_state_dir()
        self.prefix = prefix or new_prefix(self.state_dir)
        # The registry exists before the topology's build() runs: a plug-in's build() may
        # create interfaces itself, and whatever carries the prefix must be findable.
        self._registry: leftovers.Registry | None = leftovers.Registry(self.prefix,
                                                                       self.state_dir)
        self._registry.save()
        try:
            self.topo = cls(prefix=self.prefix, **params)
        except BaseException:
            leftovers.remove_prefixed(self.prefix, wait_s=0.5)
            self._registry.remove_file()
            raise
        self._registry.note_interfaces(leftovers.interfaces_with_prefix(self.prefix))
        self.worker_hosts: list[str] = list(self.topo.worker_hosts)
        self.cross_hosts: list[str] = list(self.topo.cross_hosts)
        self._rates = {n: li.rate_mbit for n, li in self.topo.named_links.items()}
        self._net = None
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.RLock()
        self._link_ends: dict[str, list[tuple[str, int | None]]] = {}
        self._port = 5100
        self.started = False
        self.stopped = False
        self.leftovers: list[str] = []
        self.dead_shells: list[str] = []
        self.stop_timed_out = False
        self.timings: dict[str, float] = {}

    # ---- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Build and start the network; on any failure tear down and re-raise."""
        if self.started or self.stopped:
            raise EmulationError("an Emulation can be started once")
        self.started = True
        t0 = time.monotonic()
        assert self._registry is not None
        # Every name this build will create, recorded before it is created: `netsense clean`
        # deletes only interfaces a registry says the run made.
        self._registry.note_interfaces(planned_interfaces(self.topo))
        try:
            if any(self.params.get(k) is not None for k in IMPAIRMENT_FIELDS):
                kernel.require_netem()
            _quiet_mininet()
            from mininet.net import Mininet
            from mininet.nodelib import LinuxBridge

            from topologies.links import ShapedLink

            registry = self._registry

            class TrackedMininet(Mininet):
                """Registers each node's shell PID the moment the shell exists."""

                def addHost(self, name, cls=None, **params):
                    node = Mininet.addHost(self, name, cls=cls, **params)
                    registry.add(node.pid, f"shell:{name}")
                    return node

                def addSwitch(self, name, cls=None, **params):
                    node = Mininet.addSwitch(self, name, cls=cls, **params)
                    registry.add(node.pid, f"shell:{name}")
                    return node

            self._net = TrackedMininet(topo=self.topo, switch=LinuxBridge, controller=None,
                                       host=_host_class(),
                                       link=ShapedLink, build=False)
            self._net.build()
            self._net.start()
            self._registry.note_interfaces(leftovers.interfaces_with_prefix(self.prefix))
            self._index_links()
            self._isolate_resolver()
            self._set_congestion_control()
            self._set_ack_first()
            self._after_build()
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t0

    def _isolate_resolver(self) -> None:
        """An unreachable route to each name server in every host (module doc)."""
        from topologies.links import run_checked  # imports Mininet, as start() already has
        hosts = self._namespaced_hosts()
        used = {h.IP() for h in hosts if h.IP()}
        for server in name_servers():
            if server in used:  # an emulated host's own address: leave its traffic alone
                continue
            for host in hosts:
                rc, out = run_checked(host, f"ip route replace unreachable {server}/32")
                if rc != 0:
                    raise EmulationError(f"route to name server {server} on {host.name} "
                                         f"(exit {rc}): {out}")

    def _namespaced_hosts(self) -> list:
        return [h for h in self._net.hosts if h.inNamespace]  # never the root namespace

    def _set_congestion_control(self) -> None:
        """``net.ipv4.tcp_congestion_control`` in every host's namespace (routers too), before
        any worker or iperf3 starts; the root namespace's is never touched (one the kernel
        has but does not allow a namespace yet is added to the global allowed list). The
        testbed's default falls back to the machine's, with a warning, where this kernel
        cannot give it; one the scenario asked for is an error."""
        cc = self.congestion_control
        try:
            if kernel.allow_congestion_control(cc):
                log.warning("net.ipv4.tcp_allowed_congestion_control: added %s for the "
                            "emulated hosts (this machine's default is unchanged)", cc)
        except OSError as exc:
            log.debug("cannot widen tcp_allowed_congestion_control: %s", exc)
        if cc not in kernel.congestion_controls():
            if self._congestion_control_asked:
                why = kernel.congestion_control_error(cc) or (
                    "not in net.ipv4.tcp_allowed_congestion_control, which this process "
                    "cannot widen")
                raise EmulationError(f"congestion_control {cc}: {why}")
            self._keep_machine_tcp("not available here")
            return
        for i, host in enumerate(self._namespaced_hosts()):
            done = subprocess.run(["mnexec", "-a", str(host.pid), "sysctl", "-qw",
                                   f"net.ipv4.tcp_congestion_control={self.congestion_control}"],
                                  capture_output=True, text=True, timeout=10)
            if done.returncode != 0 and i == 0 and not self._congestion_control_asked:
                # e.g. a rootless namespace that may not write it: nothing set yet
                self._keep_machine_tcp(f"cannot be set: {done.stderr.strip() or done.returncode}")
                return
            if done.returncode != 0:
                raise EmulationError(f"congestion_control {self.congestion_control} on "
                                     f"{host.name}: {done.stderr.strip() or done.returncode}")

    def _keep_machine_tcp(self, why: str) -> None:
        """The testbed's default TCP given up before any host got it: the hosts keep the
        machine's (said; the run records what they used)."""
        log.warning("emulation %s: %s (the testbed's default TCP) %s; the hosts keep this "
                    "machine's %s (recorded in the run)", self.prefix, self.congestion_control,
                    why, kernel.default_congestion_control())
        self.congestion_control = None

    def _set_ack_first(self) -> None:
        """Pure TCP ACKs ahead of data on every host's own end of its shaped links
        (``topologies.shaping.ack_first_lines``), as a real host's flow-fair qdisc serves
        them; the switches' and routers' ends keep one FIFO (a switch port's queue). Links
        with netem keep their tree (the split needs the pfifo leaf)."""
        if not self.ack_first:
            return
        hosts = {self._node(h).pid for h in self.worker_hosts + self.cross_hosts}
        batches = []
        for name, ends in self._link_ends.items():
            info = self.topo.named_links[name]
            if info.rate_mbit is None or any(self.params.get(k) for k in IMPAIRMENT_FIELDS):
                continue
            for dev, pid in ends:
                if pid in hosts:
                    batches.append((shaping.ack_first_lines(dev, info.queue_pkts), pid))
        errors = self._tc_batches(batches)
        if errors:
            raise EmulationError(f"ack_first: {'; '.join(errors)}")

    def congestion_controls(self) -> dict[str, str]:
        """Each namespaced host's TCP congestion control as its kernel reports it, by
        logical name (what a run records: the setting, or the inherited default)."""
        if self._net is None:
            raise EmulationError("emulation is not running")
        out = {}
        for host in self._namespaced_hosts():
            got = subprocess.run(["mnexec", "-a", str(host.pid), "cat", str(kernel.CC_DEFAULT)],
                                 capture_output=True, text=True, timeout=10)
            out[host.name[len(self.prefix):]] = got.stdout.strip() or f"? ({got.stderr.strip()})"
        return out

    def _after_build(self) -> None:
        """Hook run after the network is up (tests use it to inject a late failure)."""

    def stop(self) -> None:
        """Kill tracked processes, stop Mininet, remove every interface with our prefix.

        Every step has a deadline (module doc, "Teardown"): a host shell that died (kill,
        OOM killer, `netsense clean --force`) would otherwise block Mininet's next read of
        it for ever. Such a host's namespace goes with the processes holding it, which are
        killed by their recorded PIDs, not through its shell.
        """
        with self._lock:
            t0 = time.monotonic()
            first = not self.stopped
            self.stopped = True
            self._kill_all()
            net, self._net = self._net, None
            if net is not None:
                nodes = list(net.hosts) + list(net.switches)
                dead = [n.name for n in nodes if _shell_dead(n)]
                if dead:
                    self.dead_shells = sorted(set(self.dead_shells) | set(dead))
                    log.warning("emulation %s: shell of %s died; stopping without Mininet",
                                self.prefix, ", ".join(dead))
                    for node in nodes:  # their peers' shells go too: kill, not ask
                        if not _shell_dead(node) and getattr(node, "shell", None) is not None:
                            _killpg(node.shell.pid, signal.SIGKILL)
                else:
                    self._stop_mininet(net, nodes)
                deadline = time.monotonic() + SHELL_EXIT_S
                for node in nodes:
                    shell = getattr(node, "shell", None)
                    if shell is None:
                        continue
                    try:
                        shell.wait(timeout=max(0.05, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        _killpg(shell.pid, signal.SIGKILL)
                        try:
                            shell.wait(timeout=1)
                        except subprocess.TimeoutExpired:
                            log.warning("shell %d of %s survived SIGKILL", shell.pid, node.name)
                if not self.stop_timed_out:  # our ends of the terminals: no fd left behind
                    _unblock(nodes)
            if self._registry is not None:
                leftovers.kill_entries(self._registry.processes, grace_s=0.5)
            self.leftovers = self._remove_interfaces()
            if self._registry is not None and not self.leftovers:
                self._registry.remove_file()
            elif self.leftovers:
                log.warning("emulation %s: could not remove %s; run `netsense clean`",
                            self.prefix, ", ".join(self.leftovers))
            if first:
                self.timings["stop_s"] = time.monotonic() - t0

    def abandon(self, why: str) -> None:
        """Mark the registry as given up by its owner (teardown past its deadline), so that
        `netsense clean` finishes the job even while this process lives on."""
        reg = self._registry
        if reg is not None and reg.path.exists():
            try:
                reg.abandon(why)
            except OSError as exc:
                log.warning("emulation %s: could not mark the registry: %s", self.prefix, exc)

    def _stop_mininet(self, net, nodes) -> None:
        """``net.stop()`` with a deadline: past it, the shells' terminals are closed (which
        makes a blocked read fail at once) and the shells killed; the rest of ``stop``
        finishes the job."""
        errors: list[BaseException] = []

        def target() -> None:
            try:
                net.stop()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        th = threading.Thread(target=target, name=f"mininet-stop-{self.prefix}", daemon=True)
        th.start()
        th.join(NET_STOP_S)
        if th.is_alive():
            self.stop_timed_out = True
            log.warning("emulation %s: mininet stop did not finish in %.0f s; killing the "
                        "shells", self.prefix, NET_STOP_S)
            for node in nodes:
                shell = getattr(node, "shell", None)
                if shell is not None:
                    _killpg(shell.pid, signal.SIGKILL)
            _unblock(nodes, release=False)
            th.join(1.0)
        elif errors:
            log.warning("mininet stop of %s failed: %s", self.prefix, errors[0])

    def dead_hosts(self) -> list[str]:
        """Logical names of the nodes whose shell has exited while the network runs (the
        emulated host is gone: its namespace lives on only in the processes inside)."""
        net = self._net
        if net is None:
            return []
        out = []
        for node in list(net.hosts) + list(net.switches):
            if _shell_dead(node):
                out.append(node.name[len(self.prefix):])
        return out

    def _remove_interfaces(self) -> list[str]:
        return leftovers.remove_prefixed(self.prefix)[1]

    def __enter__(self) -> Emulation:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- hosts ------------------------------------------------------------------------
    def _node(self, host: str):
        if self._net is None:
            raise EmulationError("emulation is not running")
        try:
            return self._net[self.prefix + host]
        except KeyError:
            raise ValueError(f"host: unknown {host!r}; allowed: "
                             f"{', '.join(self.worker_hosts + self.cross_hosts)}") from None

    def ip(self, host: str) -> str:
        """IPv4 address of a host (e.g. '10.0.0.1')."""
        return self._node(host).IP()

    def intf(self, host: str) -> str:
        """Interface name of a host, e.g. 'nst3f9aw0-eth0' (for GLOO_SOCKET_IFNAME)."""
        return self._node(host).defaultIntf().name

    def host_pid(self, host: str) -> int:
        """PID of the host's shell; its /proc/<pid>/ns/net is the host's namespace."""
        return self._node(host).pid

    def rx_bytes(self, host: str) -> int:
        """Bytes received so far on the host's interface (L2, from its own /proc/net/dev).

        Cheap (no subprocess), so it can be sampled at 10 Hz to measure the delivered rate
        of a link honestly, e.g. for link.csv or to time a rate change.
        """
        node = self._node(host)
        want = node.defaultIntf().name + ":"
        for line in Path(f"/proc/{node.pid}/net/dev").read_text().splitlines():
            line = line.strip()
            if line.startswith(want):
                return int(line[len(want):].split()[0])
        raise EmulationError(f"interface of {host} not found in its namespace")

    # ---- links ------------------------------------------------------------------------
    def _index_links(self) -> None:
        for name, info in self.topo.named_links.items():
            n1, n2 = self._net[info.node1], self._net[info.node2]
            link = self._net.linksBetween(n1, n2)[0]
            self._link_ends[name] = [
                (intf.name, intf.node.pid if intf.node.inNamespace else None)
                for intf in (link.intf1, link.intf2)]

    def link_ends(self, link: str) -> list[tuple[str, int | None, str]]:
        """Both ends of ``link``: (device, namespace PID or None for the orchestrator's own
        namespace, logical node its egress goes toward). A switch's end lives in the
        orchestrator's namespace (LinuxBridge), a host's in the host's."""
        self._check_link(link)
        if self._net is None:
            raise EmulationError("emulation is not running")
        info = self.topo.named_links[link]
        peers = [info.node2, info.node1]  # intf1 belongs to node1, so it sends toward node2
        return [(dev, pid, peer[len(self.prefix):])
                for (dev, pid), peer in zip(self._link_ends[link], peers, strict=True)]

    def links(self) -> list[str]:
        """Logical link names events may target (see the topology's module doc)."""
        return list(self._rates)

    def link_rate(self, link: str) -> float:
        """Currently configured rate in Mbit/s (math.inf for an unshaped link)."""
        self._check_link(link)
        rate = self._rates[link]
        return math.inf if rate is None else rate

    def _check_link(self, link: str) -> None:
        if link not in self._rates:
            raise ValueError(f"link: unknown {link!r}; allowed: {', '.join(self._rates)}")

    def set_rate(self, link: str, rate_mbit: float) -> None:
        """Change a link's rate in place on both ends (`tc class change`), in a few ms.

        Queued packets and flows survive the change.  An unshaped link gets its tree now.
        """
        self._check_link(link)
        if not isinstance(rate_mbit, (int, float)) or not rate_mbit > 0:
            raise ValueError(f"rate_mbit: must be a positive number, got {rate_mbit!r}")
        if self._net is None:
            raise EmulationError("emulation is not running")
        with self._lock:
            if self._rates[link] is None:
                q = self.topo.named_links[link].queue_pkts
                batches = [(shaping.shape_lines(dev, rate_mbit, q), pid)
                           for dev, pid in self._link_ends[link]]
            else:
                batches = [([shaping.change_rate_line(dev, rate_mbit)], pid)
                           for dev, pid in self._link_ends[link]]
            errors = self._tc_batches(batches)
            if errors:
                raise EmulationError(f"set_rate({link}, {rate_mbit}) failed: {'; '.join(errors)}")
            self._rates[link] = float(rate_mbit)

    @classmethod
    def _tc_batches(cls, batches: list[tuple[list[str], int | None]]) -> list[str]:
        """Each ``(tc lines, host pid)`` batch at once; the errors of those that failed."""
        procs = [cls._tc_batch(lines, pid) for lines, pid in batches]
        errors = []
        for p in procs:
            _, err = p.communicate(timeout=10)
            if p.returncode != 0:
                errors.append(err.strip())
        return errors

    @staticmethod
    def _tc_batch(lines: list[str], pid: int | None) -> subprocess.Popen:
        prefix = ["mnexec", "-a", str(pid)] if pid is not None else []
        p = subprocess.Popen(prefix + ["tc", "-batch", "-"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        p.stdin.write("\n".join(lines) + "\n")
        p.stdin.close()
        p.stdin = None
        return p

    def set_rto_min(self, ms: float) -> None:
        """TCP's minimum retransmission timeout on every route of every host (time
        dilation: ``testbed.orchestration.dilation``); EmulationError if a route refuses."""
        for host in self.worker_hosts + self.cross_hosts:
            pid = str(self._node(host).pid)
            shown = subprocess.run(["mnexec", "-a", pid, "ip", "-o", "route", "show"],
                                   capture_output=True, text=True, timeout=10)
            for line in shown.stdout.splitlines():
                route = line.split(" rto_min ")[0].split()
                done = subprocess.run(["mnexec", "-a", pid, "ip", "route", "change", *route,
                                       "rto_min", f"{ms:.0f}ms"],
                                      capture_output=True, text=True, timeout=10)
                if done.returncode != 0:
                    raise EmulationError(f"rto_min on {host} ({' '.join(route)}): "
                                         f"{done.stderr.strip()}")

    # ---- processes --------------------------------------------------------------------
    def popen(self, host: str, argv: list[str], env: dict | None = None, stdout=None,
              stderr=None, cwd=None, stdin=subprocess.DEVNULL) -> subprocess.Popen:
        """Start argv inside host's namespace, in its own session; tracked until killed.

        env is merged over os.environ.  The PID (== process group id) and its start time
        go into the registry, so a crash leaves nothing `netsense clean` cannot find.
        """
        node = self._node(host)
        full_env = dict(os.environ)
        full_env.update(env or {})
        with self._lock:
            if self.stopped:
                raise EmulationError("emulation is stopped")
            proc = subprocess.Popen(["mnexec", "-a", str(node.pid), *argv], env=full_env,
                                    stdout=stdout, stderr=stderr, stdin=stdin, cwd=cwd,
                                    start_new_session=True)
            self._procs.append(proc)
            self._registry.add(proc.pid, f"proc:{host}:{Path(argv[0]).name}", argv=argv)
        return proc

    def adopt(self, proc, host: str | None, label: str, argv: list[str] | None = None) -> None:
        """Track a process that something else started in ``host``'s namespace (None: the
        switches', this process's own).

        For workers forked by ``workloads.zygote``, and the bottleneck's tcpdump: ``proc``
        needs ``pid`` (its own process group), ``poll()`` and ``wait(timeout)``; from here
        on it is killed and registered exactly like a process from ``popen()``. ``argv``: a
        command it may exec into (an own job's fresh interpreter), recorded beside its
        command line for `netsense clean`.
        """
        if host is not None:
            self._node(host)  # a known host of a running emulation
        with self._lock:
            if self.stopped:
                raise EmulationError("emulation is stopped")
            self._procs.append(proc)
            self._registry.add(proc.pid, f"proc:{host}:{label}" if host else f"proc:{label}",
                               argv=argv)

    def kill(self, proc: subprocess.Popen, grace_s: float = 1.0) -> None:
        """Terminate a tracked process's group: SIGTERM, wait grace_s, SIGKILL; reap it."""
        _kill_groups([proc], grace_s)
        with self._lock:
            if proc in self._procs:
                self._procs.remove(proc)

    def _kill_all(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        _kill_groups(procs, 1.0)

    # ---- measurement ------------------------------------------------------------------
    def next_port(self) -> int:
        """A port for a measurement iperf3 (5101..5200, apart from traffic's 5301+)."""
        with self._lock:
            self._port = 5101 + (self._port - 5100) % 100
            return self._port

    def iperf3_server(self, host: str, port: int, interval_s: float | None = None):
        """Start a one-shot iperf3 server with JSON output; returns when it listens."""
        argv = ["iperf3", "-s", "-1", "-J", "-p", str(port)]
        if interval_s:
            argv += ["-i", str(interval_s)]
        server = self.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if not netns.wait_listening(server.pid, port, timeout_s=5.0):
            self.kill(server)
            raise EmulationError(f"iperf3 server on {host}:{port} did not start listening")
        return server

    def iperf3_goodput(self, src: str, dst: str, seconds: float,
                       port: int | None = None) -> float:
        """Receiver-side goodput in Mbit/s of one TCP flow src -> dst lasting `seconds`."""
        port = port or self.next_port()
        server = self.iperf3_server(dst, port)
        client = None
        try:
            client = self.popen(src, ["iperf3", "-c", self.ip(dst), "-p", str(port), "-t",
                                      f"{seconds:g}", "-J"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = client.communicate(timeout=seconds + 20)
            data = json.loads(out or "{}")
            if "error" in data or client.returncode != 0:
                raise EmulationError(f"iperf3 {src}->{dst} failed: "
                                     f"{data.get('error') or err.strip()}")
            return data["end"]["sum_received"]["bits_per_second"] / 1e6
        finally:
            if client is not None:
                self.kill(client)
            self.kill(server)


def name_servers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    """IPv4 name servers of resolv.conf, loopback excluded (a namespace's own lo answers)."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                addr = ipaddress.ip_address(parts[1])
            except ValueError:
                continue
            if addr.version == 4 and not addr.is_loopback and str(addr) not in out:
                out.append(str(addr))
    return out


def _host_class():
    """Mininet's Host, or, where a new network namespace cannot mount its own sysfs, a Host
    whose shell gets its namespace from ``unshare --net`` instead of ``mnexec -n``.

    Why: ``mnexec -n`` mounts a sysfs for the new namespace and gives up when that is
    refused, which an unprivileged container does (its /sys is read-only with masked
    paths, so a fresh sysfs would show more; see rootless.sysfs_mountable), leaving Mininet
    waiting for a shell that never starts.  Nothing of the testbed reads a host's sysfs.
    """
    from mininet.node import Host

    if rootless.sysfs_mountable():
        return Host

    class UnshareNetHost(Host):
        def _popen(self, cmd, **params):
            opts = cmd[1] if cmd[:1] == ["mnexec"] and len(cmd) > 1 else ""
            if opts.startswith("-") and "n" in opts and "a" not in opts:  # the host's shell
                cmd = ["mnexec", opts.replace("n", ""), "unshare", "--net", "--", *cmd[2:]]
            return super()._popen(cmd, **params)

    return UnshareNetHost


#: Deadlines of teardown (seconds): Mininet's own stop, the shells' exit after it.
NET_STOP_S = 4.0
SHELL_EXIT_S = 2.0


def planned_interfaces(topo) -> list[str]:
    """Names the build of ``topo`` will create in this namespace: its switches (Linux
    bridges) and both ends of each link (``<node>-eth<port>``, or the names it gives)."""
    out = list(topo.switches())
    for n1, n2, info in topo.links(withInfo=True):
        for node, port, given in ((n1, info.get("port1"), info.get("intfName1")),
                                  (n2, info.get("port2"), info.get("intfName2"))):
            out.append(given or f"{node}-eth{port}")
    return out


def _shell_dead(node) -> bool:
    shell = getattr(node, "shell", None)
    return shell is not None and shell.poll() is not None


def _unblock(nodes, release: bool = True) -> None:
    """Close our end of each dead (or killed) shell's terminal: a read of a shell whose
    terminal nobody else holds fails at once (EIO) instead of waiting for ever.

    ``release``: also close the reading end and forget the shell, so that Mininet never
    touches the node again (not while Mininet's own stop may still be reading it).
    """
    for node in nodes:
        if not _shell_dead(node):
            continue
        fd = getattr(node, "slave", None)
        if isinstance(fd, int) and fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
            node.slave = -1
        if release:
            try:
                node.stdin.close()
            except (OSError, AttributeError):
                pass
            node.shell = None


def _kill_groups(procs: list[subprocess.Popen], grace_s: float) -> None:
    live = [p for p in procs if p.poll() is None]
    for p in live:
        _killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 5.0
    for p in procs:
        _kill_straggler_group(p)
        try:
            p.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("process %d did not die after SIGKILL", p.pid)


def _kill_straggler_group(p) -> None:
    """SIGKILL ``p``'s process group, for the stragglers of a leader that already exited.

    Never a group whose leader's PID now names another process: once we reaped the leader
    its PID may be reused, and the kernel reuses a PID only when no group still carries it
    as its id, so a live process at that PID means the group is not ours any more.
    """
    if p.poll() is not None and os.path.exists(f"/proc/{p.pid}"):
        return
    _killpg(p.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
