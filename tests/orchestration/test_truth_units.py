"""Network-truth pieces that need no emulation: the transport environment of a worker, the
GPU plan and its refusal, the worker's device choice, the byte-conservation band, and the
sensing validation on a run folder written here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.analysis import loading, sensing
from testbed.common import files
from testbed.emulation import bottleneck, counters
from testbed.orchestration import gpus
from testbed.orchestration.workers import transport_env
from workloads.train import choose_device

NETSENSE = Path(sys.executable).parent / "netsense"


def test_transport_env_pins_gloo_and_nccl_to_the_emulated_interface():
    envs = [transport_env(f"nstab12w{r}-eth0", r, "nstab12", ["3", "5"]) for r in range(2)]
    for r, env in enumerate(envs):
        assert env["GLOO_SOCKET_IFNAME"] == f"nstab12w{r}-eth0"
        assert env["NCCL_SOCKET_IFNAME"] == f"=nstab12w{r}-eth0"  # exact name, no prefix match
        assert env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
        assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_NET"] == "Socket"
        assert env["LOCAL_RANK"] == "0"
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]  # one "machine" per host
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3", "5"]
    assert "CUDA_VISIBLE_DEVICES" not in transport_env("x-eth0", 0, "nstab12", None)


def test_gpu_plan():
    with pytest.raises(gpus.GpuPlanError, match="nccl needs 4 distinct GPUs.*this machine has 1.*gloo"):
        gpus.plan("auto", "nccl", 4, ["0"])
    with pytest.raises(gpus.GpuPlanError, match="needs workload.device cuda"):
        gpus.plan("cpu", "nccl", 2, ["0", "1"])
    with pytest.raises(gpus.GpuPlanError, match="no GPU"):
        gpus.plan("cuda", "auto", 2, [])
    assert gpus.plan("auto", "auto", 2, []) == gpus.GpuPlan("cpu", "gloo", None)
    assert gpus.plan("auto", "auto", 2, ["0", "1", "2"]).per_rank == ["0", "1"]
    shared = gpus.plan("cuda", "auto", 3, ["0", "1"])
    assert (shared.backend, shared.per_rank) == ("gloo", ["0", "1", "0"])


def test_worker_device_choice_uses_local_rank():
    assert choose_device("auto", "auto", False, 0, 0) == ("cpu", None, "gloo")
    assert choose_device("auto", "auto", True, 4, 2) == ("cuda", 2, "nccl")
    assert choose_device("cuda", "gloo", True, 1, 0) == ("cuda", 0, "gloo")
    with pytest.raises(ValueError, match="LOCAL_RANK 1 has no GPU"):
        choose_device("cuda", "nccl", True, 1, 1)
    with pytest.raises(ValueError, match="no CUDA device"):
        choose_device("cuda", "auto", False, 0, 0)
    with pytest.raises(ValueError, match="nccl needs --device cuda"):
        choose_device("cpu", "nccl", True, 1, 0)


def test_nccl_refused_before_anything_is_built(tmp_path):
    if gpus.visible_gpus():
        pytest.skip("this machine has GPUs")
    proc = subprocess.run([str(NETSENSE), "run", "smoke", "--results", str(tmp_path), "--set",
                           "workload.backend=nccl"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nccl needs 2 distinct GPUs" in lines[0] and "gloo" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_counters_of_this_namespace_and_the_band():
    # 20 datagrams of 1000 bytes over loopback, each counted on lo as 1000 + 8 (UDP) + 20 (IP)
    # bytes sent and received (lo counts a frame after its Ethernet header is pulled; a veth
    # counts the header too); other traffic on lo only adds
    before = counters.read_counters(os.getpid(), "lo")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        for _ in range(20):
            tx.sendto(b"x" * 1000, rx.getsockname())
        assert all(len(rx.recv(2000)) == 1000 for _ in range(20))
    after = counters.read_counters(os.getpid(), "lo")
    assert after.tx_packets - before.tx_packets >= 20
    assert after.rx_packets - before.rx_packets >= 20
    assert after.tx_bytes - before.tx_bytes >= 20 * 1028
    assert after.rx_bytes - before.rx_bytes >= 20 * 1028
    with pytest.raises(LookupError):
        counters.read_counters(os.getpid(), "no-such-intf0")
    zero = counters.IntfCounters(0, 0, 0, 0)
    hook = 10_000_000
    fine = counters.rank_bytes(0, "w0", "i", zero, counters.IntfCounters(hook, 9000, 10_100_000,
                                                                        9000), hook, 100, 100, 2)
    bypass = counters.rank_bytes(1, "w1", "i", zero, counters.IntfCounters(9000, 30, 12000, 30),
                                 hook, 100, 100, 2)
    assert fine.ok and not bypass.ok
    block, warns = counters.verdict([fine, bypass], 2)
    assert block["status"] == "violated" and len(warns) == 1
    assert "rank 1" in warns[0] and "did not cross" in warns[0]
    # four workers: the band spans the all-reduce (1.5x) to the all-gather (3x) factor
    low, high = counters.expected_band(hook, 0, 0, 4)
    assert low == pytest.approx(0.97 * 1.5 * hook) and high > 3 * hook


def test_watched_links():
    links = ["w0", "w1", "x0"]
    assert bottleneck.watched_links(links, [], [("x0", "w1")], ["w0", "w1"]) == ["w1", "x0"]
    assert bottleneck.watched_links(links, ["w1"], [], ["w0", "w1"]) == ["w1"]
    assert bottleneck.watched_links(links, [], [], ["w0", "w1"]) == ["w0"]
    assert bottleneck.watched_links(["bottleneck", "w0"], [], [], ["w0"]) == ["bottleneck"]


@pytest.mark.parametrize("names", ["current", "legacy"])
def test_sensing_compares_the_estimate_with_the_available_rate(tmp_path, names):
    """A synthetic run: 100 Mbit/s link, 60 Mbit/s of cross traffic from t=5; a monitor
    that reads 100 before and 50 after (2 workers: payload rate = link rate). ``legacy``:
    a run folder written before the step stats carried their units in today's names."""
    files.write_json(tmp_path / "config.json", {"world_size": 2, "scenario": {"timeline": [
        {"kind": "cross_start", "at": 5, "id": "b", "src": "x0", "dst": "w1"}]}})
    truth, steps = [], []
    for i in range(100):
        t = i / 10
        cross = 60.0 if t >= 5 else 0.0
        truth.append({"t": t, "link": "w1", "toward": "w1", "configured_mbit": 100.0,
                      "delivered_mbit": 100.0, "backlog_bytes": 125000 if t >= 5 else 0,
                      "drops_per_s": 0, "sent_bytes": i * 1250000})
        truth.append({"t": t, "link": "x0", "toward": "s0", "configured_mbit": 100.0,
                      "delivered_mbit": cross, "backlog_bytes": 0, "drops_per_s": 0,
                      "sent_bytes": 0})
    for i in range(20):
        t = 0.25 + i / 2
        est = 100.0 if t < 5 else 50.0
        stats = ({"est_rate_mbit": est, "est_bdp_bytes": est * 1e6 / 8 * 0.001}
                 if names == "current" else
                 {"est_rate_Bps": est * 1e6 / 8, "est_bdp_B": est * 1e6 / 8 * 0.001})
        steps.append({"t": t, "rank": 0, "step": i, "level": "none", "est_min_rtt_s": 0.001,
                      "est_queue_delay_s": 0.0, **stats})
    files.write_csv(tmp_path / "bottleneck.csv", sorted(truth[0]), truth)
    files.write_csv(tmp_path / "steps.csv", sorted(steps[0]), steps)
    summary, written = sensing.write(tmp_path)
    assert summary["bottleneck"] == {"link": "w1", "toward": "w1"}
    # 10 steps exact; 10 steps 10 Mbit/s over the 40 available; the smoothing blurs the edge
    assert 4.0 <= summary["rate_mae_mbit"] <= 8.0
    assert summary["max_truth_queue_ms"] == pytest.approx(10.0)  # 125 kB at 100 Mbit/s
    assert all(p.exists() for p in written)
    assert json.loads((tmp_path / "sensing.json").read_text())["steps_compared"] == 20


