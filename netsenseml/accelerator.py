"""The emulated accelerator: each training step's compute takes the time a profile says,
not what the host's CPU takes; the gradients stay real.

Why: on a shared CPU the host's load sets a run's numbers as much as the network does, and
a CPU step's compute:communication ratio is not a training cluster's. The field's answer
is profiled compute (dPRO, Proteus, SimAI: per-iteration or per-op times measured once on
the real device) with real communication. Here the worker still computes its real gradients
(convergence stays real), and a :class:`Pacer` holds each part of the step back until its
profiled time on the virtual clock (``netsenseml.clock``), so the host only has to be fast
enough to finish each part within its slot:

* the forward pass ends at ``forward_s`` after the step starts;
* bucket ``i`` of DDP's backward is released to its collective at
  ``forward_s + backward_s * f_i`` (``f_i``: the share of the gradient's elements in
  buckets ``0..i``, DDP's backward order; a profile may give its own list), plus the codec
  time of the buckets before it, so the overlap of communication with the backward pass
  follows the profile, not the CPU;
* the codec work in the hook (compress + decompress of a bucket) takes
  ``codec_s_per_mb[level] x`` the bucket's fp32 megabytes (0 where the profile names no
  cost for that level: free on the device);
* the optimizer step ends ``optimizer_s`` after the backward pass returned (which includes
  waiting for the last collective); its real work shares one slot with the next step's
  forward pass (the device runs them back to back): the next forward is due
  ``optimizer_s + forward_s`` after the backward returned, so a host whose optimizer is
  slow but whose forward is quick keeps up (the optimizer of a CPU host is often 20-100x
  a GPU's where its forward is 10x). A step that did not follow straight on (an evaluation
  or the time limit's agreement came between) starts its own slot.

A part whose real work did not fit its slot is *late*; a step with a part later than the
tolerance is an **overrun**, counted per step (``pace_overrun`` in the step statistics)
and summed by the testbed, which marks a run degraded past a stated share. Deadlines are
not shifted by lateness: an overrun step is wrong by its lateness and flagged, never hidden.

A profile (JSON, :func:`load`) holds entries measured on a real device (``netsense profile``
writes one) or taken from published figures; each entry says which. ``Timing.from_step``
is the other form: a given step time (30 % forward, 60 % backward, 10 % optimizer).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netsenseml import clock

FORMAT = 1
#: Where the shipped profiles live; a profile name is a file ``<name>.json`` here.
PROFILES_DIR = Path(__file__).with_name("profiles")
ORIGINS = ("measured", "published", "assumed")
#: A part is late when its real work ends this share of the profiled step past its slot
#: (with a floor: the sleep and wake-up of the host is ~0.1 ms real).
TOLERANCE_SHARE = 0.02
TOLERANCE_FLOOR_REAL_S = 2e-4


class ProfileError(ValueError):
    """A malformed or unmatched profile; ``str()`` is one line naming the field."""


@dataclass(frozen=True)
class Timing:
    """The profiled times of one model's step (virtual seconds)."""

    forward_s: float
    backward_s: float
    optimizer_s: float = 0.0
    codec_s_per_mb: dict[str, float] = field(default_factory=dict)
    buckets: tuple[float, ...] | None = None  # cumulative share of backward per bucket
    origin: str = "assumed"
    note: str = ""

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s

    @classmethod
    def from_step(cls, step_s: float, codec_s_per_mb: dict[str, float] | None = None
                  ) -> Timing:
        """A given step time: a third forward, two thirds backward (the usual split of a
        backward pass that computes two gradients per forward product)."""
        if not (isinstance(step_s, int | float) and math.isfinite(step_s) and step_s > 0):
            raise ProfileError(f"accelerator step time: a positive number expected, got {step_s!r}")
        return cls(0.3 * step_s, 0.6 * step_s, 0.1 * step_s, dict(codec_s_per_mb or {}),
                   origin="assumed", note=f"given step time {step_s * 1e3:g} ms")

    def codec_s(self, level: str, nbytes: int) -> float:
        return self.codec_s_per_mb.get(level, 0.0) * nbytes / 1e6

    @classmethod
    def from_json(cls, data: Any, where: str = "timing") -> Timing:
        """The inverse of :meth:`to_json` (a run's recorded timing); ProfileError (one line)."""
        return _timing(data, where)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"forward_s": self.forward_s, "backward_s": self.backward_s,
                               "optimizer_s": self.optimizer_s,
                               "codec_s_per_mb": dict(self.codec_s_per_mb),
                               "origin": self.origin, "note": self.note}
        if self.buckets is not None:
            out["buckets"] = list(self.buckets)
        return out


