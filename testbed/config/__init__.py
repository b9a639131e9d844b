"""Configuration: scenario and sweep files, their schema and validation, bandwidth traces.

Everything a user writes is checked here, before anything is built. Torch-free, and of
Mininet only the pure-Python ``mininet.topo`` (topology classes carry their ``Params``), so
that refusing bad input is fast.
"""
