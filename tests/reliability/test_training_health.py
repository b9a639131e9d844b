"""Training health: codec plug-ins that silently break training, and the checks that catch
them. Real gloo workers (``python -m workloads.train``) on loopback, the codecs as a user's
module in a temporary folder (PYTHONPATH), nothing of the package edited.

* an identity codec whose payload is a *view* of its input: the hook used to zero the
  bucket and then decode into that same memory (every gradient zero, accuracy at chance,
  status ok); now the payload is copied and the run learns like plain allreduce;
* a codec producing NaN: the worker ends with ``diverged at step 1``;
* a codec that sends zeros: ``not learning`` after three steps of an exactly zero gradient;
* the orchestrator's trend check (``testbed.orchestration.health.learning``) on the
  records of real runs: the learning one passes, the frozen one is flagged.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.orchestration import health
from tests.workloads.ranks import TINY, outputs, read_log, run_ranks

MODULE = "nst_bad_codecs"
CODE = '''
import torch
from netsenseml.compress.base import Payload


class ViewIdentity:
    """The obvious identity codec: the payload is the input itself (a view)."""
    name = "viewid"
    lossy = False
    reduction = "allreduce"

    def compress(self, tensor, seed=None):
        return Payload((tensor.reshape(-1),), tensor.shape, tensor.dtype, kept=tensor.numel())

    def decompress(self, payload):
        return payload.tensors[0].view(payload.shape)

    def accumulate(self, payload, out):
        out.add_(payload.tensors[0])


class NaNCodec(ViewIdentity):
    name = "nan"

    def accumulate(self, payload, out):
        out.add_(payload.tensors[0] * float("nan"))


class ZeroCodec(ViewIdentity):
    name = "zero"

    def compress(self, tensor, seed=None):
        return Payload((torch.zeros(tensor.numel()),), tensor.shape, tensor.dtype, kept=0)
'''


@pytest.fixture
def codecs(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(CODE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(folder), os.environ.get("PYTHONPATH", "")]))
    return folder


def _train(tmp: Path, method: str, steps: int = 40, expect: int = 0) -> list[list[dict]]:
    tmp.mkdir(parents=True, exist_ok=True)
    codes = run_ranks(tmp, [*TINY["mlp"], "--method", method, "--steps", str(steps),
                            "--batch-size", "32", "--seed", "0", "--eval-every", "8",
                            "--lr", "0.1"], timeout=120)
    assert codes == [expect, expect], outputs(tmp)
    return [read_log(tmp, r) for r in range(2)]


def _summary(recs: list[dict]) -> dict:
    return next(r for r in reversed(recs) if r["kind"] == "summary")


def test_a_codec_whose_payload_aliases_its_input_still_trains(tmp_path, codecs):
    logs = _train(tmp_path / "alias", f"{MODULE}:ViewIdentity")
    verdict = health.learning(dict(enumerate(logs)))
    assert verdict is not None and verdict["ok"], verdict
    acc = _summary(logs[0])["final_accuracy"]
    assert acc > 0.6, acc  # chance is 0.1: the gradients reached the model


def test_a_nan_codec_ends_the_run_as_diverged_at_its_step(tmp_path, codecs):
    logs = _train(tmp_path / "nan", f"{MODULE}:NaNCodec", expect=1)
    for recs in logs:
        summary = _summary(recs)
        assert summary["status"] == "failed"
        assert summary["error"].startswith("diverged at step 1: gradient norm nan"), summary
        assert not [r for r in recs if r["kind"] == "step"]  # the NaN step is not a step


def test_a_zero_codec_is_not_learning_and_the_trend_check_agrees(tmp_path, codecs):
    logs = _train(tmp_path / "zero", f"{MODULE}:ZeroCodec", expect=1)
    for recs in logs:
        assert _summary(recs)["error"].startswith(
            "not learning: the reduced gradient is exactly zero at steps 1-3"), _summary(recs)
    # The trend check, on records where the model never moved (a frozen run that got
    # past the worker's own check, e.g. a hook adding noise): flagged, with the losses.
    frozen = [[dict(r, loss=2.3) if r["kind"] in ("step", "eval") else r for r in recs]
              + [{"kind": "eval", "step": 10 * i, "loss": 2.3, "accuracy": 0.1}
                 for i in range(1, health.K + 1)] for recs in logs]
    verdict = health.learning(dict(enumerate(frozen)))
    assert verdict is not None and not verdict["ok"] and "never fell" in verdict["why"]


def test_a_slow_start_is_judged_by_the_whole_run() -> None:
    """DGC 0.01 on the crossover workload (results/crossover, d50 seed 0): its held-out loss
    fell 1.8 % in the first three evaluations (momentum correction's warm-up) and the run
    reached the target at step 360; judged on those three alone it was failed as not
    learning. The losses are that run's, every 20 steps."""
    evals = [5.6924, 5.6541, 5.5969, 5.5138, 5.4024, 5.2535, 5.0595, 4.8011, 4.4551, 3.9668,
             3.301, 2.4446, 1.5835, 0.993, 0.6724, 0.4715, 0.3266, 0.2495]
    recs = [{"kind": "step", "step": i, "loss": 5.7} for i in range(1, 6)]
    recs += [{"kind": "eval", "step": 20 * (i + 1), "loss": v} for i, v in enumerate(evals)]
    verdict = health.learning({0: recs})
    assert verdict is not None and verdict["ok"], verdict
    # the same start with the fall stopping there is still not learning
    stalled = recs[:5] + [dict(r, loss=max(r["loss"], 5.5969)) for r in recs[5:]]
    verdict = health.learning({0: stalled})
    assert verdict is not None and not verdict["ok"] and "never fell" in verdict["why"]
