"""`netsense doctor`: which mode `netsense run` will use here, whether it can work, and if
not, what to do about it.

The mode comes first (testbed.emulation.rootless.choose_mode): native as root with
CAP_NET_ADMIN, rootless (a user + network + mount namespace of the run's own) otherwise, or
none.  The kernel checks then probe for real *in that mode's context* -- for rootless, in a
throwaway namespace made the same way a run makes it -- with a throwaway veth/bridge named
with a fresh testbed prefix, removed right away, rather than reading version numbers:
what matters is whether the kernel accepts the operation, e.g. sch_netem is missing on some
kernels that have everything else.  A failure's advice follows its cause: "Operation not
permitted" is a permission problem (root, or user namespaces), an unknown qdisc or device
type is a missing kernel module.  Exit status: 1 when a check the chosen mode needs fails;
optional features (netem, TBF) only say what will be refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from netsenseml import accelerator
from netsenseml.dilation import Dilation
from testbed.emulation import kernel, rootless
from topologies import spec

OPTIONAL = ("TBF", "netem", "TCP", "faithful", "accelerator")  # the testbed shapes with HTB; netem only for delay/jitter/loss


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str

    @property
    def required(self) -> bool:
        return self.name not in OPTIONAL


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def check_mode(mode: rootless.Mode) -> Check:
    return Check("mode", mode.name != "none", f"{mode.name}: {mode.detail}", mode.fix)


def check_netns(mode: rootless.Mode) -> Check:
    """Native: can this process make network namespaces?  Rootless: the mode probe made one."""
    if mode.name == "rootless":
        return Check("netns", True, "network namespaces inside the user namespace", "")
    if mode.name == "none":
        return Check("netns", False, "no mode to make them in", "see mode")
    res = _run(["unshare", "--net", "true"])
    if res.returncode == 0:
        return Check("netns", True, "network namespaces can be created", "")
    err = res.stderr.strip() or "unshare --net failed"
    return Check("netns", False, err, _fix(err, "CONFIG_NET_NS (a kernel with network "
                                                "namespaces)"))


def _fix(err: str, module: str) -> str:
    """Advice that fits the cause: a permission problem is not a missing kernel module."""
    low = err.lower()
    if "not permitted" in low or "permission denied" in low:
        return ("a permission problem, not the kernel: run as root, or as a user where user "
                "namespaces are allowed (rootless mode)")
    return f"the kernel lacks {module}: as root, modprobe it (or use a kernel that has it)"


def _qdisc_check(name: str, kind: str, args: str, module: str, effect: str = "") -> Check:
    ok, detail = kernel.qdisc_supported(kind, args)
    fix = "" if ok else _fix(detail, module) + (f"; {effect}" if effect else "")
    return Check(name, ok, detail, fix)


def check_bridge() -> Check:
    if not shutil.which("brctl"):
        return Check("bridge", False, "brctl not found (Mininet's LinuxBridge needs it)",
                     "apt-get install bridge-utils")
    with kernel.ProbePrefix() as probe:  # registered: clean removes it if we are killed
        res = _run(["ip", "link", "add", probe.prefix + "b", "type", "bridge"])
    if res.returncode != 0:
        err = res.stderr.strip() or "cannot create a Linux bridge"
        return Check("bridge", False, err, _fix(err, "the bridge module"))
    return Check("bridge", True, "brctl found, Linux bridge can be created", "")


def check_tool(name: str, package: str) -> Check:
    path = shutil.which(name)
    if path:
        return Check(name, True, path, "")
    return Check(name, False, f"{name} not on PATH", f"apt-get install {package}")


def check_mininet() -> Check:
    spec = importlib.util.find_spec("mininet")
    if spec is None:
        return Check("mininet", False, "python package mininet not importable",
                     "pip install mininet==2.3.0.dev6 (make setup)")
    try:
        from mininet.net import VERSION
    except Exception as exc:  # import errors are the detail worth showing
        return Check("mininet", False, f"import failed: {exc}", "reinstall mininet")
    return Check("mininet", True, f"mininet {VERSION} at {Path(spec.origin).parent}", "")


def kernel_checks() -> list[Check]:
    """The probes that need the mode's privileges (run inside the namespace when rootless)."""
    return [
        _qdisc_check("HTB", "htb", "default 1", "sch_htb"),
        _qdisc_check("TBF", "tbf", "rate 10mbit burst 32kbit latency 50ms", "sch_tbf",
                     "the testbed does not use it"),
        _qdisc_check("netem", "netem", "delay 1ms", "sch_netem",
                     "without it delay/jitter/loss scenarios are refused"),
        check_bridge(),
    ]