@dataclass(frozen=True)
class Entry:
    """One profiled (model, knobs, batch size) of a profile."""

    model: str
    knobs: dict[str, Any]
    batch_size: int
    timing: Timing

    def matches(self, model: str, knobs: dict[str, Any], batch_size: int) -> bool:
        return (self.model == model and self.batch_size == batch_size
                and all(knobs.get(k) == v for k, v in self.knobs.items()))

    def label(self) -> str:
        knobs = ",".join(f"{k}={v}" for k, v in sorted(self.knobs.items()))
        return f"{self.model}[{knobs}] batch {self.batch_size}"


@dataclass(frozen=True)
class Profile:
    """A device's step times for the models measured on it."""

    name: str
    device: str
    source: str
    entries: tuple[Entry, ...]

    def timing(self, model: str, knobs: dict[str, Any], batch_size: int) -> Timing:
        for e in self.entries:
            if e.matches(model, knobs, batch_size):
                return e.timing
        have = "; ".join(e.label() for e in self.entries) or "none"
        raise ProfileError(f"accelerator profile {self.name!r} has no entry for {model} "
                           f"{_knob_text(knobs)} batch {batch_size}; it has: {have}")


def _knob_text(knobs: dict[str, Any]) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in sorted(knobs.items())) + "]"


def _num(d: dict[str, Any], key: str, where: str, *, required: bool = True,
         default: float = 0.0, positive: bool = False) -> float:
    if key not in d:
        if required:
            raise ProfileError(f"{where}.{key}: missing (a number of seconds >= 0)")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 \
            or (positive and v == 0):
        raise ProfileError(f"{where}.{key}: a number {'> 0' if positive else '>= 0'} "
                           f"expected, got {v!r}")
    return float(v)


