"""Where a sweep's runs execute: here, one after another (local), or on a Ray cluster.

The sweep (``testbed.orchestration.sweep``) decides which runs are pending, reports progress
and failures and writes nothing but through an executor; an executor takes the pending runs
and yields each one's result as it finishes, with the run folder already in place in the
results tree (including its ``sweep.json``). So skipping, resuming, the status lines and the
exit codes are the same whichever executor ran the runs.

- ``LocalExecutor`` (default): ``run_scenario`` in this process, one run at a time, workers
  forked from one shared pre-imported zygote (``launcher.shared``).
- ``RayExecutor`` (``--executor ray`` or ``ray:ADDRESS``): each run is a Ray task that needs
  one unit of the custom resource ``netsense_host``, which each node declares once
  (``ray start --resources '{"netsense_host": 1}'``), so two emulations never share a
  machine. The task runs the orchestrator in a child process into a node-local staging
  folder (``staged.run_staged``: rootless where the node has no root) and returns the folder
  as a tar; the driver unpacks it beside its place and renames it in (``staged.install_tar``).
  A task whose worker or node dies is retried elsewhere by Ray (``max_retries``); when the
  retries are used up the driver writes the run folder itself: ``summary.json`` with
  ``status: failed`` and the reason (the Ray error's first line), so the next sweep re-runs it.

Every node needs this repository installed (same version) and, for scenarios that replay a
trace file, the file at the same absolute path as on the driver (the resolved scenario names
it by path). config.json records where the run really ran (its node-local staging path in
``worker_argv``, the node in ``host``).

Ray is an optional extra (``pip install -e .[ray]``); nothing imports it until a Ray executor
is asked for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from testbed.common.files import write_json
from testbed.config.sweep import RunSpec, SweepError

RESOURCE = "netsense_host"
DEFAULT_RAY_RETRIES = 1


@dataclass
class Finished:
    """One run's end as the sweep reports it."""

    run: RunSpec
    status: str  # "ok" | "failed"
    summary: dict[str, Any]
    seconds: float
    where: str = ""  # the node that ran it (Ray), "" locally
    refused: bool = False  # the folder belongs to another live run: nothing ran


def sweep_meta(r: RunSpec) -> dict[str, Any]:
    """sweep.json: which sweep, experiment, kind and grid point a run folder belongs to."""
    meta = {"sweep": r.sweep, "experiment": r.experiment, "kind": r.kind,
            "scenario": r.scenario_ref, "params": r.params, "overrides": r.overrides,
            "method": r.method, "seed": r.seed}
    if r.compare_as is not None:
        meta["compare_as"] = r.compare_as
    return meta


Started = Callable[[RunSpec], None]


class LocalExecutor:
    """Runs in this process, in order; ``run_fn`` defaults to ``run_scenario``."""

    name = "local"

    def __init__(self, run_fn: Callable[..., Any] | None = None) -> None:
        self.run_fn = run_fn

    @contextlib.contextmanager
    def session(self) -> Iterator[LocalExecutor]:
        if self.run_fn is not None:
            yield self
            return
        from testbed.orchestration import launcher
        from testbed.orchestration.run import run_scenario

        self.run_fn = run_scenario
        try:
            with launcher.shared():  # one pre-imported worker for all runs (launcher.py)
                yield self
        finally:
            self.run_fn = None

    def execute(self, runs: list[RunSpec], started: Started) -> Iterator[Finished]:
        """KeyboardInterrupt from a run (raised after its teardown) propagates."""
        assert self.run_fn is not None, "use inside session()"
        for r in runs:
            started(r)
            r.run_dir.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            try:
                outcome = self.run_fn(r.scenario, r.method, r.seed, r.run_dir, progress=False,
                                      meta=sweep_meta(r))
            except ValueError as exc:  # the folder is another live run's (or a finished one's)
                yield Finished(r, "failed", {"reason": str(exc)}, 0.0, refused=True)
                continue
            if r.run_dir.is_dir() and not (r.run_dir / "sweep.json").is_file():
                write_json(r.run_dir / "sweep.json", sweep_meta(r))  # a run_fn without meta
            summary = getattr(outcome, "summary", None) or {}
            status = getattr(outcome, "status", None) or summary.get("status", "failed")
            yield Finished(r, status, summary, time.monotonic() - t0)


