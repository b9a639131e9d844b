"""The time-dilation factor of one run as a value: the one place a factor is applied.

Under time dilation by ``k`` (Gupta et al., NSDI'06) one virtual second lasts ``k`` real
seconds and a link of ``r`` virtual Mbit/s runs at ``r / k`` real Mbit/s. Everything that
crosses between the two (the workers' clock, ``netsenseml.clock``; the orchestrator's
timeline, deadlines, samplers and records; the emulated links' rates; the simulation of a
dilated run) asks a :class:`Dilation` for the conversion instead of multiplying or
dividing by ``k`` itself, so the direction of each conversion is named where it is used.

The methods do plain arithmetic (no rounding, no conversion to ``float``), so they take
numbers and numpy arrays alike and give the same bits as the expression they replace.
``k`` stays the number it was given: ``config.json``'s ``accelerator.dilation`` is ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The variable that carries the factor to a process the testbed starts (an own job, a
#: probe): ``netsenseml.clock`` reads it at import.
ENV = "NETSENSE_DILATION"


@dataclass(frozen=True)
class Dilation:
    """Time dilation by ``k >= 1`` (1: none)."""

    k: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int | float) or not self.k >= 1.0:
            raise ValueError(f"dilation: a number >= 1 expected, got {self.k!r}")

    @classmethod
    def of(cls, value: Dilation | float) -> Dilation:
        """``value`` as a dilation: a :class:`Dilation` as it is, a number as its factor."""
        return value if isinstance(value, Dilation) else cls(value)

    @classmethod
    def parse(cls, text: str, source: str = ENV) -> Dilation:
        """The factor written as text (an environment variable; empty: none)."""
        text = text.strip()
        if not text:
            return cls()
        try:
            return cls(float(text))
        except ValueError:
            raise ValueError(f"{source}: a number >= 1 expected, got {text!r}") from None

    @property
    def dilated(self) -> bool:
        """Whether time is dilated at all (``k > 1``)."""
        return self.k > 1

    # time: one virtual second lasts k real seconds
    def real_s(self, virtual_s: Any) -> Any:
        """Real seconds that ``virtual_s`` virtual seconds last."""
        return virtual_s * self.k

    def virtual_s(self, real_s: Any) -> Any:
        """Virtual seconds that ``real_s`` real seconds are."""
        return real_s / self.k

    # rates: a virtual rate runs k times slower in real time
    def real_mbit(self, virtual_mbit: Any) -> Any:
        """The real rate (Mbit/s) a link of ``virtual_mbit`` runs at."""
        return virtual_mbit / self.k

    def virtual_mbit(self, real_mbit: Any) -> Any:
        """The virtual rate (Mbit/s) of a link that runs at ``real_mbit``."""
        return real_mbit * self.k

    # counts per second (drops, changes): k times as many per virtual second
    def virtual_per_s(self, per_real_s: Any) -> Any:
        """A count per real second, per virtual second."""
        return per_real_s * self.k

    def real_per_s(self, per_virtual_s: Any) -> Any:
        """A count per virtual second, per real second."""
        return per_virtual_s / self.k

    def arg(self) -> str:
        """The factor as a command-line argument (the worker's ``--dilation``)."""
        return f"{self.k:g}"

    def env(self) -> str:
        """The factor as :data:`ENV`'s value."""
        return repr(float(self.k))


NONE = Dilation()
