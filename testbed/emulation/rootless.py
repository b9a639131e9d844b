"""Rootless mode: emulation without real root, inside a user + network + mount namespace.

Why: researchers on shared machines have no root, and CI runs the testbed in unprivileged
containers (no CAP_NET_ADMIN: `ip link add` is refused).  Where the kernel allows
unprivileged user namespaces, a process may create its own user namespace, be root there,
and own a fresh network namespace in which veth pairs, Linux bridges, HTB and nested
network namespaces (Mininet's hosts) all work.

Tool: plain ``unshare --user --map-root-user --net --mount`` from util-linux (installed
everywhere), not rootlesskit: --map-root-user writes the one-line uid/gid map itself, so no
setuid newuidmap and no /etc/subuid range is needed; what rootlesskit adds on top is a
slirp/port-forwarded path to the outside network, which the testbed must not have anyway
(traffic stays inside the emulated network).

How: ``netsense run|sweep``, started by a process that may not create interfaces (see
``choose_mode``), replaces itself (``os.execvpe``, same PID: Ctrl-C, SIGTERM and exit codes
behave as before) with ``unshare ... -- python -m testbed.cli <same arguments>``.  The new
process is root of its own user namespace with every capability over its new network
namespace, brings up loopback, mounts a sysfs of that namespace where allowed, and builds
the emulation as usual.  (Unprivileged containers refuse any new sysfs mount, which
Mininet's `mnexec -n` needs for each host: there hosts get their namespaces from
`unshare --net` instead, see network._host_class.)  What it writes belongs to the real user: uid 0 inside maps
to them.  NETSENSE_USERNS=1 marks it, so it never re-executes again.

What a killed rootless run leaves: its interfaces exist only in its namespaces and vanish
with their last process, so leftovers are processes.  The run's registry lies in the user's
state dir (``leftovers.default_state_dir``: $XDG_RUNTIME_DIR/netsense or
/tmp/netsense-<uid>); there the same user's ``netsense clean`` finds those processes and
kills them by PID (there is no PID namespace: the PIDs recorded inside are the real ones).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--mount")
MARKER_ENV = "NETSENSE_USERNS"  # "1" in the re-executed process, inside the namespace
FORCE_ENV = "NETSENSE_ROOTLESS"  # "1": rootless even where native emulation would work
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: its owning user namespace (a new fd)


@dataclass(frozen=True)
class Mode:
    """How this process emulates: "native", "rootless", or "none" (it cannot)."""

    name: str
    detail: str
    fix: str = ""


def _run(argv: list[str] | tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def effective_caps() -> int:
    """The CapEff bit mask of this process (0 when /proc is unreadable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def owns_netns() -> bool:
    """Does this process's user namespace own its network namespace?

    Capabilities count only over namespaces one's user namespace owns: root of a user
    namespace made without --net has CAP_NET_ADMIN, yet may not add an interface.
    """
    try:
        fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    except OSError:
        return True  # no /proc: leave the decision to the capabilities
    try:
        ufd = fcntl.ioctl(fd, NS_GET_USERNS)
    except OSError as exc:  # EPERM: owned by an ancestor of ours; ENOTTY: no such ioctl
        return exc.errno != errno.EPERM
    finally:
        os.close(fd)
    try:
        return os.fstat(ufd).st_ino == os.stat("/proc/self/ns/user").st_ino
    finally:
        os.close(ufd)


def native_possible() -> bool:
    """Root with CAP_NET_ADMIN (interfaces, tc) and CAP_SYS_ADMIN (mnexec's setns), over a
    network namespace its user namespace owns.

    Root in an unprivileged container has neither capability, so uid 0 alone does not decide.
    """
    caps = effective_caps()
    return (os.geteuid() == 0 and bool(caps >> CAP_NET_ADMIN & 1)
            and bool(caps >> CAP_SYS_ADMIN & 1) and owns_netns())


def in_namespace() -> bool:
    """Is this the re-executed process, inside its own user namespace?"""
    return os.environ.get(MARKER_ENV) == "1"


def in_container() -> bool:
    return (Path("/run/.containerenv").exists() or Path("/.dockerenv").exists()
            or bool(os.environ.get("container")))


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def userns_problem() -> tuple[str, str] | None:
    """None when `unshare --user --map-root-user --net --mount` works; else (why, fix).

    The fix names the switch that refused it: Debian's unprivileged_userns_clone, a zero
    max_user_namespaces, Ubuntu's AppArmor restriction, a container's seccomp profile.
    """
    if shutil.which("unshare") is None:
        return "unshare not found", "apt-get install util-linux"
    res = _run((*UNSHARE, "true"))
    if res.returncode == 0:
        return None
    lines = res.stderr.strip().splitlines()
    why = f"unprivileged user namespaces refused ({lines[-1] if lines else 'unshare failed'})"
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        return why, "as root: sysctl -w kernel.unprivileged_userns_clone=1, or run as root"
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        return why, "as root: sysctl -w user.max_user_namespaces=10000, or run as root"
    if _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
        return why, ("AppArmor restricts user namespaces: as root, sysctl -w "
                     "kernel.apparmor_restrict_unprivileged_userns=0, or run as root")
    if not Path("/proc/self/ns/user").exists():
        return why, "this kernel has no user namespaces (CONFIG_USER_NS): run as root"
    if in_container():
        return why, ("the container's seccomp profile refuses unshare: run it with podman "
                     "(its default profile allows it) or docker --security-opt "
                     "seccomp=unconfined, or give it CAP_NET_ADMIN and CAP_SYS_ADMIN")
    return why, "run as root (sudo), or allow unprivileged user namespaces"


def choose_mode() -> Mode:
    """The mode `netsense run` will use here, and why (what `netsense doctor` reports)."""
    if in_namespace():
        return Mode("rootless", "inside the run's own user + network + mount namespace")
    forced = os.environ.get(FORCE_ENV) == "1"
    if native_possible() and not forced:
        return Mode("native", "root with CAP_NET_ADMIN and CAP_SYS_ADMIN: emulates in this "
                              "machine's network namespace")
    if forced:
        why_not = f"{FORCE_ENV}=1"
    elif os.geteuid() == 0:
        why_not = ("root without CAP_NET_ADMIN/CAP_SYS_ADMIN over this network namespace "
                   "(as in an unprivileged container)")
    else:
        why_not = f"not root (uid {os.geteuid()})"
    problem = userns_problem()
    if problem is None:
        return Mode("rootless", f"{why_not}: runs re-execute in their own user + network + "
                                f"mount namespace ({' '.join(UNSHARE)})")
    why, fix = problem
    return Mode("none", f"{why_not}, and {why}", fix)


@functools.cache
def sysfs_mountable() -> bool:
    """Can a new network namespace mount its own sysfs here, as Mininet's `mnexec -n` does?

    Not in an unprivileged container: its /sys is read-only with masked paths, and the
    kernel refuses a fresh sysfs that would reveal more than that (mount_too_revealing).
    """
    return _run(["unshare", "--net", "--mount", "mount", "-t", "sysfs", "sysfs",
                 "/sys"]).returncode == 0


def reexec(args: list[str], state_dir: Path) -> NoReturn:
    """Replace this process with `python -m testbed.cli ARGS` inside a new namespace.

    state_dir is computed out here, as the real user, and handed in: inside, uid 0 would
    otherwise pick root's /run/netsense, which the user cannot write.
    """
    env = dict(os.environ)
    env[MARKER_ENV] = "1"
    env["NETSENSE_STATE_DIR"] = str(state_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(UNSHARE[0], [*UNSHARE, "--", sys.executable, "-m", "testbed.cli", *args], env)


def prepare_namespace() -> None:
    """Inside the new namespace: loopback up; a sysfs that shows this namespace, if allowed.

    The sysfs mount (private to our mount namespace) keeps /sys/class/net consistent with
    `ip link` for tools that read it; containers refuse it, and nothing here needs it.
    """
    res = _run(["ip", "link", "set", "lo", "up"])
    if res.returncode != 0:
        raise OSError(f"cannot bring up loopback in the rootless namespace: {res.stderr.strip()}")
    _run(["mount", "-t", "sysfs", "sysfs", "/sys"])
