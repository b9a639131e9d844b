"""Machines for the real-hosts tests: network namespaces that each run their own sshd.

``SshHosts`` makes, for one test: a switch namespace with a Linux bridge, ``n`` host
namespaces (``eth0`` on the bridge, one address each, their own ``sshd`` listening on that
address only, with a config file, host key and authorized key made for the test in a
temporary folder -- never the system's sshd service or its keys), and a driver namespace on
the same bridge from which ``netsense`` runs and ssh's into the hosts (so the root
namespace gets no interface at all). An ssh client config (``ssh_config``) names the test's
identity and known-hosts file (strict host-key checking against the keys made here).

Everything it creates is tracked (namespaces by name, sshd processes by PID, the
privilege-separation folder ``/run/sshd`` only if it was missing) and ``close`` removes
exactly those. ``leftovers`` lists what is still there: processes in the host namespaces
besides sshd, shaping on their NICs, the run folders on the hosts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from tests.orchestration.procs import kill_pids, terminate

SSHD = "/usr/sbin/sshd"
PRIVSEP = Path("/run/sshd")
SUBNET = "10.251.7"


#: What these machines need besides root (openssh-server, openssh-client, iproute2); the
#: tests that make them say so with ``pytest.mark.root`` (tests/conftest.py decides the skip).
TOOLS = (SSHD, "ssh", "ssh-keygen", "scp", "ip", "tc")


def _run(*argv: str, ns: str | None = None) -> str:
    cmd = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(res.stderr or res.stdout).strip()}")
    return res.stdout


class SshHosts:
    def __init__(self, n: int, tmp: Path) -> None:
        self.n = n
        self.tmp = tmp
        self.tag = f"nsh{secrets.token_hex(2)}"
        self.switch = f"{self.tag}-sw"
        self.driver = f"{self.tag}-d"
        self.hosts = [f"{self.tag}-h{i}" for i in range(n)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(n)]
        self.namespaces: list[str] = []
        self.sshd: list[subprocess.Popen] = []
        self.made_privsep = False
        self.ssh_config = tmp / "ssh_config"

    # building ---------------------------------------------------------------------
    def start(self) -> SshHosts:
        try:
            self._network()
            self._keys()
            for i in range(self.n):
                self._sshd(i)
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _netns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "link", "set", "lo", "up", ns=name)

    def _network(self) -> None:
        self._netns(self.switch)
        _run("ip", "link", "add", "br0", "type", "bridge", ns=self.switch)
        _run("ip", "link", "set", "br0", "up", ns=self.switch)
        for k, (ns, addr) in enumerate([*zip(self.hosts, self.addresses, strict=True),
                                        (self.driver, f"{SUBNET}.254")]):
            self._netns(ns)
            port = f"p{k}"
            # made in the switch namespace, one end moved: nothing ever in the root one
            _run("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0",
                 "netns", ns, ns=self.switch)
            _run("ip", "link", "set", port, "master", "br0", "up", ns=self.switch)
            _run("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            _run("ip", "link", "set", "eth0", "up", ns=ns)

    def _keys(self) -> None:
        for name in ("host_key", "client_key"):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"netsense-test-{name}",
                 "-f", str(self.tmp / name))
        shutil.copy(self.tmp / "client_key.pub", self.tmp / "authorized_keys")
        host_pub = (self.tmp / "host_key.pub").read_text().split()[:2]
        (self.tmp / "known_hosts").write_text(
            "".join(f"{a} {' '.join(host_pub)}\n" for a in self.addresses))
        self.ssh_config.write_text(
            "Host *\n"
            f"  IdentityFile {self.tmp / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.tmp / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n"
            "  User root\n"
            "  LogLevel ERROR\n")
        if not PRIVSEP.exists():  # sshd insists on it; systemd would make it at boot
            PRIVSEP.mkdir(mode=0o755)
            self.made_privsep = True

    def _sshd(self, i: int) -> None:
        cfg = self.tmp / f"sshd_{i}.conf"
        cfg.write_text(
            f"ListenAddress {self.addresses[i]}:22\n"
            f"HostKey {self.tmp / 'host_key'}\n"
            f"AuthorizedKeysFile {self.tmp / 'authorized_keys'}\n"
            f"PidFile {self.tmp / f'sshd_{i}.pid'}\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nPrintMotd no\nX11Forwarding no\n"
            "MaxStartups 64:30:128\nMaxSessions 64\n"
            "Subsystem sftp internal-sftp\n")
        log = open(self.tmp / f"sshd_{i}.log", "wb")  # noqa: SIM115
        try:
            # -D: stays in the foreground, so the PID is sshd's own; -e: log to the file
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", self.hosts[i], SSHD, "-D", "-e", "-f", str(cfg)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        finally:
            log.close()

    def ssh(self, i: int, command: str) -> subprocess.CompletedProcess:
        """``command`` on host ``i``, over ssh from the driver namespace."""
        return subprocess.run(
            ["ip", "netns", "exec", self.driver, "ssh", "-F", str(self.ssh_config),
             "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", self.addresses[i], command],
            capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)

    def _wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        for i in range(self.n):
            while True:
                if self.sshd[i].poll() is not None:
                    raise RuntimeError(f"sshd {i} exited: "
                                       f"{(self.tmp / f'sshd_{i}.log').read_text()[-500:]}")
                if self.ssh(i, "true").returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd {i} not reachable: {self.ssh(i, 'true').stderr}")
                time.sleep(0.2)

    # checking and removing ----------------------------------------------------------
    def pids_in(self, ns: str) -> set[int]:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                             check=False).stdout
        return {int(x) for x in out.split()}

    def leftovers(self, workdir: str) -> list[str]:
        """What a run left on the hosts: processes other than sshd, qdiscs other than the
        default on eth0, anything under ``workdir``."""
        found = []
        ours = {p.pid for p in self.sshd}
        for ns in self.hosts:
            extra = self.pids_in(ns) - ours
            extra = {p for p in extra if not _is_ssh_session(p)}
            if extra:
                found.append(f"{ns}: processes {[f'{p} {_cmdline(p)}' for p in sorted(extra)]}")
            qd = _run("tc", "qdisc", "show", "dev", "eth0", ns=ns)
            if "htb" in qd or "pfifo" in qd:
                found.append(f"{ns}: eth0 still shaped: {qd.strip()}")
        if Path(workdir).exists() and any(Path(workdir).iterdir()):  # the hosts' shared disk
            found.append(f"{workdir}: {sorted(os.listdir(workdir))}")
        return found

    def close(self) -> None:
        terminate(self.sshd, timeout_s=10)
        for ns in reversed(self.namespaces):
            kill_pids(self.pids_in(ns))  # a session that outlived its sshd: ours, in our ns
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.namespaces.clear()
        if self.made_privsep:
            try:
                PRIVSEP.rmdir()
            except OSError:
                pass
            self.made_privsep = False


def _cmdline(pid: int) -> str:
    """A process's command line (for a leftover's message), or '?' if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def _is_ssh_session(pid: int) -> bool:
    """An sshd child that serves a session still closing (not something the run left)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return True  # gone meanwhile
    return comm == "sshd"
