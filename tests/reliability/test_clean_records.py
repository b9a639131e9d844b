"""`netsense clean` trusts its records no more than `run` does. Crafted registries in a
state folder of the test's own, naming a process of the test's own (a ``sleep``) and real
veth pairs in the root namespace with a run's prefix:

* a process whose PID and start time match but whose command line is not the one on
  record is left alone; the one that matches in all three is killed;
* a veth carrying the run's prefix but not recorded as created by the run is left alone;
  the recorded one is deleted;
* a record another user owns, or one writable by others, is refused, as is a state folder
  writable by others: nothing it names is touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testbed.common import names
from testbed.emulation import leftovers
from tests.reliability.helpers import run_cli

pytestmark = pytest.mark.emulation  # root: veth pairs in the root namespace

NOBODY = 65534


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)


def _veth(name: str) -> None:
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"],
                   check=True)


def _record(state, prefix: str, procs: list[dict], intfs: list[str]) -> None:
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / f"{prefix}.json"
    path.write_text(json.dumps({
        "prefix": prefix, "owner": {"pid": 2**22 + 7, "starttime": 1, "role": "owner"},
        "rootless": False, "processes": procs, "interfaces": intfs}))
    path.chmod(0o600)


def _prefix() -> str:
    while True:
        p = names.random_prefix()
        if not leftovers.interfaces_with_prefix(p):
            return p


def test_clean_matches_pid_start_time_and_command_line_and_recorded_interfaces(tmp_path):
    state = tmp_path / "state"
    other, ours = _sleeper(), _sleeper()
    prefix = _prefix()
    try:
        _veth(prefix + "a")  # recorded as created by the run
        _veth(prefix + "x")  # never made by the testbed: same prefix, no record
        fake = leftovers.process_entry(other.pid, "proc:x0:iperf3")
        fake["cmdline"] = ["iperf3", "-s", "-p", "5301"]  # what the record says it was
        _record(state, prefix, [fake, leftovers.process_entry(ours.pid, "proc:w0:train")],
                [prefix + "a", prefix + "ap"])
        proc = run_cli(["clean"], tmp_path, env=dict(os.environ, NETSENSE_STATE_DIR=str(state)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        ours.wait(timeout=10)  # killed: all three matched
        assert other.poll() is None, "a process whose command line differs was killed"
        left = leftovers.interfaces_with_prefix(prefix)
        assert prefix + "a" not in left and prefix + "ap" not in left
        assert prefix + "x" in left, "an interface the run never recorded was deleted"
        assert f"pids killed: 1 ({ours.pid})" in proc.stdout, proc.stdout
        assert not (state / f"{prefix}.json").exists()  # nothing it names is ours any more
    finally:
        for p in (other, ours):
            if p.poll() is None:
                p.kill()
                p.wait()
        leftovers.delete_interfaces(leftovers.interfaces_with_prefix(prefix))


@pytest.mark.parametrize("how", ["record of another user", "record writable by others",
                                 "state folder writable by others"])
def test_clean_refuses_records_it_cannot_trust(tmp_path, how):
    state = tmp_path / "state"
    victim = _sleeper()
    prefix = _prefix()
    try:
        _veth(prefix + "a")
        _record(state, prefix, [leftovers.process_entry(victim.pid, "proc:w0:train")],
                [prefix + "a", prefix + "ap"])
        path = state / f"{prefix}.json"
        if how == "record of another user":
            os.chown(path, NOBODY, NOBODY)
        elif how == "record writable by others":
            path.chmod(0o666)
        else:
            state.chmod(0o777)
        proc = run_cli(["clean"], tmp_path, env=dict(os.environ, NETSENSE_STATE_DIR=str(state)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "refused: 1" in proc.stdout, proc.stdout
        assert victim.poll() is None, "a process named by an untrusted record was killed"
        assert prefix + "a" in leftovers.interfaces_with_prefix(prefix)
        assert path.exists()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        leftovers.delete_interfaces(leftovers.interfaces_with_prefix(prefix))
