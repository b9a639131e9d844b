"""Orchestration: one run (network + workers + timeline -> a run folder) and sweeps of runs."""
