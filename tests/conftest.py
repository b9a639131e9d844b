"""Shared test configuration: the ``emulation`` and ``root`` markers and the one place that
decides whether this machine can run such tests.

A test that builds real namespaces and shaped links says ``pytestmark = pytest.mark.emulation``
(or decorates itself); it is skipped, with the reason below, where the machine cannot
emulate. A test that needs root for something else (a private mount, a packet socket) says
``pytest.mark.root("to <what root is for>", *tools)``; it is skipped where this process is
not root or a tool is missing. Nothing else in the suite decides either.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

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


def root_unavailable(why: str, tools: tuple[str, ...]) -> str | None:
    """Why a ``root`` test (root ``why``, with ``tools``) cannot run here, or None."""
    if os.geteuid() != 0:
        return f"needs root {why}"
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    emulation = emulation_unavailable()
    for item in items:
        reasons = []
        if emulation is not None and item.get_closest_marker("emulation") is not None:
            reasons.append(emulation)
        for mark in item.iter_markers("root"):
            why = root_unavailable(mark.args[0], tuple(mark.args[1:]))
            if why is not None:
                reasons.append(why)
        if reasons:
            item.add_marker(pytest.mark.skip(reason="; ".join(dict.fromkeys(reasons))))


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """testbed/sweeps/tiny.yaml run for real once per session (2 rates x allreduce / top-k
    0.01 / netsenseml, a Mininet dumbbell: 6 runs) for the tests that read such a sweep.
    They share it, so none may change it: a test that does works on a copy."""
    from typer.testing import CliRunner

    from tests.cli.apps import analysis_app

    root = tmp_path_factory.mktemp("tiny-sweep")
    res = CliRunner().invoke(analysis_app(), ["sweep", "tiny", "--results", str(root)])
    assert res.exit_code == 0, res.output
    assert res.output.count("ok ") >= 6, res.output
    return root


@pytest.fixture(scope="session")
def zygote():
    """A real pre-imported ``workloads.zygote`` for the session (each xdist worker's own),
    closed after it: the tests fork workers and own jobs from it as the testbed does, and
    it is ``launcher.shared()``'s, so every run a test starts in this process forks its
    workers from it, as every run of one ``netsense sweep`` does (a run with none imports
    torch into a zygote of its own: seconds of both cores per run)."""
    import torch._dynamo  # noqa: F401 - see below

    from testbed.orchestration import launcher

    # Importing torch._dynamo (as DDP's constructor does) sets TORCHINDUCTOR_CACHE_DIR in this
    # process; an own job forked later with this process's environment would then differ
    # from the zygote's and start as a fresh interpreter. So it is set before the zygote
    # copies the environment, as it would be in an orchestrator that had built a DDP model.
    with launcher.shared() as shared:
        z = shared if shared is not None else launcher.Zygote()  # NETSENSE_ZYGOTE=0: own
        try:
            z.wait_ready()
            yield z
        finally:
            if z is not shared:
                z.close()


@pytest.fixture(autouse=True)
def _emulated_runs_share_the_zygote(request: pytest.FixtureRequest) -> None:
    """An emulation test's in-process runs fork from the session's zygote (``zygote``)."""
    if request.node.get_closest_marker("emulation") is not None:
        request.getfixturevalue("zygote")
