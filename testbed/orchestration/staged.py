"""One run executed away from the sweep's driver: in a child process, into a staging folder.

Why a child process and a staging folder: on a Ray node (``executors.RayExecutor``) the
results tree is not the node's disk, so the run writes its folder into a node-local staging
folder, and the task ships that folder back as a tar in its return value; the driver then
installs it into the results tree atomically (``install_tar``). The run itself happens in a
child process (``python -m testbed.orchestration.staged SPEC RUN_DIR``) so that

- a node without root re-executes that child in its own user + network namespace (the
  rootless mode, ``testbed.emulation.rootless``), exactly as ``netsense run`` does;
- when the Ray worker holding the task dies (node lost, worker killed, task cancelled), the
  child gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``), tears its emulation down like any
  interrupted run (interfaces by prefix, processes by PID) and removes its staging folder,
  since no-one is left to collect it. The child runs in a session of its own because Ray
  SIGKILLs the process group of a dead worker, which would cut that teardown short.

The staging folder lies under ``$NETSENSE_STAGING_DIR`` or ``<tmp>/netsense-staging-<uid>``;
``task.json`` in it names the task's PID and the child's (tests kill the former).
"""

from __future__ import annotations

import ctypes
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.common.files import read_json, write_json

STAGING_ENV = "NETSENSE_STAGING_DIR"
PR_SET_PDEATHSIG = 1
EXIT_NO_EMULATION = 3


def staging_root() -> Path:
    env = os.environ.get(STAGING_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / f"netsense-staging-{os.getuid()}"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the task's worker process dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_staged(scenario: Any, method: str, seed: int, name: str,
               timeout_s: float | None = None) -> dict[str, Any]:
    """Run one (scenario, method, seed) in a child; return status, summary, the folder as tar.

    Never raises for a failed run (its folder says why, as with ``run_scenario``); raises
    KeyboardInterrupt after the child's teardown when the task was cancelled.
    """
    root = staging_root()
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    run_dir = stage / name
    spec = stage / "spec.pkl"
    spec.write_bytes(pickle.dumps({"scenario": scenario, "method": method, "seed": seed}))
    t0 = time.monotonic()
    # Output to a file, not a pipe: after our death the child still tears down and logs,
    # and a write to a pipe nobody reads would kill it half-way (BrokenPipeError).
    with open(stage / "child.log", "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "testbed.orchestration.staged", str(spec), str(run_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            # Its own process group: Ray (2.60) SIGKILLs a dead worker's whole group, which
            # would leave the emulation half torn down; the child tears down on SIGTERM.
            start_new_session=True,
        )
    write_json(stage / "task.json", {"task_pid": os.getpid(), "child_pid": child.pid,
                                     "host": os.uname().nodename})
    try:
        child.wait(timeout=timeout_s)
    except KeyboardInterrupt:  # ray.cancel: the child tears down, then we go
        child.send_signal(signal.SIGINT)
        child.wait()
        shutil.rmtree(stage, ignore_errors=True)
        raise
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGTERM)
        child.wait()
    try:
        summary = read_json(run_dir / "summary.json") or {}
        if not summary or summary.get("status") == "running":  # died before its summary
            out = (stage / "child.log").read_bytes()
            tail = out.decode(errors="replace").strip().splitlines()[-3:]
            summary = {"status": "failed", "method": method, "seed": seed,
                       "reason": f"staged run exited {child.returncode} without a summary: "
                                 + " | ".join(tail)}
            write_json(run_dir / "summary.json", summary)
        return {"status": summary.get("status", "failed"), "summary": summary,
                "tar": pack(run_dir), "host": os.uname().nodename,
                "seconds": time.monotonic() - t0}
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def pack(folder: Path) -> bytes:
    """The folder as an uncompressed tar whose members are relative to it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(folder.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(folder)), recursive=False)
    return buf.getvalue()


def incoming_path(run_dir: Path) -> Path:
    """Where a shipped folder is unpacked before it is renamed into place (same parent)."""
    return run_dir.parent / f".{run_dir.name}.incoming"


def replaced_path(run_dir: Path) -> Path:
    return run_dir.parent / f".{run_dir.name}.replaced"


def clear_partials(run_dir: Path) -> None:
    """Remove what an install interrupted half-way left beside ``run_dir`` (names are fixed)."""
    for p in (incoming_path(run_dir), replaced_path(run_dir)):
        if p.exists():
            shutil.rmtree(p)


def install_tar(data: bytes, run_dir: Path, extra: dict[str, Any]) -> None:
    """Unpack a shipped run folder beside ``run_dir``, add files, and rename it into place.

    ``extra`` maps file names to JSON objects written into the folder first (sweep.json), so
    the folder appears complete at once; a reader sees the old folder, no folder, or the new
    one, never a partial one. An earlier failed attempt in ``run_dir`` is replaced.
    """
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    clear_partials(run_dir)
    inc = incoming_path(run_dir)
    inc.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(inc, filter="data")  # refuses absolute paths, '..', devices
        for fname, obj in extra.items():
            write_json(inc / fname, obj)
    except BaseException:
        shutil.rmtree(inc, ignore_errors=True)
        raise
    old = replaced_path(run_dir)
    if run_dir.exists():
        os.rename(run_dir, old)
    os.rename(inc, run_dir)
    if old.exists():
        shutil.rmtree(old)


def _child(spec_path: Path, run_dir: Path) -> int:
    """The child's body: rootless re-exec where needed, then one run into ``run_dir``."""
    signal.signal(signal.SIGTERM, _raise_interrupt)  # until run_scenario installs its own
    try:
        return _child_run(spec_path, run_dir)
    except KeyboardInterrupt:  # RunInterrupted too: torn down already
        if not _parent_alive():  # our task is gone (PDEATHSIG) or cancelled: nobody collects
            shutil.rmtree(spec_path.parent, ignore_errors=True)
        return 130


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _child_run(spec_path: Path, run_dir: Path) -> int:
    from testbed.emulation import rootless

    mode = rootless.choose_mode()
    if mode.name == "none":
        write_json(run_dir / "summary.json", {
            "status": "failed", "reason": f"node cannot emulate: {mode.detail}; {mode.fix}"})
        return EXIT_NO_EMULATION
    if mode.name == "rootless" and not rootless.in_namespace():
        from testbed.emulation import leftovers

        state_dir = leftovers.default_state_dir()
        leftovers.ensure_own_dir(state_dir)
        env = dict(os.environ, **{rootless.MARKER_ENV: "1",
                                  "NETSENSE_STATE_DIR": str(state_dir)})
        os.execvpe(rootless.UNSHARE[0], [*rootless.UNSHARE, "--", sys.executable, "-m",
                                         "testbed.orchestration.staged", str(spec_path),
                                         str(run_dir)], env)
    if rootless.in_namespace():
        rootless.prepare_namespace()
    from testbed.orchestration.run import run_scenario

    spec = pickle.loads(spec_path.read_bytes())
    out = run_scenario(spec["scenario"], spec["method"], spec["seed"], run_dir, progress=False)
    return 0 if out.status == "ok" else 1


def _parent_alive() -> bool:
    """Is the task that started us still our parent (there to collect the folder)?

    Compared with our parent PID, not probed with kill(0): a killed task stays a zombie
    until the raylet reaps it, and a zombie answers kill(0).
    """
    info = read_json(Path(sys.argv[1]).parent / "task.json") or {}
    return isinstance(info.get("task_pid"), int) and os.getppid() == info["task_pid"]


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1]), Path(sys.argv[2])))
