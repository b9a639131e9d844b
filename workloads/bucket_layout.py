"""DDP's bucket layout of a registered model, printed as JSON: ``python -m
workloads.bucket_layout MODEL DATASET [--knobs JSON] [--context N]``.

Named for what it prints, not "probe" (issue 51): a probe is the policy's one-step try of
another level (``netsenseml.policy.Prober``).

Why a child process: ``netsense advise`` (``testbed.simulation.advise``) predicts a job's
step from the bytes each DDP bucket sends and when the backward releases it, and the layout
that says so is DDP's own (``workloads.payload.layout``: the model on torch's meta device,
one meta backward, torch's bucket assignment). That needs torch, which the testbed never
imports, so the testbed runs this module as a child (about 2 s, most of it torch's import)
and reads one JSON line: the trainable elements, and per bucket in firing order its
elements and the shapes of its parameters (PowerSGD's P and Q sizes follow from them).
Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from workloads import payload, registry
from workloads.datasets import DatasetError, load_dataset
from workloads.models import build_model

#: Per-sample input shapes of datasets with a fixed class count, without loading one (a
#: synthetic dataset's loader generates its samples); others are loaded; ``lm``: the context.
IMAGE_SHAPES = {"cifar100-224-synth": (3, 224, 224), "cifar100-224": (3, 224, 224),
                "cifar100-synth": (3, 32, 32), "cifar100": (3, 32, 32), "cifar10": (3, 32, 32),
                "synthetic": (3, 32, 32), "digits": (1, 8, 8), "mixture": (256,)}


def layout_of(model: str, dataset: str, knobs: dict[str, Any], context: int) -> dict[str, Any]:
    """The layout of ``model`` on ``dataset`` (module docstring)."""
    entry = registry.dataset_entry(dataset)
    classes = entry.classes
    if entry.kind == "lm":
        shape: tuple[int, ...] = (context,)
    elif dataset in IMAGE_SHAPES and classes is not None:
        shape = IMAGE_SHAPES[dataset]
    else:  # the loader says (a file-backed dataset needs its files)
        data = load_dataset(dataset, context=context)
        shape, classes = tuple(data.input_shape), data.num_classes
    assert classes is not None
    with torch.device("meta"):
        net = build_model(model, input_shape=shape, num_classes=classes, **knobs)

    def loss(m: torch.nn.Module) -> torch.Tensor:
        if entry.kind == "lm":
            x = torch.zeros(1, *shape, dtype=torch.long, device="meta")
        else:
            x = torch.empty(1, *shape, device="meta")
        out = m(x)
        out = out if isinstance(out, torch.Tensor) else out[0]
        return out.float().sum()

    lay = payload.layout(net, loss)
    return {"elements": lay.elements,
            "buckets": [{"elements": n, "shapes": [list(lay.shapes[i]) for i in b]}
                        for n, b in zip(lay.bucket_elements(), lay.buckets, strict=True)]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m workloads.bucket_layout")
    ap.add_argument("model")
    ap.add_argument("dataset")
    ap.add_argument("--knobs", default="{}", help="the model's knobs as a JSON object")
    ap.add_argument("--context", type=int, default=128)
    args = ap.parse_args(argv)
    try:
        knobs = json.loads(args.knobs)
        print(json.dumps(layout_of(args.model, args.dataset, knobs, args.context)))
    except (registry.RegistryError, DatasetError, TypeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: layout of {args.model!r}: {first}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