def _kernel_checks_in_namespace() -> list[Check]:
    """kernel_checks() in a fresh user + network namespace, as a rootless run makes it."""
    env = dict(os.environ, **{rootless.MARKER_ENV: "1"})
    res = subprocess.run([*rootless.UNSHARE, "--", sys.executable, "-m", "testbed.cli.doctor"],
                         capture_output=True, text=True, env=env, check=False)
    try:
        return [Check(**c) for c in json.loads(res.stdout)]
    except (ValueError, TypeError):
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return [Check(n, False, f"probe in the user namespace failed: {err}", "")
                for n in ("HTB", "TBF", "netem", "bridge")]


def check_tcp() -> Check:
    """Which TCP the emulated hosts will run: the testbed's default where this kernel can
    give it (allowed, or built in and allowed by the emulation as root), else the
    machine's own, which then decides the runs' congestion behaviour."""
    want = spec.DEFAULT_CONGESTION_CONTROL
    why = kernel.congestion_control_error(want)
    if why is None:
        return Check("TCP", True, f"emulated hosts run {want} (topology.congestion_control to "
                                  f"change; this machine's default: "
                                  f"{kernel.default_congestion_control()})", "")
    return Check("TCP", False, f"{why}: the emulated hosts keep this machine's "
                               f"{kernel.default_congestion_control()}",
                 f"as root: sysctl -w net.ipv4.tcp_allowed_congestion_control="
                 f"'{' '.join([*kernel.congestion_controls(), want])}'")


def checks() -> list[Check]:
    """All doctor checks, in a stable order (mode, netns, HTB, TBF, netem, bridge, tools)."""
    mode = rootless.choose_mode()
    out = [check_mode(mode), check_netns(mode)]
    if mode.name == "native" or rootless.in_namespace():
        out += kernel_checks()
    elif mode.name == "rootless":
        out += _kernel_checks_in_namespace()
    else:
        out += [Check(n, False, "not probed: no mode can emulate here", "see mode")
                for n in ("HTB", "TBF", "netem", "bridge")]
    out += [check_tool("mnexec", "mininet"), check_tool("iperf3", "iperf3"),
            check_tool("tc", "iproute2"), check_mininet(), check_tcp()]
    return out


def check_faithful(measure: bool = False, mode_ok: bool = True) -> Check:
    """The stated faithful range (testbed.config.faithful); with ``measure``, goodput
    across a shaped link at the reference rate and at the limit while two workers compute,
    the limit holding when it is within 5 % of the reference (native mode only: it builds an
    emulation, so run it under the heavy-work lock on a shared machine)."""
    from testbed.config import faithful
    from testbed.emulation import loaded_goodput

    limit = faithful.faithful_mbit()
    stated = (f"runs up to {limit:g} Mbit/s are faithful "
              + ("(NETSENSE_FAITHFUL_MBIT)" if os.environ.get(faithful.ENV) else
                 "(measured on the 2-core build machine)"))
    if not measure:
        return Check("faithful", True, stated + "; `netsense doctor --range` measures it here",
                     "")
    if not mode_ok or rootless.choose_mode().name != "native":
        return Check("faithful", False, stated + "; not measured: needs native mode (root)",
                     "run `netsense doctor --range` as root")
    try:
        ok, detail = loaded_goodput.check(loaded_goodput.measure((faithful.REFERENCE_MBIT, limit)))
    except Exception as exc:  # the measurement's failure is the detail worth showing
        return Check("faithful", False, f"{stated}; measurement failed: {exc}", "")
    return Check("faithful", ok, f"{stated}; {detail}",
                 "" if ok else f"set {faithful.ENV} to a rate that holds here "
                               "(benchmarks/faithful_range.py --steps finds it)")


