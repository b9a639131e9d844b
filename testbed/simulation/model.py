"""The per-step model of data-parallel training: compute, codec, and one collective per step.

Why a model and not more emulation: one 2-core machine emulates 8 workers at most, and a
sweep of 64-1024 workers does not fit on any one machine. The step time of synchronous data
parallelism is, to first order,

    step = compute + codec + comm
    comm = L x alpha + V x 8 / (eta x share x R)

for one collective per step (DDP's buckets are summed into one), where

- V is the volume each worker *sends* over its access link during the collective:
  ring allreduce of B bytes: V = 2 (n-1)/n x B, in L = 2 (n-1) sequential messages;
  ring allgather of B bytes per rank: V = (n-1) x B, in L = n-1 messages;
- B is the method's payload per worker and step (``bytes_sent`` in steps.csv: what the hook
  hands to torch.distributed), or, for a prediction, the parameter count x 4 x the method's
  wire factor from the method registry (``netsenseml.methods``: fp16 0.5, int8 0.25,
  top-k r: 2r for values + indices);
- R is the access link rate, ``share`` the max-min fair share left by ``competing`` bulk
  flows on the same link (1 / (1 + competing)), ``eta`` the goodput fraction of the rate
  (TCP/IP headers, gloo framing, HTB burst behaviour), ``alpha`` the per-message latency
  (propagation, queueing, gloo and kernel overheads);
- compute and codec are per-worker times measured on the target hardware; on one emulating
  machine n workers share ``cores`` CPUs, so compute is stretched by max(1, n / cores)
  (``oversubscription``; 1 on a real cluster).

``alpha`` and ``eta`` are calibrated from this testbed's own run folders
(``testbed.simulation.calibrate``). ``FlowModel`` is the analytic flow-level backend; a
SimGrid backend (its flow-level network model, ``simgrid`` on PyPI) would implement the same
``comm_s`` from the same inputs, for topologies where links are shared in ways this closed
form does not capture (over-subscribed leaf-spine uplinks, many jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

COLLECTIVES = ("allreduce", "allgather")


def volume_and_messages(collective: str, n: int, payload_bytes: float) -> tuple[float, int]:
    """Bytes each worker sends and the number of sequential messages of one collective."""
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    if n == 1:
        return 0.0, 0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n * payload_bytes, 2 * (n - 1)
    if collective == "allgather":
        return float(n - 1) * payload_bytes, n - 1
    raise ValueError(f"collective: unknown {collective!r}; allowed: {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class LinkCalibration:
    """Per-message latency (s) and goodput fraction of the link rate; fitted, not guessed."""

    alpha_s: float
    eta: float


@dataclass(frozen=True)
class StepInput:
    """Everything one step's prediction depends on."""

    n: int
    collective: str
    payload_bytes: float  # per worker and step
    rate_mbit: float
    compute_s: float  # per worker, uncontended
    codec_s: float = 0.0
    competing: int = 0  # bulk flows sharing each worker's access link
    cores: int | None = None  # CPUs of one emulating machine; None: one machine per worker
    batch_size: int = 1


@dataclass(frozen=True)
class StepPrediction:
    compute_s: float
    codec_s: float
    comm_s: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.codec_s + self.comm_s


def oversubscription(n: int, cores: int | None) -> float:
    return 1.0 if not cores else max(1.0, n / cores)


class FlowModel:
    """Analytic flow-level backend: closed-form ring collectives, max-min fair sharing."""

    name = "analytic"

    def __init__(self, link: LinkCalibration) -> None:
        self.link = link

    def comm_s(self, x: StepInput) -> float:
        volume, msgs = volume_and_messages(x.collective, x.n, x.payload_bytes)
        share = 1.0 / (1 + max(0, x.competing))
        rate_bps = x.rate_mbit * 1e6 * self.link.eta * share
        return msgs * self.link.alpha_s + volume * 8.0 / rate_bps

    def predict(self, x: StepInput) -> StepPrediction:
        f = oversubscription(x.n, x.cores)
        return StepPrediction(x.compute_s * f, x.codec_s * f, self.comm_s(x))

    def throughput(self, x: StepInput) -> float:
        """Global samples per second."""
        return x.n * x.batch_size / self.predict(x).step_s