def test_sensing_counts_level_changes_per_segment(tmp_path):
    """Segments cut at the applied cross-traffic edges; a probe step (and its return) is no
    change; the first step of a segment (the reaction to the edge) is compared with none."""
    files.write_csv(tmp_path / "events.csv", ["t_scheduled", "t_applied", "kind", "target"], [
        {"t_scheduled": 1.0, "t_applied": 1.01, "kind": "cross_start", "target": "on1"},
        {"t_scheduled": 2.0, "t_applied": 2.01, "kind": "cross_stop", "target": "on1"}])
    #        idle: fp16 fp16 [probe none] fp16 | congested: topk topk fp16 topk | idle: fp16 fp16
    t = [0.2, 0.4, 0.6, 0.8, 1.1, 1.3, 1.5, 1.7, 2.1, 2.3]
    level = ["fp16", "fp16", "none", "fp16", "topk", "topk", "fp16", "topk", "fp16", "fp16"]
    probe = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    ratio = [1, 1, 1, 1, 0.01, 0.02, 1, 0.02, 1, 1]  # a top-k ratio move is a rung, no label change
    steps = pd.DataFrame({"rank": 0, "step": range(10), "t": t, "level": level, "probe": probe,
                          "ratio": ratio})
    steps = pd.concat([steps, steps.assign(rank=1, level="none")])  # rank 1 is not read
    segs = sensing.segment_changes(tmp_path, steps)
    assert [(s["phase"], s["steps"], s["changes"]) for s in segs] == [
        ("idle", 3, 0), ("congested", 4, 2), ("idle", 2, 0)]
    assert [s["ladder_changes"] for s in segs] == [0, 3, 0]
    assert sensing.segment_changes(tmp_path / "none", steps) == []