@dataclass(frozen=True)
class AcceleratorFit:
    """What this host keeps faithful for one profile entry (``doctor --profile``)."""

    k: float  # the factor `dilation: auto` would pick
    k_host: float
    k_network: float
    need: float  # margin x the real parts' largest ratio to their slots, unrounded
    max_mbit: float  # the largest virtual link rate inside the faithful range at k
    max_workers: int  # the most workers whose real work fits at k
    workers: int
    threads: int
    cores: int
    real: dict


def accelerator_fit(timing: accelerator.Timing, workload: dict, workers: int, codecs: list[str], threads: int,
                    margin: float, rate_mbit: float | None = None) -> AcceleratorFit:
    """``workers`` host timings at once, as `dilation: auto` runs them before a run
    (``testbed.orchestration.dilation``), and what follows from them. ``workload``: model,
    dataset, batch_size, knobs. Raises ``DilationError`` (one line) when they fail."""
    from testbed.config import factor, faithful
    from testbed.orchestration import dilation

    real = dilation.measure_workload(workload["model"], workload["dataset"],
                                     workload["batch_size"], workload["knobs"], codecs,
                                     workers, threads)
    need = factor.host_need(timing, real, margin)
    k_host = factor.least_factor(timing, real, margin)
    k_net = factor.rate_factor(rate_mbit) if rate_mbit else 1.0
    k = max(k_host, k_net)
    cores = os.cpu_count() or 1
    return AcceleratorFit(k, k_host, k_net, need, Dilation(k).virtual_mbit(faithful.faithful_mbit()),
                          factor.workers_within(need, k, workers, threads, cores),
                          workers, threads, cores, real)


def check_accelerator(label: str, fit_or_error: AcceleratorFit | str,
                      rate_mbit: float | None = None) -> tuple[Check, str]:
    """The table's row and the full sentence for a profile entry on this host."""
    if isinstance(fit_or_error, str):
        return (Check("accelerator", False, fit_or_error,
                      "see the error; `python -m workloads.host_timing` times one copy"),
                f"accelerator: {label}: {fit_or_error}")
    f = fit_or_error
    net = (f"network {f.k_network:g} for {rate_mbit:g} Mbit/s" if rate_mbit
           else "no rate given: --rate-mbit")
    short = (f"k = {f.k:g} for {f.workers} workers; links up to {f.max_mbit:g} Mbit/s; "
             f"real work fits up to {f.max_workers} workers")
    full = (f"accelerator: {label}, {f.workers} workers x {f.threads} thread"
            f"{'s' if f.threads != 1 else ''} on {f.cores} cores: `dilation: auto` picks "
            f"k = {f.k:g} (host {f.k_host:g}, {net}); virtual links up to "
            f"{f.max_mbit:g} Mbit/s stay in the faithful range "
            f"({Dilation(f.k).real_mbit(f.max_mbit):g} Mbit/s "
            f"x k); at this k the real work fits up to {f.max_workers} workers (rule: a "
            f"worker's compute x max(1, workers x threads / cores), from {f.workers} "
            f"measured at once); real forward {f.real['forward_s'] * 1e3:.3g} ms, backward "
            f"{f.real['backward_s'] * 1e3:.3g} ms, optimizer "
            f"{f.real['optimizer_s'] * 1e3:.3g} ms")
    return Check("accelerator", True, short, ""), full


def usable(results: list[Check]) -> bool:
    """Can `netsense run` work here: every check the chosen mode needs passed."""
    return all(c.ok for c in results if c.required)


if __name__ == "__main__":  # the rootless probe: kernel_checks() inside the namespace, as JSON
    print(json.dumps([asdict(c) for c in kernel_checks()]))
