"""The emulation's faithful range: the highest configured rate at which an emulated link on
this kind of machine still behaves like a link of that rate while the workers compute.

Why a stated limit: HTB on veth is software, run in softirq on the same cores the emulated
workers train on. Below some rate the shaper sets the transfer time; above it the CPU does
(TCP and gloo cannot fill the link while the cores are busy training), so a run configured
there measures the machine rather than the network, and an evaluation that puts its idle
phases there would credit dense methods with a link that is not there.

How it was measured (``benchmarks/faithful_range.py --steps``, the 2-core build machine,
2 workers computing; the table is in results/README.md): a rate is *faithful* when (a) one
TCP flow's goodput across the shaped bottleneck, with the workers' compute running on the
same cores, is within 5 % of the goodput-to-rate ratio at 100 Mbit/s (headers take ~4.4 %
at any rate), and (b) a 2-worker allreduce step's communication time is within 5 % of the
gradient's transfer time at that ratio, relative to the same at 100 Mbit/s. Goodput stayed
within 2 % up to 5 Gbit/s; the step's communication is what breaks first: within 5 % at
1000 Mbit/s in both measurements, 1.05-1.28x at 1500-2000 Mbit/s depending on how busy the
shared machine was, 1.3-1.9x at 3000-5000. So the stated range is **1000 Mbit/s**.

A different machine has a different range: ``netsense doctor --range`` measures (a) here
(``testbed.emulation.loaded_goodput``), and ``NETSENSE_FAITHFUL_MBIT`` states another limit
for the warnings.

Why in the configuration: the range is a figure the scenario's rates are held against
(the warning, the estimate, ``dilation: auto``'s network factor), read with the scenario;
only measuring it builds an emulated network.
"""

from __future__ import annotations

import math
import os

from netsenseml.dilation import NONE, Dilation
from topologies import registry

FAITHFUL_MBIT = 1000.0
ENV = "NETSENSE_FAITHFUL_MBIT"
TOLERANCE = 0.05
REFERENCE_MBIT = 100.0


def faithful_mbit() -> float:
    """The stated limit: ``NETSENSE_FAITHFUL_MBIT`` when set to a positive number, else
    :data:`FAITHFUL_MBIT`."""
    raw = os.environ.get(ENV, "")
    try:
        v = float(raw)
    except ValueError:
        return FAITHFUL_MBIT
    return v if v > 0 and math.isfinite(v) else FAITHFUL_MBIT


def configured_rates(scenario: dict) -> list[float]:
    """Every rate a scenario configures: its topology's links and its ``set_rate`` events
    (a trace's rates are bounded by its own scale and are checked the same way)."""
    out: list[float] = []
    topo = scenario.get("topology")
    if isinstance(topo, dict):
        try:
            rates = registry.parse(topo).link_rates()
            out += [float(v) for v in rates.values() if v is not None]
        except (ValueError, TypeError, NotImplementedError):
            pass
    for ev in scenario.get("timeline") or []:
        if isinstance(ev, dict) and ev.get("kind") == "set_rate":
            v = ev.get("rate_mbit")
            if isinstance(v, int | float):
                out.append(float(v))
    return out


def training_rates(scenario: dict) -> list[float]:
    """The rates on links training crosses (the topology's ``training_links``) and the
    ``set_rate`` events on them: an unshaped-fast access link beside a shaped bottleneck
    only carries what the bottleneck lets through, so only these matter."""
    topo = scenario.get("topology")
    out: list[float] = []
    links: set[str] = set()
    if isinstance(topo, dict):
        try:
            spec = registry.parse(topo)
            rates = spec.link_rates()
            training = spec.training_links()
            links = set(training if training is not None else rates)
            lowest = [float(rates[k]) for k in links if rates.get(k) is not None]
            out += [min(lowest)] if lowest else []
        except (ValueError, TypeError, NotImplementedError):
            return configured_rates(scenario)
    for ev in scenario.get("timeline") or []:
        if isinstance(ev, dict) and ev.get("kind") == "set_rate" and (
                not links or ev.get("link") in links):
            v = ev.get("rate_mbit")
            if isinstance(v, int | float):
                out.append(float(v))
    return out


def warning(scenario: dict, dilation: Dilation | float = NONE) -> str | None:
    """One line when the scenario's training path is configured above the faithful range.

    The rate training sees is the lowest over the links it crosses (a dumbbell's 10 Gbit/s
    access links beside a 1 Gbit/s bottleneck run at the bottleneck's rate), so the check is
    on that, and on every ``set_rate`` of those links. Under time dilation by ``k`` the
    links really run at the virtual rate / k, which is what the range bounds."""
    d = Dilation.of(dilation)
    limit = faithful_mbit()
    above = sorted({r for r in training_rates(scenario) if d.real_mbit(r) > limit})
    if not above:
        return None
    real = f" virtual, {', '.join(f'{d.real_mbit(r):g}' for r in above)} real" if d.dilated else ""
    return (f"configured rate {', '.join(f'{r:g}' for r in above)} Mbit/s{real} is above the "
            f"emulation's faithful range ({limit:g} Mbit/s: testbed/config/faithful.py; "
            f"`netsense doctor --range` checks this machine): step times there are set by "
            f"the CPU, not the emulated link")
