"""A scenario's ``accelerator`` block: the emulated accelerator and the time dilation.

    accelerator: {profile: a100-published, dilation: auto}     # a shipped profile, k chosen
    accelerator: {step_ms: 2.0, dilation: 8}                    # a given step time, k = 8

``profile`` (a shipped name of ``netsenseml.accelerator``, or a JSON path relative to the
scenario file) or ``step_ms`` says how long each step computes on the emulated device;
the workers still compute real gradients and are held to those times
(``netsenseml.accelerator``). ``dilation`` is the time-dilation factor ``k``
(``netsenseml.clock``): link rates and cross-traffic caps are divided by ``k``, every
scheduled time, deadline and timeout multiplied by ``k``, and the records come back in
virtual time. ``auto`` takes the least ``k`` at which the host's real work fits its slots
with ``margin`` to spare, from a short measurement of this host before the run
(``testbed.orchestration.dilation``). ``max_overrun`` is the share of the training time that
the host's lateness (work that did not fit its slot) may add before the run is marked
degraded (``testbed.common.metrics.overruns``'s ``late_share``).

Without the block a run is *native*: the host's CPU sets the compute time, and the run's
records say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from netsenseml import accelerator
from testbed.common.schema import StrictModel

MAX_DILATION = 1000.0


class Accelerator(StrictModel):
    """The emulated accelerator of every worker, and the run's time dilation."""

    profile: str | None = Field(None, min_length=1, max_length=4096)
    """A shipped profile's name (netsenseml/profiles) or a profile JSON's path (relative to the scenario file); its entry for the workload's model, knobs and batch size is used."""
    step_ms: float | None = Field(None, gt=0, le=600_000)
    """A given step time in milliseconds (30 % forward, 60 % backward, 10 % optimizer), instead of a profile."""
    dilation: float | Literal["auto"] = "auto"
    """Time-dilation factor k >= 1, or auto (the least k at which this host keeps up with margin). Default auto."""
    margin: float = Field(2.5, ge=1.0, le=10.0)
    """With dilation auto: the host's measured real work times this must fit the slot (the rest absorbs the host's jitter: its scheduler, the shaper's and the samplers' work). Default 2.5."""
    max_overrun: float = Field(0.01, ge=0.0, le=1.0)
    """Share of steps that may overrun their slot before the run is marked degraded. Default 0.01."""

    @field_validator("dilation")
    @classmethod
    def _dilation(cls, v: float | str) -> float | str:
        if v != "auto" and not 1.0 <= float(v) <= MAX_DILATION:
            raise ValueError(f"a number in [1, {MAX_DILATION:g}] or auto, got {v!r}")
        return v

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        base = (info.context or {}).get("base_dir") or Path.cwd()
        try:
            path = accelerator.resolve(v, Path(base))
            accelerator.load(str(path))
        except accelerator.ProfileError as exc:
            raise ValueError(str(exc)) from None
        return v if "/" not in v and not v.endswith(".json") else str(path.resolve())

    @model_validator(mode="after")
    def _one_source(self) -> Accelerator:
        if (self.profile is None) == (self.step_ms is None):
            raise ValueError("give exactly one of profile or step_ms")
        return self

    def timing(self, model: str, knobs: dict, batch_size: int) -> accelerator.Timing:
        """The step timing of this workload on the emulated device (ProfileError if the
        profile has no entry for it)."""
        if self.step_ms is not None:
            return accelerator.Timing.from_step(self.step_ms / 1e3)
        assert self.profile is not None
        return accelerator.load(self.profile).timing(model, knobs, batch_size)

    def worker_args(self) -> list[str]:
        """The worker's flags for this accelerator (the factor is added by the run)."""
        if self.step_ms is not None:
            return ["--step-ms", f"{self.step_ms:g}"]
        assert self.profile is not None
        return ["--accelerator", self.profile]