def _timing(d: Any, where: str) -> Timing:
    if not isinstance(d, dict):
        raise ProfileError(f"{where}: an object expected")
    known = {"model", "knobs", "batch_size", "forward_s", "backward_s", "optimizer_s",
             "codec_s_per_mb", "buckets", "origin", "note"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ProfileError(f"{where}.{unknown[0]}: unknown field; allowed: {', '.join(sorted(known))}")
    codec = d.get("codec_s_per_mb", {})
    if not isinstance(codec, dict):
        raise ProfileError(f"{where}.codec_s_per_mb: an object of level -> seconds per MB expected")
    codec = {str(k): _num(codec, k, f"{where}.codec_s_per_mb") for k in codec}
    buckets = d.get("buckets")
    if buckets is not None:
        ok = isinstance(buckets, list) and buckets and all(
            isinstance(b, int | float) and not isinstance(b, bool) and 0 < b <= 1 for b in buckets)
        if not ok or list(buckets) != sorted(buckets):
            raise ProfileError(f"{where}.buckets: an increasing list of shares in (0, 1] expected")
        buckets = tuple(float(b) for b in buckets)
    origin = d.get("origin", "assumed")
    if origin not in ORIGINS:
        raise ProfileError(f"{where}.origin: one of {', '.join(ORIGINS)}, got {origin!r}")
    return Timing(_num(d, "forward_s", where, positive=True), _num(d, "backward_s", where, positive=True),
                  _num(d, "optimizer_s", where, required=False), codec, buckets, origin,
                  str(d.get("note", "")))


def parse(data: Any, name: str) -> Profile:
    """A profile from its JSON object; ProfileError (one line) when malformed."""
    if not isinstance(data, dict):
        raise ProfileError(f"accelerator profile {name!r}: a JSON object expected")
    if data.get("format") != FORMAT:
        raise ProfileError(f"accelerator profile {name!r}: format: {FORMAT} expected, got "
                           f"{data.get('format')!r}")
    for key in ("device", "source"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ProfileError(f"accelerator profile {name!r}: {key}: a non-empty text expected")
    entries = data.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ProfileError(f"accelerator profile {name!r}: entries: a non-empty list expected")
    out = []
    for i, e in enumerate(entries):
        where = f"accelerator profile {name!r}: entries[{i}]"
        timing = _timing(e, where)
        if not isinstance(e.get("model"), str) or not e["model"]:
            raise ProfileError(f"{where}.model: a model name expected")
        knobs = e.get("knobs", {})
        if not isinstance(knobs, dict):
            raise ProfileError(f"{where}.knobs: an object expected")
        batch = e.get("batch_size")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise ProfileError(f"{where}.batch_size: a positive integer expected, got {batch!r}")
        out.append(Entry(e["model"], dict(knobs), batch, timing))
    return Profile(str(data.get("name") or name), data["device"], data["source"], tuple(out))


def names() -> list[str]:
    """The shipped profiles' names."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def resolve(spec: str, base: Path | None = None) -> Path:
    """The file of a profile given by shipped name or path (relative to ``base``)."""
    if "/" not in spec and not spec.endswith(".json"):
        path = PROFILES_DIR / f"{spec}.json"
        if not path.is_file():
            raise ProfileError(f"accelerator profile {spec!r}: no such shipped profile; "
                               f"shipped: {', '.join(names()) or 'none'} (or give a path)")
        return path
    path = Path(spec)
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise ProfileError(f"accelerator profile {spec!r}: no such file")
    return path


def load(spec: str, base: Path | None = None) -> Profile:
    """A profile by shipped name or path; ProfileError (one line) when missing or malformed."""
    path = resolve(spec, base)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"accelerator profile {spec!r}: not readable JSON ({exc})") from None
    return parse(data, path.stem)


# ----------------------------------------------------------------------------- pacing


class Pacer:
    """Holds each part of a step back until its profiled time (module docstring).

    One per rank. The worker calls :meth:`start_step`, :meth:`forward_done`,
    :meth:`backward_done` and :meth:`optimizer_done`; the hook calls :meth:`bucket` when
    DDP hands it a bucket and :meth:`codec` after compressing it. :meth:`pop` returns the
    step's statistics (virtual seconds): ``pace_wait_s`` (held back), ``pace_late_s``
    (the latest part's lateness), ``pace_overrun`` (1 when that exceeds the tolerance).
    """

    def __init__(self, timing: Timing, total_elements: int, own_job: bool = False) -> None:
        """``own_job``: the hook paces a job it does not run (``netsenseml.job``): the
        step's start is taken at bucket 0 (:meth:`start_own_step`), and the worker's calls
        (start_step, forward_done, backward_done, optimizer_done) never come."""
        self.timing = timing
        self.own_job = own_job
        self._anchor_at_bucket = False
        self.total = max(int(total_elements), 1)
        self.tolerance = max(TOLERANCE_SHARE * timing.step_s,
                             clock.current().virtual_s(TOLERANCE_FLOOR_REAL_S))
        self._t0: float | None = None
        self._seen = 0
        self._bucket_i = 0
        self._codec_shift = 0.0
        self._backward_end: float | None = None
        self._optimizer_due: float | None = None  # when the last optimizer step was due
        self._wait = 0.0
        self._late = 0.0
        self._late_at = ""
        self.steps = 0
        self.overruns = 0

    def _hold(self, deadline: float, part: str) -> None:
        late = clock.now() - deadline
        if late > self._late:
            self._late, self._late_at = late, part
        self._wait += clock.sleep_until(deadline)

    def start_step(self, follows: bool = True) -> None:
        """A step begins. ``follows``: straight after the previous step's optimizer (the
        two share a slot: the module docstring); False after anything else (an evaluation)."""
        due, self._optimizer_due = self._optimizer_due, None
        self._t0 = due if follows and due is not None else clock.now()
        self._seen = self._bucket_i = 0
        self._codec_shift = 0.0
        self._backward_end = None

    def start_own_step(self, previous_backward_end: float | None) -> None:
        """An own job's bucket 0 arrived (``netsenseml.job``, "emulated accelerator"): the
        step's virtual start is the previous backward's end (its last collective's
        completion) plus the optimizer's profiled time, so bucket 0 is held until the
        optimizer, data loading and forward pass together took ``optimizer_s +
        forward_s``; the first step has no previous end and is anchored at bucket 0 itself
        (nothing held)."""
        self.start_step()
        if previous_backward_end is None:
            self._anchor_at_bucket = True
        else:
            self._t0 = previous_backward_end + self.timing.optimizer_s

    def forward_done(self) -> None:
        if self._t0 is not None:
            self._hold(self._t0 + self.timing.forward_s, "optimizer and forward")

    def bucket(self, elements: int, not_before: float | None = None) -> None:
        """Bucket ``i`` (in DDP's order) is ready: release it at its profiled time.
        ``not_before``: when the network let it go at the earliest (a hook that sends a
        bucket only after the previous one's collectives completed): the time spent waiting
        for that is the network's, not the host's lateness."""
        if self._t0 is None:
            return
        self._seen += int(elements)
        listed = self.timing.buckets
        if listed is not None and self._bucket_i < len(listed):
            share = listed[self._bucket_i]
        else:
            share = min(self._seen / self.total, 1.0)
        self._bucket_i += 1
        t = self.timing
        if self._anchor_at_bucket:  # an own job's first step: bucket 0 is due now
            self._anchor_at_bucket = False
            self._t0 = clock.now() - t.forward_s - t.backward_s * share
        part = "backward" if not (self.own_job and self._bucket_i == 1) else \
            "optimizer, data and forward (an own job: one slot)"
        due = self._t0 + t.forward_s + t.backward_s * share + self._codec_shift
        self._hold(due if not_before is None else max(due, not_before), part)

    def codec(self, level: str, nbytes: int, started: float) -> None:
        """The codec work of a bucket began at ``started`` (virtual): it takes its profiled
        time, which also delays the rest of the backward pass (one stream, as in the hook)."""
        cost = self.timing.codec_s(level, nbytes)
        if self._t0 is None:
            return
        self._codec_shift += cost
        self._hold(started + cost, "codec")

    def backward_done(self) -> None:
        self._backward_end = clock.now()

    def optimizer_done(self) -> None:
        """Held to its profiled end when the host was quicker; when it was slower, the next
        step's forward (whose slot it shares) judges it, not this call."""
        if self._t0 is None:
            return
        end = self._backward_end if self._backward_end is not None else clock.now()
        self._optimizer_due = end + self.timing.optimizer_s
        self._wait += clock.sleep_until(self._optimizer_due)

    def pop(self) -> dict[str, Any]:
        """The step's pacing statistics; resets them."""
        overrun = int(self._late > self.tolerance)
        self.steps += 1
        self.overruns += overrun
        out: dict[str, Any] = {"pace_wait_s": self._wait, "pace_late_s": max(self._late, 0.0),
                               "pace_overrun": overrun}
        if overrun:
            out["pace_late_part"] = self._late_at
        self._wait = self._late = 0.0
        self._late_at = ""
        self._t0 = None
        return out
