"""The emulated network: Mininet topologies shaped with our own tc, processes inside hosts,
cross-traffic, kernel probes and the per-run registry that makes teardown complete.

Knows nothing about scenarios or training: it takes a topology name and its parameters.
"""

from testbed.emulation.emulated_network import Emulation, EmulationError

__all__ = ["Emulation", "EmulationError"]