def _ray_task(scenario: Any, method: str, seed: int, name: str) -> dict[str, Any]:
    """The body of one Ray task (module-level so that Ray pickles it by reference)."""
    from testbed.orchestration.staged import run_staged

    return run_staged(scenario, method, seed, name)


@dataclass
class RayExecutor:
    """Fans the runs out over a Ray cluster, one run per node holding ``netsense_host``."""

    address: str | None = None  # None: RAY_ADDRESS or "auto" (ray.init's own rules)
    retries: int = DEFAULT_RAY_RETRIES
    name: str = "ray"
    _ray: Any = field(default=None, repr=False)

    @contextlib.contextmanager
    def session(self) -> Iterator[RayExecutor]:
        try:
            import ray
        except ImportError:
            raise SweepError("--executor ray: Ray is not installed; pip install -e '.[ray]'"
                             ) from None
        try:
            ray.init(address=self.address or "auto", logging_level="ERROR",
                     log_to_driver=False, configure_logging=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SweepError(f"--executor ray: cannot join the Ray cluster at "
                             f"{self.address or 'auto'}: {first}") from None
        try:
            total = ray.cluster_resources().get(RESOURCE, 0)
            if total < 1:
                raise SweepError(
                    f"--executor ray: no node of the cluster offers the resource {RESOURCE!r}; "
                    f"start each node with ray start --resources '{{\"{RESOURCE}\": 1}}'")
            self._ray = ray
            yield self
        finally:
            self._ray = None
            ray.shutdown()

    def execute(self, runs: list[RunSpec], started: Started) -> Iterator[Finished]:
        """Submit all, yield in completion order; Ctrl-C cancels what is still running."""
        ray = self._ray
        assert ray is not None, "use inside session()"
        from testbed.orchestration.staged import clear_partials, install_tar

        remote = ray.remote(_ray_task).options(
            num_cpus=0, resources={RESOURCE: 1}, max_retries=self.retries,
            retry_exceptions=False)
        pending: dict[Any, tuple[RunSpec, float]] = {}
        for r in runs:
            clear_partials(r.run_dir)
            ref = remote.remote(r.scenario, r.method, r.seed, r.run_dir.name)
            pending[ref] = (r, time.monotonic())
            started(r)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                r, t0 = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    yield self._lost(r, exc, time.monotonic() - t0)
                    continue
                install_tar(res["tar"], r.run_dir, {"sweep.json": sweep_meta(r)})
                yield Finished(r, res["status"], res["summary"], time.monotonic() - t0,
                               res.get("host", ""))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)  # KeyboardInterrupt in the task: its child tears down
            with contextlib.suppress(Exception):
                ray.wait(list(pending), num_returns=len(pending), timeout=60)
            raise

    def _lost(self, r: RunSpec, exc: BaseException, seconds: float) -> Finished:
        """Retries used up (node or worker lost, task error): the folder says failed, why."""
        from testbed.orchestration.staged import install_tar, pack

        first = (str(exc).strip().splitlines() or [""])[0][:300]
        summary = {"status": "failed", "method": r.method, "seed": r.seed,
                   "reason": f"ray: {type(exc).__name__} after {self.retries} "
                             f"retr{'y' if self.retries == 1 else 'ies'}: {first}"}
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            write_json(Path(tmp) / "summary.json", summary)
            install_tar(pack(Path(tmp)), r.run_dir, {"sweep.json": sweep_meta(r)})
        return Finished(r, "failed", summary, seconds)


def parse_executor(text: str, retries: int = DEFAULT_RAY_RETRIES) -> LocalExecutor | RayExecutor:
    """``local``, ``ray`` or ``ray:ADDRESS`` (e.g. ``ray:10.0.0.5:6379``)."""
    if text == "local":
        return LocalExecutor()
    if text == "ray" or text.startswith("ray:"):
        addr = text[4:] or None
        if retries < 0:
            raise SweepError("--retries: must be 0 or more")
        return RayExecutor(address=addr, retries=retries)
    raise SweepError(f"--executor: unknown executor {text!r}; allowed: local, ray, ray:ADDRESS")
