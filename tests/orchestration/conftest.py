"""Fixtures shared by the orchestration tests."""

from __future__ import annotations

import pytest

from testbed.orchestration import launcher


@pytest.fixture(scope="module")
def zygote():
    """A real pre-imported ``workloads.zygote`` (one per test module), closed after it."""
    z = launcher.Zygote()
    try:
        z.wait_ready()
        yield z
    finally:
        z.close()
