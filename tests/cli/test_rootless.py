"""The rootless mode end to end: `netsense run smoke` as an unprivileged user.

As root, the test becomes uid/gid 65534 (nobody) with ``setpriv``; as any other user it
runs as itself.  That user must be able to read an interpreter, the venv's packages and
the project.  A CI checkout often is not readable by others (a clone under a 0700 temp
folder, a venv whose interpreter lives in /root/.pyenv), so as root the test gives the
user a *view*: a fresh venv on an interpreter of the same Python version that the user can
execute, whose site-packages mirror this venv's and whose .pth points at a mirror of the
project's packages.  Mirrors are hard links where a file is already world-readable (a
second or two for ~35k files) and copies otherwise; the originals are never touched.

Asserted: exit 0 and status ok for both methods; every result file owned by that user;
the run's own user + network namespaces were seen while it ran (so the checks below can
fail) and none is left afterwards; no new process of that user, no registry entry, no
interface with the run's prefix in this namespace.  Skipped only where the kernel (or the
container around the test) refuses that user a user namespace.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.emulation import leftovers

# serial: a rootless run builds an emulated network (in user namespaces, so no emulation
# marker: it needs no root) and the leftover checks look at every namespace of one uid
pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("netsenseml", "workloads", "topologies", "testbed")
NOBODY = 65534
NS_GET_USERNS = 0xB701  # ioctl: the user namespace owning a namespace (a new fd)
NS_GET_OWNER_UID = 0xB704  # ioctl: the uid that created a user namespace
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _as_user(uid: int) -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _owned_namespaces(uid: int) -> set[tuple[str, int]]:
    """(kind, inode) of every user and network namespace, in use by a live process, that a
    user namespace created by uid owns (for a user namespace: that it is one of them)."""
    found: set[tuple[str, int]] = set()
    seen: set[tuple[str, int]] = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        for kind in ("user", "net"):
            try:
                fd = os.open(d / "ns" / kind, os.O_RDONLY)
            except OSError:
                continue
            try:
                key = (kind, os.fstat(fd).st_ino)
                if key in seen:
                    continue
                seen.add(key)
                ufd = fd if kind == "user" else fcntl.ioctl(fd, NS_GET_USERNS)
                try:
                    buf = bytearray(4)
                    fcntl.ioctl(ufd, NS_GET_OWNER_UID, buf)
                finally:
                    if ufd != fd:
                        os.close(ufd)
                if struct.unpack("I", buf)[0] == uid:
                    found.add(key)
            except OSError:  # the process went away, or an ioctl this kernel lacks
                continue
            finally:
                os.close(fd)
    return found


def _pids_of(uid: int) -> set[tuple[int, int | None]]:
    """(pid, start time) of live processes whose real uid is uid."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        real = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")), "")
        if real == str(uid):
            out.add((int(d.name), leftovers.proc_starttime(int(d.name))))
    return out


