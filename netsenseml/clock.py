"""The clock every measurement of the library and the worker reads: real time divided by the
run's time-dilation factor.

Why one clock: under time dilation (Gupta et al., NSDI'06, "To Infinity and Beyond:
Time-Warped Network Emulation") the testbed divides every link rate by ``k`` and multiplies
every scheduled time by ``k``; a process that reads real time over ``k`` then sees the network and
the emulated accelerator at their virtual speed, so the policy's thresholds, the monitor's
rates (bytes per virtual second) and the step records are the same numbers at any ``k``.
Only the process's own timers are dilated: kernel timers are not (TCP's minimum RTO is set
per route by the testbed; delayed ACKs and gloo's own software cost are not; DESIGN.md).

``k`` is 1 unless the process was started with ``NETSENSE_DILATION`` set or calls
:func:`set_dilation` (the worker's ``--dilation``); the factor is a
:class:`netsenseml.dilation.Dilation` (:func:`current`), which does the arithmetic.
Timeouts that guard against a dead peer (the process group's, the worker's watchdog) stay
on the real clock, scaled by :func:`real_s`, since they protect the real process.
"""

from __future__ import annotations

import os
import time

from netsenseml.dilation import ENV as _ENV
from netsenseml.dilation import Dilation


def _from_env() -> Dilation:
    return Dilation.parse(os.environ.get(_ENV, ""))


_dilation = _from_env()


def set_dilation(k: float | Dilation) -> None:
    """Sets the factor (>= 1) for this process; the environment variable follows, so a
    child process started afterwards reads the same clock."""
    global _dilation
    _dilation = Dilation(float(Dilation.of(k).k))
    os.environ[_ENV] = _dilation.env()


def current() -> Dilation:
    """This process's dilation (:class:`netsenseml.dilation.Dilation`)."""
    return _dilation


def dilation() -> float:
    """The factor ``k``: one virtual second lasts ``k`` real seconds."""
    return _dilation.k


def now() -> float:
    """Virtual seconds on a monotonic clock (``time.perf_counter()`` in virtual time)."""
    return _dilation.virtual_s(time.perf_counter())


def real_s(virtual_s: float) -> float:
    """Real seconds that ``virtual_s`` virtual seconds last."""
    return _dilation.real_s(virtual_s)


def sleep_until(deadline: float) -> float:
    """Sleeps until the virtual time ``deadline``; returns the virtual seconds slept (0 when
    the deadline has passed)."""
    wait = deadline - now()
    if wait <= 0:
        return 0.0
    time.sleep(_dilation.real_s(wait))
    return wait
