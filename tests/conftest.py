"""Shared test configuration: the ``emulation`` marker and the one place that decides
whether this machine can run emulation tests.

A test that builds real namespaces and shaped links says ``pytestmark = pytest.mark.emulation``
(or decorates itself); it is skipped, with the reason below, where the machine cannot
emulate. Nothing else in the suite decides that.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

# ``dilation: auto``'s measurements persist on disk between processes; the tests measure
# afresh (a test of the cache names its own folder).
os.environ.setdefault("NETSENSE_CACHE", "")


@functools.cache
def emulation_unavailable() -> str | None:
    """Why emulation tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "emulation tests need root (network namespaces, tc)"
    missing = [tool for tool in ("mnexec", "iperf3", "tc") if shutil.which(tool) is None]
    if missing:
        return f"emulation tests need {', '.join(missing)} (apt-get install mininet iperf3 iproute2)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = emulation_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("emulation") is not None:
            item.add_marker(skip)
