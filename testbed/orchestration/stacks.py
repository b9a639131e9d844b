"""Where a hung worker is: each live rank's Python stack at the run's deadline.

Why: a rank that stops answering is killed at the deadline, and until now the reason said
how far its records went ("its last finished step is 255, inside a step or a collective
since"), which sent a user looking inside the training loop when the job had finished and
hung in ``dist.destroy_process_group()``. Every worker the testbed starts registers
``faulthandler`` on ``netsenseml.lifecycle.STACK_SIGNAL`` with its own file
(``NETSENSE_STACK_FILE`` = ``workers/rank<N>.stack``: the zygote's child, the job runner
``workloads.job_runner``, ``hooks.register``). At the deadline :func:`dump` sends the signal to
every rank still running that catches it (a process that does not, ``SigCgt`` in
``/proc/<pid>/status``, would be killed by it instead, and is left alone), waits for the
files, and :func:`where` reads the main thread's frames: the innermost one and, when that is
library code (torch, the standard library, netsenseml), the innermost frame of the job's own
code that led there. The files stay in the run folder (``workers/rank<N>.stack``); one
nobody wrote to is removed (:func:`drop_empty`).

faulthandler writes the threads newest first (the interpreter's list of thread states grows
at its head), so the main thread is the last block; each block lists its frames innermost
first.
"""

from __future__ import annotations

import os
import re
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from netsenseml.lifecycle import ENV_STACK_FILE, STACK_SIGNAL

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Folders whose frames are library code, not the job's (the interpreter's own, the
#: installed packages, this checkout's netsenseml and workloads).
PYTHON_DIRS = tuple(sorted({str(Path(p).resolve()) for k, p in sysconfig.get_paths().items()
                            if k in ("stdlib", "platstdlib", "purelib", "platlib")},
                           key=len, reverse=True))
LIBRARY_DIRS = (*PYTHON_DIRS, str(REPO_ROOT / "netsenseml"), str(REPO_ROOT / "workloads"))
#: Names of decorators' inner functions, which say nothing of what the job called (torch's
#: collectives are wrapped by ``c10d_logger``'s ``wrapper``).
WRAPPERS = ("wrapper", "_wrapper", "inner", "_fn", "fn", "decorate_context", "wrapped")
#: Seconds :func:`dump` waits for the ranks' files to be written.
WAIT_S = 3.0

_FRAME_RE = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')


def stack_file(workers_dir: Path, rank: int) -> Path:
    return workers_dir / f"rank{rank}.stack"


def env(workers_dir: Path, rank: int) -> dict[str, str]:
    """The variable a rank's process reads to register the dump (module docstring)."""
    return {ENV_STACK_FILE: str(stack_file(workers_dir, rank))}


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def library(self) -> bool:
        return self.file.startswith("<frozen") or any(
            self.file.startswith(d + os.sep) for d in LIBRARY_DIRS)

    def short(self, job_dir: str | None = None) -> str:
        """``func (file:line)`` with the file relative to what it belongs to."""
        name = self.file
        for base in (job_dir, *PYTHON_DIRS, str(REPO_ROOT)):
            if base and name.startswith(base + os.sep):
                name = name[len(base) + 1:]
                break
        return f"{self.func} ({name}:{self.line})"


def parse(text: str) -> list[list[Frame]]:
    """One faulthandler dump as its threads' frames (innermost first), newest thread
    first, so the main thread is the last list (module docstring)."""
    blocks = re.split(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):\s*$",
                      text, flags=re.M)
    threads: list[list[Frame]] = []
    for block in blocks[1:]:
        frames = []
        for line in block.splitlines():
            m = _FRAME_RE.match(line)
            if m:
                frames.append(Frame(m["file"], int(m["line"]), m["func"]))
        threads.append(frames)
    return threads


def where(frames: list[Frame], job_dir: str | None = None) -> str:
    """``in FUNC (FILE:LINE)`` of the innermost frame; when that is library code, also the
    library function the job called (``via NAME``) and the job's own frame that called it
    (``from FUNC (FILE:LINE)``)."""
    if not frames:
        return ""
    top = frames[0]
    text = f"in {top.short(job_dir)}"
    if top.library:
        i = next((i for i, f in enumerate(frames) if not f.library), None)
        if i is not None:
            called = frames[i - 1].func
            if i > 1 and called not in WRAPPERS:
                text += f" via {called}"
            text += f" from {frames[i].short(job_dir)}"
    return text


def _catches(pid: int, signum: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def dump(pids: dict[int, int], workers_dir: Path, wait_s: float = WAIT_S) -> dict[int, list[Frame]]:
    """Ask each rank (``{rank: pid}``) that catches the signal for its stack; the main
    thread's frames per rank that answered within ``wait_s``."""
    asked: dict[int, int] = {}
    for rank, pid in pids.items():
        path = stack_file(workers_dir, rank)
        if not _catches(pid, STACK_SIGNAL):
            continue
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            continue
        asked[rank] = size
    out: dict[int, list[Frame]] = {}
    end = time.monotonic() + wait_s
    while asked and time.monotonic() < end:
        time.sleep(0.05)
        for rank, size in list(asked.items()):
            path = stack_file(workers_dir, rank)
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if len(data) <= size:
                continue
            time.sleep(0.05)  # the handler writes a thread at a time; let it finish
            text = path.read_bytes()[size:].decode(errors="replace")
            threads = [t for t in parse(text) if t]
            if threads:
                out[rank] = threads[-1]
            del asked[rank]
    return out


def drop_empty(workers_dir: Path) -> None:
    """Remove the stack files nobody wrote to (every rank opens its own at start)."""
    for path in workers_dir.glob("rank*.stack"):
        try:
            if path.stat().st_size == 0:
                path.unlink()
        except OSError:
            pass
