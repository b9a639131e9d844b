"""`netsense doctor`: can this machine emulate networks, and if not, what to do about it.

Each check probes for real (a throwaway veth/bridge named with a fresh testbed prefix,
removed right away) rather than reading version numbers, because what matters is whether
the kernel and tools accept the operation, e.g. sch_netem is missing on some kernels that
have everything else.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.emulation import kernel


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _userns_available() -> bool:
    if not shutil.which("unshare"):
        return False
    return _run(["unshare", "--user", "--map-root-user", "--net", "true"]).returncode == 0


def check_root() -> Check:
    if os.geteuid() == 0:
        return Check("root", True, "running as root", "")
    if _userns_available():
        return Check("root", True, "not root, but user namespaces are available", "")
    return Check("root", False, "not root and no unprivileged user namespaces",
                 "run as root (sudo) or enable kernel.unprivileged_userns_clone")


def check_netns() -> Check:
    if not shutil.which("unshare"):
        return Check("netns", False, "unshare not found", "apt-get install util-linux")
    argv = ["unshare", "--net", "true"] if os.geteuid() == 0 else \
        ["unshare", "--user", "--map-root-user", "--net", "true"]
    res = _run(argv)
    if res.returncode == 0:
        return Check("netns", True, "network namespaces can be created", "")
    return Check("netns", False, res.stderr.strip() or "unshare --net failed",
                 "enable CONFIG_NET_NS / run as root")


def _qdisc_check(name: str, kind: str, args: str, fix: str) -> Check:
    ok, detail = kernel.probe_qdisc(kind, args)
    return Check(name, ok, detail, "" if ok else fix)


def check_bridge() -> Check:
    if not shutil.which("brctl"):
        return Check("bridge", False, "brctl not found (Mininet's LinuxBridge needs it)",
                     "apt-get install bridge-utils")
    name = kernel.probe_prefix() + "b"
    res = _run(["ip", "link", "add", name, "type", "bridge"])
    if res.returncode != 0:
        return Check("bridge", False, res.stderr.strip() or "cannot create a Linux bridge",
                     "load the bridge module (modprobe bridge)")
    _run(["ip", "link", "del", name])
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


def checks() -> list[Check]:
    """All doctor checks, in a stable order (root, netns, HTB, TBF, netem, tools, bridge)."""
    return [
        check_root(),
        check_netns(),
        _qdisc_check("HTB", "htb", "default 1", "load sch_htb (modprobe sch_htb)"),
        _qdisc_check("TBF", "tbf", "rate 10mbit burst 32kbit latency 50ms",
                     "load sch_tbf (modprobe sch_tbf)"),
        _qdisc_check("netem", "netem", "delay 1ms",
                     "modprobe sch_netem; without it delay/jitter/loss scenarios are refused"),
        check_tool("mnexec", "mininet"),
        check_tool("iperf3", "iperf3"),
        check_bridge(),
        check_mininet(),
    ]
