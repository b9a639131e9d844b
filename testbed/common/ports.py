"""A free TCP port on loopback, for a gloo rendezvous (``MASTER_PORT``) on ``127.0.0.1``.

Why one home: the calibration runs, the benchmarks and the tests each start ranks on
loopback and each had its own copy of these lines.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no socket on 127.0.0.1 holds now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
