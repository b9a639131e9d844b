"""Real hosts (topology.kind: hosts): the generated per-host commands for a 3-host list, and
a loopback run of the same path with one host (127.0.0.1, no ssh, two torchrun processes,
the HTB tree applied to a veth pair this test creates and removes; the machine's real NICs
are never touched).
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from netsenseml import methods
from testbed.config.scenario import validate_scenario
from testbed.orchestration.real_hosts import host_plan


def _scenario(hosts: list[dict], **topo: object) -> object:
    return validate_scenario({
        "name": "real-hosts",
        "topology": {"kind": "hosts", "machines": hosts, "rate_mbit": 100, "queue_pkts": 50,
                     "master_port": 29611, **topo},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32, "time_limit_s": 3,
                     "eval_every": 10, "target_accuracy": 0.5, "args": {"width": 64}},
        "methods": ["allreduce", "netsenseml"],
    })


THREE = [
    {"address": "10.0.0.1", "interface": "eth1", "ssh_user": "root"},
    {"address": "10.0.0.2", "interface": "ens5", "ssh_user": "alice", "ssh_port": 2222},
    {"address": "node3.lab", "interface": "eth0", "ssh_user": "bob", "shape": False},
]


def test_three_host_commands() -> None:
    scn = _scenario(THREE, procs_per_host=2, python="/opt/venv/bin/python")
    assert scn.world_size == 6
    plans = host_plan(scn, methods.parse("netsenseml"), 3, "run-x")
    assert [p.name for p in plans] == ["h0", "h1", "h2"]

    # host 0: root over ssh, no sudo; HTB tree on eth1 exactly as the emulated links get it
    p0 = plans[0]
    assert p0.shape[0][:8] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                               "-p", "22", "root@10.0.0.1"]
    assert [a[-1] for a in p0.shape] == [
        "tc qdisc replace dev eth1 root handle 1: htb default 1 r2q 10",
        "tc class add dev eth1 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit "
        "burst 67050 cburst 67050 quantum 65536",
        "tc qdisc add dev eth1 parent 1:1 handle 10: pfifo limit 50",
    ]
    assert p0.unshape[0][-1] == "tc qdisc del dev eth1 root"

    # host 1: an ordinary user gets sudo -n, its own port
    p1 = plans[1]
    assert p1.shape[0][5:8] == ["-p", "2222", "alice@10.0.0.2"]
    assert p1.shape[0][-1].startswith("sudo -n tc qdisc replace dev ens5 root")
    # host 2: shape: false leaves its NIC alone
    assert plans[2].shape == [] and plans[2].unshape == []

    # torchrun: one node per host, rendezvous on host 0, ranks in host order
    for i, p in enumerate(plans):
        remote = p.train[-1]
        assert remote.startswith("env GLOO_SOCKET_IFNAME=" + THREE[i]["interface"])
        inner = shlex.split(remote)[-1]  # the sh -c script
        assert inner.startswith("mkdir -p /tmp/netsense-hosts/run-x/workers && echo $$ > "
                                f"/tmp/netsense-hosts/run-x/train-h{i}.pid && exec "
                                "/opt/venv/bin/python -m torch.distributed.run")
        argv = shlex.split(inner.split("&& exec ", 1)[1])
        assert argv[3:9] == ["--nnodes=3", "--nproc-per-node=2", f"--node-rank={i}",
                             "--master-addr=10.0.0.1", "--master-port=29611", "-m"]
        assert argv[9] == "workloads.train"
        args = dict(zip(argv[10::2], argv[11::2], strict=False))
        assert args["--method"] == "netsenseml" and args["--seed"] == "3"
        assert args["--model"] == "mlp" and args["--time-limit"] == "3"
        assert args["--log-dir"] == "/tmp/netsense-hosts/run-x/workers"
        assert p.env["GLOO_SOCKET_IFNAME"] == THREE[i]["interface"]
        assert p.fetch[-2].endswith(":/tmp/netsense-hosts/run-x/workers/rank*")


def test_bad_host_lists_are_refused_with_one_line() -> None:
    from testbed.config.scenario import ScenarioError

    with pytest.raises((ScenarioError, ValueError), match="machines.0.address"):
        _scenario([{"address": "localhost", "interface": "lo"}, *THREE[:1]])
    with pytest.raises((ScenarioError, ValueError), match="interface"):
        _scenario([{"address": "10.0.0.1", "interface": "eth0; reboot"}])
    def hosts_with(timeline: list[dict]) -> object:
        return validate_scenario({
            "name": "x", "topology": {"kind": "hosts", "rate_mbit": 10,
                                      "machines": [{"address": "10.0.0.1", "interface": "e"}]},
            "workload": {"model": "mlp", "dataset": "digits", "time_limit_s": 3},
            "methods": ["allreduce"], "timeline": timeline})

    # a timeline names the hosts' links (h<i>) and hosts; anything else is refused
    assert hosts_with([{"at_s": 1, "kind": "set_rate", "link": "h0", "rate_mbit": 5}])
    with pytest.raises((ScenarioError, ValueError), match=r"timeline\[0\]"):
        hosts_with([{"at_s": 1, "kind": "set_rate", "link": "h5", "rate_mbit": 5}])


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _qdiscs(dev: str) -> str:
    return subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True,
                          text=True, check=False).stdout


@pytest.mark.emulation
@pytest.mark.slow
def test_loopback_run_with_one_host(tmp_path: Path) -> None:
    from testbed.orchestration.run import run_scenario

    dev = f"nsth{secrets.token_hex(2)}"  # a veth of our own, removed below
    _ip("link", "add", dev + "a", "type", "veth", "peer", "name", dev + "b")
    try:
        scn = _scenario([{"address": "127.0.0.1", "interface": dev + "a",
                          "socket_ifname": "lo"}], procs_per_host=2,
                        workdir=str(tmp_path / "remote"), python=sys.executable)
        seen: list[str] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.2):
                seen.append(_qdiscs(dev + "a"))

        th = threading.Thread(target=watch)
        th.start()
        try:
            out = run_scenario(scn, "netsenseml", 0, tmp_path / "run")
        finally:
            done.set()
            th.join()
        assert out.status == "ok", out.summary
        run = tmp_path / "run"
        for name in ("config.json", "summary.json", "steps.csv", "events.csv",
                     "workers/rank0.jsonl", "workers/rank1.jsonl", "workers/h0.log"):
            assert (run / name).is_file(), name
        summary = json.loads((run / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["steps"] > 5
        cfg = json.loads((run / "config.json").read_text())
        assert cfg["hosts_plan"][0]["train"].startswith(f"{sys.executable} -m torch.distributed.run "
                                                        "--nnodes=1 --nproc-per-node=2")
        assert any("qdisc htb 1: root" in s and "limit 50p" in s for s in seen), seen[-3:]
        assert "htb" not in _qdiscs(dev + "a")  # unshaped after the run
        assert not (tmp_path / "remote").exists() or not any((tmp_path / "remote").iterdir())
    finally:
        _ip("link", "del", dev + "a")


def _live_in_group(pgid: int) -> list[int]:
    """PIDs of the process group's members that still run (zombies, waiting for a reaper
    that may be slow in a container, have ended)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_stop_ends_what_started_began_and_its_children(tmp_path: Path, shell: str) -> None:
    """``HostPlan.started``/``stop`` as a host's shell runs them (here locally, under the
    shells a remote login may give): the program and the child it forked are gone, and a
    second stop (already exited) is not an error."""
    import time

    from topologies.hosts import HostPlan

    if subprocess.run(["sh", "-c", f"command -v {shell}"], capture_output=True).returncode:
        pytest.skip(f"no {shell}")
    plan = HostPlan(name="h0", address="127.0.0.1", local=True, node_rank=0, env={},
                    log_dir=str(tmp_path / "run" / "workers"))
    argv = plan.started("prog", ["sh", "-c", "sleep 60 & sleep 60; wait"])
    proc = subprocess.Popen([shell, "-c", shlex.join(argv)], start_new_session=True)
    pid_file = Path(plan.pid_file("prog"))
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    pgid = int(pid_file.read_text())
    stop = plan.stop("prog", "KILL")
    assert subprocess.run([shell, "-c", shlex.join(stop)]).returncode == 0
    proc.wait(timeout=10)
    time.sleep(0.2)  # the signal's delivery
    assert _live_in_group(pgid) == [], f"left in process group {pgid}"
    assert subprocess.run([shell, "-c", shlex.join(stop)]).returncode == 0