def test_fair_share_follows_the_running_streams_and_their_caps(tmp_path):
    """Max-min share of one more flow: 8 uncapped streams on 500 -> 500/9; a group of 4
    streams capped at 20 Mbit/s beside it leaves (500 - 80) / 9 each to the rest."""
    assert sensing._water_fill(100.0, [None, 10.0, None]) == pytest.approx([45.0, 10.0, 45.0])
    assert sensing._water_fill(100.0, [None]) == pytest.approx([100.0])
    config = {"scenario": {"timeline": [
        {"kind": "cross_start", "at": 1, "id": "a", "src": "x0", "dst": "x1", "streams": 8},
        {"kind": "cross_start", "at": 2, "id": "c", "src": "x0", "dst": "x1", "streams": 4,
         "bitrate_mbit": 20},
        {"kind": "cross_stop", "at": 3, "id": "a"}]}}
    files.write_csv(tmp_path / "events.csv", ["t_scheduled", "t_applied", "kind", "target", "value"], [
        {"t_scheduled": 1.0, "t_applied": 1.01, "kind": "cross_start", "target": "a", "value": 8},
        {"t_scheduled": 2.0, "t_applied": 2.01, "kind": "cross_start", "target": "c", "value": 4},
        {"t_scheduled": 3.0, "t_applied": 3.01, "kind": "cross_stop", "target": "a", "value": ""}])
    t = [0.5, 1.5, 2.5, 3.5]
    fair = sensing.fair_share(tmp_path, config, t, [500.0] * 4)
    assert fair == pytest.approx([500.0, 500 / 9, (500 - 80) / 9, 500 - 80])
    # without events.csv: the configured rate
    assert list(sensing.fair_share(tmp_path / "none", config, t, [500.0] * 4)) == [500.0] * 4


def test_capture_analysis_classes_and_retransmissions(tmp_path):
    """A pcap written here: a training flow between two worker addresses, a cross flow on an
    iperf3 port with one segment sent twice, and a flow of neither kind."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from testbed.emulation import capture

    def seg(src, dst, sport, dport, seq, n, t):
        p = Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq) / (b"x" * n)
        p.time = t
        return p

    pkts = [seg("10.0.0.1", "10.0.0.2", 40000, 29500, 1000, 500, 100.1),
            seg("10.0.0.1", "10.0.0.2", 40000, 29500, 1500, 500, 100.2),
            seg("10.0.0.3", "10.0.0.2", 41000, 5301, 1, 1000, 100.3),
            seg("10.0.0.3", "10.0.0.2", 41000, 5301, 1001, 1000, 100.6),
            seg("10.0.0.3", "10.0.0.2", 41000, 5301, 1, 1000, 100.7),  # sent again
            seg("10.0.0.9", "10.0.0.2", 42000, 80, 1, 10, 100.8)]
    wrpcap(str(tmp_path / "c.pcap"), pkts)
    rows = capture.analyse(tmp_path / "c.pcap", 100.0, {5301: "cross:bulk"},
                           {"10.0.0.1", "10.0.0.2"})
    by = {}
    for r in rows:
        by.setdefault(r["flow_class"], []).append(r)
    assert set(by) == {"training", "cross:bulk", "other"}
    assert sum(r["packets"] for r in by["training"]) == 2
    assert sum(r["retransmits"] for r in by["training"]) == 0
    assert sum(r["retransmits"] for r in by["cross:bulk"]) == 1
    assert [r["t"] for r in by["cross:bulk"]] == [0.0, 0.5]  # 0.5 s bins from the origin


def test_the_truths_smoothing_window_is_real_seconds_in_a_dilated_run():
    """A dilated run's records are k times denser in virtual time: the window shrinks by k,
    so a 0.14 s (virtual) congested phase is not averaged away with its idle neighbours."""
    period = 0.0084  # 1 s real at k = 120, as the bottleneck sampler writes it
    t = np.arange(60) * period
    step = pd.Series(np.where((t > 0.1) & (t < 0.24), 8000.0, 0.0), index=t)
    native = sensing._smooth(step, period, 1.0)
    dilated = sensing._smooth(step, period, 120.0)
    assert list(dilated) == list(step)  # a window of one sample: nothing averaged
    assert native.iloc[0] > 1000 and native.max() < 6000  # 0.5 s virtual: smeared over the run
    assert loading.dilation_of({"accelerator": {"dilation": 120}}) == 120.0
    assert loading.dilation_of({}) == 1.0