def _mirror(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """A tree every user can read: hard links to world-readable files, copies of others."""
    for root, dirs, files in os.walk(src):
        here = Path(root)
        out = dst / here.relative_to(src)
        out.mkdir(exist_ok=True)
        os.chmod(out, 0o755)
        for name in list(dirs):
            if name.startswith(skip) or (here / name).is_symlink():
                dirs.remove(name)
                if not name.startswith(skip):
                    os.symlink(os.readlink(here / name), out / name)
        for name in files:
            s, d = here / name, out / name
            if name.startswith(skip):
                continue
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
                continue
            mode = s.stat().st_mode
            if mode & 0o004 and (mode & 0o001 or not mode & 0o100):
                try:
                    os.link(s, d)
                    continue
                except OSError:  # another file system, or links refused: copy
                    pass
            shutil.copy2(s, d)
            os.chmod(d, 0o755 if mode & 0o100 else 0o644)


def _readable_python(uid: int) -> str | None:
    """An interpreter of this Python version that uid can execute, or None."""
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [Path(sys.base_prefix) / "bin" / f"python{ver}", Path(f"/usr/bin/python{ver}"),
                  Path(f"/usr/local/bin/python{ver}")]
    check = ["-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    for cand in candidates:
        # outside and inside the namespace: execute permission can differ between the two
        ok = cand.exists() and all(
            subprocess.run([*_as_user(uid), *ns, str(cand), *check], capture_output=True,
                           text=True, check=False, cwd="/").stdout.strip() == ver
            for ns in ([], ["unshare", "--user", "--map-root-user", "--net", "--mount"]))
        if ok:
            return str(cand)
    return None


def _view(work: Path, uid: int) -> Path:
    """The python of a venv uid can read, with this venv's packages and this project."""
    if os.geteuid() != 0:
        return Path(sys.executable)  # the user runs their own checkout and venv
    python = _readable_python(uid)
    if python is None:
        pytest.skip(f"no python{sys.version_info[0]}.{sys.version_info[1]} that uid {uid} may "
                    "execute (this venv's interpreter is not readable by it)")
    venv = work / "view" / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    _mirror(Path(sysconfig.get_paths()["purelib"]), site, skip=("__editable__",))
    src = work / "view" / "src"
    src.mkdir(mode=0o755)
    shutil.copy2(REPO / "pyproject.toml", src)
    for pkg in PACKAGES:
        _mirror(REPO / pkg, src / pkg, skip=("__pycache__",))
    (site / "netsense-view.pth").write_text(f"{src}\n")
    os.chmod(site / "netsense-view.pth", 0o644)
    return vpy


@dataclass
class User:
    """An unprivileged user who can run this project: who, with which python, where."""

    uid: int
    gid: int
    python: Path
    home: Path
    env: dict

    def argv(self, *args: str) -> list[str]:
        return [*_as_user(self.uid), str(self.python), "-m", "testbed.cli", *args]

    def leftovers(self, pids_before: set, ns_before: set) -> tuple[set, set]:
        return _pids_of(self.uid) - pids_before, _owned_namespaces(self.uid) - ns_before

    def wait_gone(self, pids_before: set, ns_before: set, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(self.leftovers(pids_before, ns_before)):
            time.sleep(0.2)


@pytest.fixture(scope="module")
def user():
    uid = NOBODY if os.geteuid() == 0 else os.getuid()
    gid = NOBODY if os.geteuid() == 0 else os.getgid()
    missing = [t for t in ("mnexec", "iperf3", "tc", "unshare", "setpriv") if not shutil.which(t)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install mininet iperf3 iproute2 "
                    "util-linux)")
    probe = subprocess.run([*_as_user(uid), "unshare", "--user", "--map-root-user", "--net",
                            "--mount", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces unavailable to uid {uid}: {probe.stderr.strip()}")
    work = Path(tempfile.mkdtemp(prefix="netsense-rootless-"))
    try:
        os.chmod(work, 0o755)
        home = work / "home"
        home.mkdir()
        os.chown(home, uid, gid)
        env = {"PATH": PATH, "HOME": str(home), "LANG": "C.UTF-8", "COLUMNS": "200",
               "NETSENSE_STATE_DIR": str(home / "state")}
        yield User(uid, gid, _view(work, uid), home, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_smoke_runs_rootless_as_an_unprivileged_user(user):
    uid, gid, home = user.uid, user.gid, user.home
    pids_before, ns_before = _pids_of(uid), _owned_namespaces(uid)
    seen: set[tuple[str, int]] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            seen.update(_owned_namespaces(uid) - ns_before)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # smoke's 3 s of training, not 4: its rate cut (2 s) still lands mid-run
        proc = subprocess.run(user.argv("run", "smoke", "--results", str(home / "results"),
                                        "--quiet", "--set", "workload.time_limit_s=3"),
                              capture_output=True, text=True, env=user.env, cwd=home,
                              timeout=400, check=False)
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 0, proc.stdout + proc.stderr

    summaries = {}
    for path in (home / "results" / "smoke").glob("*/summary.json"):
        summary = json.loads(path.read_text())
        summaries[summary["method"]] = summary
        config = json.loads((path.parent / "config.json").read_text())
        assert config["host"]["emulation"] == "rootless"
    assert sorted(summaries) == ["allreduce", "netsenseml"], proc.stdout
    for method, summary in summaries.items():
        assert summary["status"] == "ok", (method, summary.get("reason"))
    for root, dirs, files in os.walk(home / "results"):
        for name in [".", *dirs, *files]:
            st = os.lstat(Path(root) / name)
            assert (st.st_uid, st.st_gid) == (uid, gid), Path(root) / name

    assert {k for k, _ in seen} == {"user", "net"}, "no namespace of the run was seen"
    user.wait_gone(pids_before, ns_before)
    pids, namespaces = user.leftovers(pids_before, ns_before)
    assert not pids, "processes of the run outlived it"
    assert not namespaces, "namespaces of the run outlived it"
    assert not list((home / "state").glob("nst*.json")), "a registry entry was left"
    for summary in summaries.values():
        assert not leftovers.interfaces_with_prefix(summary["prefix"])


@pytest.mark.slow
def test_clean_removes_what_a_killed_rootless_run_left(user):
    """SIGKILL the orchestrator once its workers run: Mininet's host shells (and workers)
    stay, holding the run's namespaces; the same user's `netsense clean` removes them."""
    home, state = user.home, user.home / "state"
    pids_before, ns_before = _pids_of(user.uid), _owned_namespaces(user.uid)
    proc = subprocess.Popen(user.argv("run", "smoke", "-m", "allreduce", "--results",
                                      str(home / "killed"), "--quiet"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=user.env, cwd=home)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            registries = [json.loads(p.read_text()) for p in state.glob("nst*.json")]
            if any(e["role"].startswith("proc:") for r in registries for e in r["processes"]):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the run never started its workers (exit {proc.poll()})")
        # re-exec keeps the PID: this is the orchestrator inside its namespace
        assert registries[0]["owner"]["pid"] == proc.pid and registries[0]["rootless"]
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    pids, namespaces = user.leftovers(pids_before, ns_before)
    assert pids and {k for k, _ in namespaces} == {"user", "net"}, "nothing was left to clean"

    res = subprocess.run(user.argv("clean"), capture_output=True, text=True, env=user.env,
                         cwd=home, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pids killed: 0" not in res.stdout and "registries removed: 1" in res.stdout
    user.wait_gone(pids_before, ns_before, timeout_s=5)
    pids, namespaces = user.leftovers(pids_before, ns_before)
    assert not pids and not namespaces, res.stdout
    assert not list(state.glob("nst*.json"))


def test_without_user_namespaces_doctor_fails_and_run_refuses(tmp_path):
    """Root of a user namespace that does not own the network namespace, where no further
    user namespace may be made (max_user_namespaces=0 there): no mode can emulate."""
    netsense = Path(sys.executable).parent / "netsense"
    wrap = ["unshare", "--user", "--map-root-user", "sh", "-c",
            'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh", str(netsense)]
    if subprocess.run([*wrap[:5], "echo 0 > /proc/sys/user/max_user_namespaces"],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("user namespaces unavailable to this user")
    env = dict(os.environ, COLUMNS="250", NETSENSE_STATE_DIR=str(tmp_path / "state"))
    doctor = subprocess.run([*wrap, "doctor"], capture_output=True, text=True, env=env,
                            timeout=120, check=False)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    mode = next(line for line in doctor.stdout.splitlines() if line.startswith("│ mode"))
    assert "FAILED" in mode and "max_user_namespaces" in mode, doctor.stdout
    assert "Operation not permitted" not in doctor.stdout  # nothing was probed without a mode
    run = subprocess.run([*wrap, "run", "smoke", "--results", str(tmp_path / "res")],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_user_namespaces" in lines[0], run.stderr
    assert not (tmp_path / "res").exists() and not (tmp_path / "state").exists()
