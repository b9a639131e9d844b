"""Real hosts end to end: ``topology.kind: hosts`` over real ssh to 3 machines.

The machines are network namespaces that each run their own sshd (``sshnet``); ``netsense
run`` runs in a fourth namespace and reaches them by ssh only, so the run takes the path
it takes on a cluster: tc shaping over ssh, torchrun on every host (rendezvous on host 0),
a timeline (a rate change on one host's NIC, iperf3 cross traffic between two hosts), the
logs fetched back with scp, the shaping removed. Checked: the run folder, that the shaping
held (comm time at least what the rate allows; the HTB class counted the traffic), the
timeline applied, and that nothing is left -- no process in any host but its sshd, no
qdisc on the NICs, no run folder on the hosts; then the namespaces and sshd go.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.orchestration import sshnet

pytestmark = [pytest.mark.emulation, pytest.mark.slow,
              pytest.mark.root("for network namespaces that each run their own sshd", *sshnet.TOOLS)]

ROOT = Path(__file__).resolve().parents[2]
RATE_MBIT = 10
LATE_RATE_MBIT = 4


@pytest.fixture
def machines(tmp_path: Path):
    (tmp_path / "ssh").mkdir()
    net = sshnet.SshHosts(3, tmp_path / "ssh").start()
    try:
        yield net
    finally:
        net.close()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert net.tag not in left, left
        assert all(p.poll() is not None for p in net.sshd)


def test_three_hosts_over_ssh(machines: sshnet.SshHosts, tmp_path: Path) -> None:
    workdir = str(tmp_path / "remote")
    scenario = {
        "name": "ssh-hosts",
        "topology": {
            "kind": "hosts", "rate_mbit": RATE_MBIT, "queue_pkts": 50, "master_port": 29633,
            "python": sys.executable, "workdir": workdir, "ssh_config": str(machines.ssh_config),
            "env": {"PYTHONPATH": str(ROOT)},
            "machines": [{"address": a, "interface": "eth0", "ssh_user": "root"}
                         for a in machines.addresses]},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 16, "time_limit_s": 5,
                     "args": {"width": 192}},
        "methods": ["allreduce"],
        "timeline_origin": "first_step",
        "timeline": [
            {"at_s": 1.0, "kind": "cross_start", "id": "bulk", "src": "h2", "dst": "h0",
             "streams": 2},
            {"at_s": 2.0, "kind": "cross_stop", "id": "bulk"},
            {"at_s": 2.5, "kind": "set_rate", "link": "h1", "rate_mbit": LATE_RATE_MBIT},
        ],
    }
    path = tmp_path / "ssh-hosts.yaml"
    path.write_text(yaml.safe_dump(scenario))
    results = tmp_path / "results"
    res = subprocess.run(
        ["ip", "netns", "exec", machines.driver, sys.executable, "-m", "testbed.cli", "run",
         str(path), "-r", str(results), "-q"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
             "/usr/bin:/sbin:/bin", "HOME": str(tmp_path)})
    runs = [p.parent for p in results.rglob("summary.json")]
    assert len(runs) == 1, (res.stdout[-2000:], res.stderr[-2000:])
    run = runs[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok", (summary, res.stderr[-2000:])
    assert res.returncode == 0

    # the same run folder as an emulated run
    for name in ("config.json", "steps.csv", "events.csv", "workers/h0.log",
                 *(f"workers/rank{r}.jsonl" for r in range(3))):
        assert (run / name).is_file(), name
    assert summary["world_size"] == 3 and summary["steps"] >= 5
    cfg = json.loads((run / "config.json").read_text())
    assert [p["address"] for p in cfg["hosts_plan"]] == machines.addresses
    assert all(p["train"].startswith("ssh -F ") for p in cfg["hosts_plan"])

    # shaping held: the ring's bytes beyond the HTB bucket left at no more than the rate
    with open(run / "steps.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["step"]) > 2]
    sent = statistics.fmean(float(r["bytes_sent"]) for r in rows)  # per worker and step
    volume = 2 * (3 - 1) / 3 * sent  # a ring allreduce sends this over each NIC
    floor = (volume - 67050) * 8 / (RATE_MBIT * 1e6)
    comm = statistics.median(float(r["comm_s"]) for r in rows)
    assert comm >= 0.8 * floor, (comm, floor)
    counted = summary["network"]["shaping"]["sent_bytes"]
    assert set(counted) == {"h0", "h1", "h2"}
    assert all(b >= volume * summary["steps"] * 0.9 for b in counted.values()), counted

    # the timeline happened: cross traffic started and stopped, h1's rate dropped
    with open(run / "events.csv", newline="") as fh:
        events = list(csv.DictReader(fh))
    assert [e["kind"] for e in events] == ["cross_start", "cross_stop", "set_rate"]
    assert all(e["t_applied"] and not e["detail"].startswith("error") for e in events)
    after = [float(r["comm_s"]) for r in rows if float(r["t"]) > float(events[2]["t_applied"]) + 0.3]
    before = [float(r["comm_s"]) for r in rows if float(r["t"]) < float(events[0]["t_applied"])]
    if after and before:  # a slower link: the ring moves at its pace
        assert statistics.median(after) > 1.5 * statistics.median(before), (before, after)

    # nothing left on the hosts
    assert "teardown_errors" not in summary, summary["teardown_errors"]
    assert machines.leftovers(workdir) == []
