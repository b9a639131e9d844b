"""Checks of what this kernel can do for emulation (qdiscs, namespaces, bridges).

Why check instead of assume: the machines we build on lack sch_netem (and fq, red, ...)
while others have them; `modprobe` may or may not be allowed.  Each check makes a
throwaway veth pair named with a fresh testbed prefix (so `netsense clean` recognises it),
tries the feature on it and deletes it again.  Results are cached per process.

Each probe registers its prefix (``leftovers.Registry``, owner = this process) *before* it
creates an interface and drops the registration after deleting it, so a probe killed in
between (a SIGKILLed ``netsense doctor``) leaves interfaces that `netsense clean` sees as a
dead owner's and removes, like a crashed run's.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from testbed.common import names
from testbed.emulation import leftovers

NETEM_MISSING_MSG = (
    "delay, jitter and loss need the netem qdisc (sch_netem), which this kernel does not "
    "have; remove delay_ms/jitter_ms/loss_pct from the scenario or run on a kernel with "
    "sch_netem (modprobe sch_netem)"
)



#: What a network namespace other than the first may set as its TCP congestion control
#: (the kernel refuses the rest there with EPERM), and the machine's default, which a new
#: namespace inherits; both global, read in whatever namespace this process is in.
CC_ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
CC_DEFAULT = Path("/proc/sys/net/ipv4/tcp_congestion_control")
#: What the kernel has (built in or loaded): what ``allow_congestion_control`` may add.
CC_AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def congestion_controls() -> list[str]:
    """The TCP congestion controls an emulated host's namespace may set, read now (at run
    time, not at import: modules may be loaded between runs); [] where unreadable."""
    try:
        return CC_ALLOWED.read_text().split()
    except OSError:
        return []


def available_congestion_controls() -> list[str]:
    """The TCP congestion controls this kernel has, read now; [] where unreadable."""
    try:
        return CC_AVAILABLE.read_text().split()
    except OSError:
        return []


def allow_congestion_control(name: str) -> bool:
    """Adds ``name`` to what a namespace may set, where the kernel has it and it is not
    allowed yet; True when this call added it. The list is global and the change only
    widens it: the machine's default and every existing socket keep their TCP (as
    Mininet's own setup raises global limits). Raises OSError where it cannot be written
    (not root, a read-only /proc/sys)."""
    allowed = congestion_controls()
    if name in allowed or name not in available_congestion_controls():
        return False
    CC_ALLOWED.write_text(" ".join([*allowed, name]) + "\n")
    return True


def default_congestion_control() -> str | None:
    """This machine's TCP congestion control (what a new namespace starts with)."""
    try:
        return CC_DEFAULT.read_text().strip() or None
    except OSError:
        return None


def congestion_control_error(name: str) -> str | None:
    """Why ``name`` cannot be an emulated host's congestion control here, one line
    (naming the allowed ones), or None when it can: allowed already, or one the kernel has
    that a root process adds when it builds the network (``allow_congestion_control``)."""
    allowed = congestion_controls()
    if name in allowed or (name in available_congestion_controls() and os.geteuid() == 0):
        return None
    return (f"{name!r} is not allowed in an emulated host's namespace on this kernel; "
            f"allowed: {', '.join(allowed) or 'none readable'} "
            f"(net.ipv4.tcp_allowed_congestion_control)")


class NetemUnavailable(RuntimeError):
    """Raised when delay/jitter/loss are requested on a kernel without sch_netem."""


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def probe_prefix() -> str:
    """A fresh prefix for a throwaway probe interface (the runs' form, so that clean finds it)."""
    return names.random_prefix()


class ProbePrefix:
    """Context manager: a fresh prefix registered for `netsense clean` while in use.

    On exit every interface with the prefix is deleted, then the registration. When the
    state dir cannot be written the probe still runs, unregistered (doctor must work).
    """

    def __init__(self) -> None:
        self.prefix = probe_prefix()
        self._leftovers = leftovers
        self._registry = leftovers.Registry(self.prefix)

    def __enter__(self) -> ProbePrefix:
        try:
            self._registry.save()
        except OSError:
            pass
        return self

    def note(self, *names: str) -> None:
        """Record interfaces before creating them: `netsense clean` deletes only recorded
        ones, so a probe killed halfway leaves nothing it cannot find."""
        try:
            self._registry.note_interfaces(list(names))
        except OSError:
            pass

    def __exit__(self, *exc: object) -> None:
        self._leftovers.remove_prefixed(self.prefix, wait_s=1.0)
        self._registry.remove_file()


class ThrowawayVeth(ProbePrefix):
    """Context manager: a veth pair '<prefix>k0'/'<prefix>k1' in the root namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.dev = self.prefix + "k0"
        self.peer = self.prefix + "k1"
        self.error = ""

    def __enter__(self) -> ThrowawayVeth:
        super().__enter__()
        self.note(self.dev, self.peer)
        res = _run(["ip", "link", "add", self.dev, "type", "veth", "peer", "name", self.peer])
        if res.returncode != 0:
            self.error = res.stderr.strip() or "ip link add failed"
            super().__exit__()
            raise OSError(f"cannot create probe veth {self.dev}: {self.error}")
        return self


@functools.cache
def qdisc_supported(kind: str, args: str = "") -> tuple[bool, str]:
    """Can a root qdisc `kind` with `args` be added? Returns (ok, detail): tried on a
    throwaway veth, once per process (a check of the kernel, not a measurement)."""
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
    return qdisc_supported("netem", "delay 1ms")[0]


def require_netem() -> None:
    """Raise NetemUnavailable with NETEM_MISSING_MSG unless the kernel has netem."""
    if not has_netem():
        raise NetemUnavailable(NETEM_MISSING_MSG)
