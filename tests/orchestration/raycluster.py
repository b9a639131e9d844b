"""A private two-node Ray cluster on this machine, for tests: start it, find its processes,
stop exactly it.

Both nodes (head and one worker, each ``ray start --block`` in a session of its own) bind to
127.0.0.1, keep their files in their own temp dir and declare ``netsense_host: 1``. Stopping
sends SIGTERM to the two ``ray start --block`` processes we started (they stop their own
raylet, GCS and workers), then SIGKILL to anything still in those two sessions: never
``ray stop``, which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.common.ports import free_port
from tests.orchestration.procs import kill_pids, terminate

RAY = str(Path(sys.executable).with_name("ray"))


def session_pids(sid: int) -> list[int]:
    """PIDs whose session id is ``sid`` (a session we created with start_new_session)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after "pid (comm)": state ppid pgrp session
            out.append(int(p.name))
    return out


class LocalRayCluster:
    def __init__(self, staging: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nsr", dir="/tmp"))  # short: unix sockets
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.staging = staging
        self.procs: list[subprocess.Popen] = []
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0",
                        NETSENSE_STAGING_DIR=str(staging))

    def _start(self, args: list[str], log: str) -> None:
        res = json.dumps({"netsense_host": 1})
        common = ["--block", "--num-cpus", "1", "--resources", res,
                  "--node-ip-address", "127.0.0.1", "--temp-dir", str(self.dir / "t"),
                  "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats",
                  "--dashboard-agent-listen-port", str(free_port()),
                  "--metrics-export-port", str(free_port())]
        fh = open(self.dir / log, "w")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen([RAY, "start", *args, *common], stdout=fh,
                                           stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))

    def start(self, timeout_s: float = 90) -> None:
        self._start(["--head", "--port", str(self.port), "--include-dashboard=false",
                     "--ray-client-server-port", str(free_port())], "head.log")
        self._wait_nodes(1, timeout_s)
        self._start(["--address", self.address], "worker.log")
        self._wait_nodes(2, timeout_s)

    def _wait_nodes(self, n: int, timeout_s: float) -> None:
        probe = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
                 "print(int(ray.cluster_resources().get('netsense_host', 0)))")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError("ray start exited: " + self.logs())
            r = subprocess.run([sys.executable, "-c", probe, self.address], env=self.env,
                               capture_output=True, text=True, timeout=60, check=False)
            if r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [str(n)]:
                return
            time.sleep(1)
        raise TimeoutError(f"Ray cluster did not reach {n} nodes: " + self.logs())

    def logs(self) -> str:
        return " | ".join((self.dir / n).read_text()[-800:] for n in ("head.log", "worker.log")
                          if (self.dir / n).exists())

    def pids(self) -> list[int]:
        return [pid for p in self.procs for pid in session_pids(p.pid)]

    def stop(self) -> None:
        terminate(reversed(self.procs), timeout_s=30)
        time.sleep(1)
        for p in self.procs:
            kill_pids(session_pids(p.pid))
        subprocess.run(["rm", "-rf", "--", str(self.dir)], check=False)
