"""Running an A/B comparison (``netsense ab``): arms of one scenario, interleaved run by run.

An **arm** is a method (``fp16``, ``topk:0.01``, ``netsenseml``, a plug-in ``pkg.mod:Name``)
or ``METHOD@REV``: the method run by the code of git revision REV. Its label is the text as
given; labels are unique, and so are their folder slugs (``testbed.common.names.slug``).

**Interleaving.** For each seed every arm runs once, the order alternating from one seed to
the next (A B, B A, A B ... ; with three arms A B C, C B A ...): the host's load drifts over
a session (other jobs, thermal state, page cache), and a drift then falls on every arm alike
instead of on whichever arm happened to run last. :func:`plan` is that order, a pure
function of the arms, the seeds and where in the session they start.

**Revisions.** A ``@REV`` arm's runs use that revision's code: the revision is checked out
once (``git worktree add --detach``) into a temporary folder under the comparison's folder
and removed when the comparison ends, however it ends (:class:`Checkouts`); each run is
``python -m testbed.cli run`` started in that checkout (cwd and PYTHONPATH), with this
checkout's scenario file (the same scenario text for every arm) and the same ``--set``.
Arms of the code at hand call ``run_scenario`` in this process, as ``netsense run`` does.

Every run is an ordinary run folder, ``<ab folder>/<arm slug>/<scenario>/<run id>``, so
``netsense compare`` and ``report`` read it. Interruptions: ``run_scenario`` raises
``RunInterrupted`` after its teardown; a revision's run is a child process, to which the
signal is passed on and whose teardown is waited for before ``RunInterrupted`` is raised
here too. The statistics are ``testbed.analysis.ab_stats``'s; the command is ``testbed.cli.ab``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netsenseml.methods import MethodSpec
from testbed.common import files
from testbed.common.names import slug
from testbed.config.estimate import estimate
from testbed.config.scenario import MAX_SEED, Scenario, check_method
from testbed.orchestration import dilation
from testbed.orchestration.interrupts import RunInterrupted, SignalGuard
from testbed.orchestration.run import make_run_id, run_scenario
from testbed.orchestration.rundir import RunOutcome

#: The checkout whose code runs the arms without ``@REV`` (and whose git resolves REVs).
REPO = Path(__file__).resolve().parents[2]
#: The most seeds one comparison may ask for (a typo like 0-70000 is refused, not run).
MAX_SEEDS = 1000
#: Seconds a revision's run gets for its teardown after an interruption is passed on.
CHILD_TEARDOWN_S = 120.0


class ABError(ValueError):
    """Bad arms, seeds or revisions; ``str()`` is the one line to show."""


@dataclass(frozen=True)
class Arm:
    """One arm: its label as given, its method, and the revision it runs (None: this code)."""

    label: str
    spec: MethodSpec  # parsed where the arm entered (--arm)
    rev: str | None = None
    commit: str | None = None  # the revision resolved (full hash), once checked

    @property
    def method(self) -> str:
        """The method's text, as the run folders and another revision's command take it."""
        return str(self.spec)

    @property
    def slug(self) -> str:
        return slug(self.label)


def parse_arm(text: str) -> Arm:
    """``METHOD`` or ``METHOD@REV``; ABError naming the arm when malformed."""
    method, at, rev = text.strip().partition("@")
    if not method:
        raise ABError(f"--arm {text!r}: no method (METHOD or METHOD@REV)")
    if at and not rev.strip():
        raise ABError(f"--arm {text!r}: no revision after '@' (METHOD@REV)")
    try:
        spec = check_method(method)
    except ValueError as exc:
        raise ABError(f"--arm {text!r}: {exc}") from None
    return Arm(text.strip(), spec, rev.strip() if at else None)


def parse_arms(texts: list[str], *, least: int = 2) -> list[Arm]:
    """The arms in the order given: at least ``least``, labels and folder slugs unique."""
    if len(texts) < least:
        raise ABError(f"--arm: give at least {least} arms (got {len(texts)})")
    arms = [parse_arm(t) for t in texts]
    seen: dict[str, str] = {}
    for a in arms:
        if a.slug in seen:
            same = seen[a.slug] == a.label
            raise ABError(f"--arm {a.label!r}: " + ("given twice" if same else
                          f"its folder {a.slug!r} is also {seen[a.slug]!r}'s") +
                          "; arm labels must be unique")
        seen[a.slug] = a.label
    return arms


def one_factor(scn: Scenario, arms: list[Arm], *, measure: bool = True
               ) -> tuple[float | None, dict[str, float]]:
    """The dilation factor every arm of a comparison runs at, and each arm's own ``auto``
    factor: the largest of them (each arm's host keeps up at it), or ``None`` where the
    scenario's factor is not ``auto`` (given, or no accelerator: nothing to hold equal).

    Why one: what a congested phase gives the job depends on ``k`` where a kernel timer is
    not dilated (BBR's: int8 on accel-d70 got 1.65x its fair share at k 140 and 3.12x at
    k 450, docs/results-log.md), so arms at their own factors compare two competitions as
    well as two methods. ``measure`` False (a dry run): the estimate's factor, nothing
    timed; otherwise ``testbed.orchestration.dilation.choose`` (its cached measurement, or
    the probe each arm's first run would take anyway). An arm of another revision is given
    this code's factor for its method."""
    acc = getattr(scn, "accelerator", None)
    if acc is None or acc.dilation != "auto":
        return None, {}
    own = {}
    for a in arms:
        try:
            own[a.label] = (dilation.choose(scn, a.spec)[0] if measure
                            else float(estimate(scn, a.spec)["k"]))
        except dilation.DilationError as exc:
            raise ABError(f"--arm {a.label!r}: its dilation factor: {exc}") from None
    return max(own.values()), own


def parse_seeds(text: str) -> list[int]:
    """``0-7``, ``0,2,5`` or both (``0-3,8``): distinct seeds in [0, MAX_SEED], in order."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise ABError(f"--seeds {text!r}: {part!r} is not N or N-M (e.g. 0-7 or 0,2,5)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ABError(f"--seeds {text!r}: {part!r} runs backwards")
        if hi > MAX_SEED:
            raise ABError(f"--seeds {text!r}: {hi} is not in [0, {MAX_SEED}]")
        if len(out) + hi - lo + 1 > MAX_SEEDS:
            raise ABError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
        for s in range(lo, hi + 1):
            if s in out:
                raise ABError(f"--seeds {text!r}: seed {s} given twice")
            out.append(s)
    return out


def plan(arms: list[Any], seeds: list[int], start: int = 0) -> list[tuple[Any, int]]:
    """(arm, seed) in run order: per seed every arm once, the order reversed every other
    seed (module doc); ``start`` is how many seeds the session ran before these, so a seed
    added later continues the alternation."""
    out = []
    for i, s in enumerate(seeds, start):
        out += [(a, s) for a in (arms if i % 2 == 0 else arms[::-1])]
    return out


def next_seeds(used: list[int], count: int = 1) -> list[int]:
    """The ``count`` smallest seeds above every used one (``--until-width`` adds these)."""
    top = max(used, default=-1)
    return list(range(top + 1, top + 1 + count))


def _git(*args: str, cwd: Path = REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=False, timeout=timeout)


def resolve_revisions(arms: list[Arm], repo: Path = REPO) -> list[Arm]:
    """The arms with each ``@REV`` resolved to its commit; ABError naming the arm when the
    revision does not exist (or this code is not a git checkout)."""
    out = []
    for a in arms:
        if a.rev is None:
            out.append(a)
            continue
        if a.rev.startswith("-"):
            raise ABError(f"--arm {a.label!r}: revision {a.rev!r} may not start with '-'")
        try:
            res = _git("rev-parse", "--verify", "--quiet", f"{a.rev}^{{commit}}", cwd=repo)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ABError(f"--arm {a.label!r}: cannot run git: {exc}") from None
        if res.returncode != 0:
            inside = _git("rev-parse", "--git-dir", cwd=repo).returncode == 0
            raise ABError(f"--arm {a.label!r}: no revision {a.rev!r} in {repo}" if inside else
                          f"--arm {a.label!r}: {repo} is not a git checkout; no revisions")
        out.append(Arm(a.label, a.spec, a.rev, res.stdout.strip()))
    return out


@dataclass
class Checkouts:
    """The revisions' checkouts under ``folder`` (module doc), made on entry, removed on exit."""

    folder: Path
    arms: list[Arm]
    repo: Path = REPO
    paths: dict[str, Path] = field(default_factory=dict)  # commit -> checkout

    def __enter__(self) -> Checkouts:
        made = not self.folder.exists()
        try:
            for commit in dict.fromkeys(a.commit for a in self.arms if a.commit):
                self.folder.mkdir(parents=True, exist_ok=True)
                path = Path(tempfile.mkdtemp(prefix=f".rev-{commit[:12]}-", dir=self.folder))
                self.paths[commit] = path
                res = _git("worktree", "add", "--detach", str(path), commit, cwd=self.repo,
                           timeout=300)
                if res.returncode != 0:
                    last = (res.stderr.strip().splitlines() or ["?"])[-1]
                    raise ABError(f"cannot check out {commit[:12]} into {path}: {last}")
        except BaseException:
            self.remove()
            if made:  # a comparison that could not start leaves no folder of its own
                shutil.rmtree(self.folder, ignore_errors=True)
            raise
        return self

    def remove(self) -> None:
        """Every checkout made, gone (git's record of it too); safe to call twice."""
        for path in self.paths.values():
            _git("worktree", "remove", "--force", str(path), cwd=self.repo)
            shutil.rmtree(path, ignore_errors=True)
        if self.paths:
            _git("worktree", "prune", cwd=self.repo)
        self.paths.clear()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def of(self, arm: Arm) -> Path | None:
        return self.paths.get(arm.commit) if arm.commit else None


unique_dir = files.unique_dir


@dataclass
class Runner:
    """Runs one arm at one seed into the comparison's folder ``root``."""

    scenario: Scenario
    scenario_file: Path
    overrides: list[str]
    root: Path
    checkouts: Checkouts

    def arm_dir(self, arm: Arm) -> Path:
        return self.root / arm.slug / self.scenario.name

    def run(self, arm: Arm, seed: int) -> RunOutcome:
        """The run's outcome; raises RunInterrupted (after teardown) when interrupted."""
        checkout = self.checkouts.of(arm)
        if checkout is None:
            run_dir = unique_dir(self.arm_dir(arm) / make_run_id(arm.method, seed))
            try:
                return run_scenario(self.scenario, arm.spec, seed, run_dir, progress=False)
            except BaseException:
                _drop_if_empty(run_dir)
                raise
        return self._run_child(arm, seed, checkout)

    def _run_child(self, arm: Arm, seed: int, checkout: Path) -> RunOutcome:
        where = self.arm_dir(arm)
        where.mkdir(parents=True, exist_ok=True)
        before = {p.name for p in where.iterdir()}
        argv = [sys.executable, "-m", "testbed.cli", "run", str(self.scenario_file.resolve()),
                "-m", arm.method, "-s", str(seed), "-r", str(self.root.resolve() / arm.slug),
                "-q"]
        for item in self.overrides:
            argv += ["--set", item]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        guard = SignalGuard()
        guard.install()
        proc = None
        try:
            proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            _, err = proc.communicate()
        except RunInterrupted as exc:
            guard.protect()  # a second signal must not cut the child's teardown short
            if proc is not None:
                _stop_child(proc, exc.signum)
            raise
        finally:
            guard.restore()
        new = sorted(p for p in where.iterdir() if p.name not in before and p.is_dir())
        summary = (files.read_json(new[-1] / "summary.json") if new else None) or {}
        if proc.returncode in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            raise RunInterrupted(proc.returncode - 128)
        if not summary:
            last = (err.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            return RunOutcome(new[-1] if new else where, "failed",
                              {"status": "failed", "reason": f"{arm.rev}: {last}"})
        return RunOutcome(new[-1], str(summary.get("status")), summary)


def _stop_child(proc: subprocess.Popen, signum: int) -> None:
    """Pass the signal on and wait for the child's teardown (bounded; then kill it)."""
    try:
        proc.send_signal(signum)
        proc.communicate(timeout=CHILD_TEARDOWN_S)  # read on: a full pipe would block it
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    except ProcessLookupError:
        pass


def _drop_if_empty(run_dir: Path) -> None:
    try:
        run_dir.rmdir()  # only an empty folder: a run that wrote its records keeps them
    except OSError:
        pass


@dataclass
class Done:
    """One finished run of the session: which arm, which seed, its outcome, its seconds."""

    arm: Arm
    seed: int
    outcome: RunOutcome
    seconds: float


def throughput_text(summary: dict[str, Any]) -> str:
    thr = summary.get("throughput_samples_per_s")
    return f"{thr:.1f} samples/s" if isinstance(thr, int | float) else ""


def run_plan(runner: Runner, order: list[tuple[Arm, int]], say: Callable[[str], None],
             *, first: int = 1, total: int | None = None,
             show: Callable[[dict[str, Any]], str] = throughput_text) -> Iterator[Done]:
    """Run ``order`` one by one, a line as each starts and ends (``show``: a finished run's
    value of the comparison's metric); yields each finished run. RunInterrupted propagates
    (after the interrupted run's teardown)."""
    total = total or first - 1 + len(order)
    for k, (arm, seed) in enumerate(order, first):
        say(f"[{k}/{total}] start  {arm.label}  seed {seed}")
        t0 = time.monotonic()
        out = runner.run(arm, seed)
        secs = time.monotonic() - t0
        s = out.summary
        if out.status == "ok":
            said = show(s)
            said = f"{said}, " if said else ""
            say(f"[{k}/{total}] ok     {arm.label}  seed {seed}  ({said}{secs:.0f} s)")
        else:
            reason = str(s.get("reason") or "no reason recorded").split(" | ")[-1][:160]
            say(f"[{k}/{total}] failed {arm.label}  seed {seed}  {reason}  ({secs:.0f} s)")
        yield Done(arm, seed, out, secs)
