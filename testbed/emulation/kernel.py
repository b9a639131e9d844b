"""Probes of what this kernel can do for emulation (qdiscs, namespaces, bridges).

Why probe instead of assume: the machines we build on lack sch_netem (and fq, red, ...)
while others have them; `modprobe` may or may not be allowed.  Each probe makes a
throwaway veth pair named with a fresh testbed prefix (so `netsense clean` recognises it),
tries the feature on it and deletes it again.  Results are cached per process.
"""

from __future__ import annotations

import functools
import subprocess

from testbed.common import names

NETEM_MISSING_MSG = (
    "delay, jitter and loss need the netem qdisc (sch_netem), which this kernel does not "
    "have; remove delay_ms/jitter_ms/loss_pct from the scenario or run on a kernel with "
    "sch_netem (modprobe sch_netem)"
)



class NetemUnavailable(RuntimeError):
    """Raised when delay/jitter/loss are requested on a kernel without sch_netem."""


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def probe_prefix() -> str:
    """A fresh prefix for a throwaway probe interface (the runs' form, so that clean finds it)."""
    return names.random_prefix()


class ThrowawayVeth:
    """Context manager: a veth pair '<prefix>k0'/'<prefix>k1' in the root namespace."""

    def __init__(self) -> None:
        self.prefix = probe_prefix()
        self.dev = self.prefix + "k0"
        self.peer = self.prefix + "k1"
        self.error = ""

    def __enter__(self) -> ThrowawayVeth:
        res = _run(["ip", "link", "add", self.dev, "type", "veth", "peer", "name", self.peer])
        if res.returncode != 0:
            self.error = res.stderr.strip() or "ip link add failed"
            raise OSError(f"cannot create probe veth {self.dev}: {self.error}")
        return self

    def __exit__(self, *exc) -> None:
        _run(["ip", "link", "del", self.dev])


@functools.cache
def probe_qdisc(kind: str, args: str = "") -> tuple[bool, str]:
    """Can a root qdisc `kind` with `args` be added? Returns (ok, detail)."""
    try:
        with ThrowawayVeth() as veth:
            res = _run(["tc", "qdisc", "add", "dev", veth.dev, "root", kind, *args.split()])
            if res.returncode == 0:
                return True, f"tc qdisc {kind} works"
            return False, (res.stderr.strip() or f"tc qdisc add {kind} failed").splitlines()[0]
    except (OSError, FileNotFoundError) as exc:
        return False, str(exc)


def has_netem() -> bool:
    """True if the kernel accepts a netem qdisc (probed once per process)."""
    return probe_qdisc("netem", "delay 1ms")[0]


def has_htb() -> bool:
    return probe_qdisc("htb", "default 1")[0]


def has_tbf() -> bool:
    return probe_qdisc("tbf", "rate 10mbit burst 32kbit latency 50ms")[0]


def require_netem() -> None:
    """Raise NetemUnavailable with NETEM_MISSING_MSG unless the kernel has netem."""
    if not has_netem():
        raise NetemUnavailable(NETEM_MISSING_MSG)
