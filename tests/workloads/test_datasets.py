"""Datasets and models in-process: determinism, splits, CIFAR reading, size knobs, learnability."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from workloads.datasets import (
    MIXTURE_CLASSES,
    MIXTURE_FEATURES,
    DatasetError,
    GaussianMixture,
    SyntheticImages,
    load_dataset,
)
from workloads.models import build_model, mlp_params, mlp_width_for_grad_mb, model_info

torch.set_num_threads(1)  # the machine's cores are shared with the worker processes of other tests


def test_digits_split_is_fixed_and_disjoint() -> None:
    a, b = load_dataset("digits"), load_dataset("digits")
    assert len(a.train) + len(a.test) == 1797 and len(a.test) == 359
    assert torch.equal(a.test.tensors[0], b.test.tensors[0])
    train = {tuple(x.flatten().tolist()) for x in a.train.tensors[0]}
    overlap = sum(tuple(x.flatten().tolist()) in train for x in a.test.tensors[0])
    assert overlap < 10  # digits has a few duplicate images, the split itself is disjoint
    assert sorted(set(a.train.tensors[1].tolist())) == list(range(10))


def test_synthetic_is_deterministic_and_splits_differ() -> None:
    d = load_dataset("synthetic")
    x1, y1 = d.train[123]
    x2, y2 = SyntheticImages(10_000, 0)[123]
    assert torch.equal(x1, x2) and y1 == y2 and x1.shape == (3, 32, 32)
    assert not torch.equal(d.test[0][0], d.train[0][0])


def test_synthetic_is_learnable() -> None:
    # A small MLP keeps this test at a few seconds; the ResNet figures are in datasets.py.
    torch.manual_seed(0)
    d = load_dataset("synthetic")
    model = build_model("mlp", input_shape=d.input_shape, num_classes=10, width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(d.train, batch_size=64, shuffle=True)
    for step, (x, y) in enumerate(loader):
        if step == 40:
            break
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    xs, ys = zip(*(d.test[i] for i in range(300)), strict=True)
    with torch.no_grad():
        acc = (model(torch.stack(xs)).argmax(1) == torch.tensor(ys)).float().mean().item()
    assert acc > 0.5, acc  # chance is 0.1


def test_mixture_is_deterministic_balanced_and_as_documented() -> None:
    d = load_dataset("mixture")
    assert (len(d.train), len(d.test), d.input_shape, d.num_classes, d.kind) == (
        200_000, 10_000, (MIXTURE_FEATURES,), MIXTURE_CLASSES, "vector")
    fresh = GaussianMixture(200_000, 0)
    for i in (0, 7, 199_999):  # same index, same sample, from an independent instance
        (x1, y1), (x2, y2) = d.train[i], fresh[i]
        assert torch.equal(x1, x2) and y1 == y2 == i % MIXTURE_CLASSES
    assert not torch.equal(d.test[0][0], d.train[0][0])
    assert torch.equal(d.test.means, d.train.means)  # one mixture, two disjoint index ranges
    xs, ys = zip(*(d.test[i] for i in range(3000)), strict=True)
    x, y = torch.stack(xs), torch.tensor(ys)
    assert torch.bincount(y, minlength=MIXTURE_CLASSES).tolist() == [10] * MIXTURE_CLASSES
    noise = x - d.test.means[y]
    assert abs(noise.std().item() - 1.0) < 0.02 and abs(noise.mean().item()) < 0.02
    assert abs(d.test.means.std().item() - 0.45) < 0.01
    # the documented Bayes accuracy: nearest class mean classifies (almost) all samples
    assert (torch.cdist(x, d.test.means).argmin(1) == y).float().mean().item() > 0.999


def test_mixture_model_sizes_are_as_documented() -> None:
    assert mlp_params(256, 300, 2048) == 5_337_388  # workloads/README.md: 5.34 M, 21.3 MB
    assert mlp_params(256, 300, 3072) == 11_151_660  # the >= 10 M one: 11.15 M, 44.6 MB
    m = build_model("mlp", input_shape=(256,), num_classes=300, width=64)
    assert model_info(m).params == mlp_params(256, 300, 64)


def test_text_windows_shift_by_one_and_split_at_90_percent() -> None:
    d = load_dataset("text", context=32)
    x, y = d.train[5]
    assert x.shape == y.shape == (32,) and torch.equal(x[1:], y[:-1])
    assert d.kind == "lm" and 40 < d.num_classes < 100
    text = (Path(__file__).resolve().parents[2] / "workloads/data/corpus.txt").read_text()
    assert len(text.encode()) < 2_000_000


def _write_cifar10(root: Path, n: int) -> None:
    """Files in the layout and pickle format of the python CIFAR-10 release."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 b"labels": rng.integers(0, 10, n).tolist()}
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)


def test_cifar_reads_python_pickles_and_names_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="--data-dir"):
        load_dataset("cifar10")
    with pytest.raises(DatasetError, match="data_batch_1"):
        load_dataset("cifar10", data_dir=tmp_path)
    _write_cifar10(tmp_path, 20)
    d = load_dataset("cifar10", data_dir=tmp_path)
    assert len(d.train) == 100 and len(d.test) == 20 and d.num_classes == 10
    x, y = d.train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= int(y) < 10


@pytest.mark.parametrize("mb", [1, 50])
def test_mlp_width_sets_gradient_size(mb: int) -> None:
    width = mlp_width_for_grad_mb(mb, 64, 10)
    grad_mb = model_info(build_model("mlp", input_shape=(1, 8, 8), num_classes=10,
                                     width=width)).grad_bytes / 1e6
    assert mb <= grad_mb < mb * 1.05


def test_models_accept_their_inputs() -> None:
    cnn = build_model("resnet18", input_shape=(3, 32, 32), num_classes=100, width=4)
    assert cnn(torch.zeros(2, 3, 32, 32)).shape == (2, 100)
    gpt = build_model("gpt", input_shape=(16,), num_classes=50, layers=1, d_model=32)
    assert gpt(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 50)
    full = model_info(build_model("resnet18", input_shape=(3, 32, 32), num_classes=10, width=64))
    assert 11.0e6 < full.params < 11.3e6  # the real ResNet-18 (CIFAR variant)


def test_stop_check_schedule_is_sparse_and_lands_near_the_limit():
    """--time-limit: ranks compare clocks rarely, more often near the end, never late by much."""
    from workloads.train import STOP_CHECK_MAX_STEPS, next_stop_check

    assert next_stop_check(10, 10.0, 10.0) is None
    assert next_stop_check(1, 0.01, 10.0) == 1 + STOP_CHECK_MAX_STEPS  # far from the end: capped
    assert next_stop_check(100, 9.95, 10.0) == 101  # a quarter of ~0.5 step left: next step
    # Simulated run at 20 ms per step: few checks, and it stops within a step of the limit.
    step, check, checks = 0, 1, 0
    while True:
        step += 1
        if step >= check:
            checks += 1
            check = next_stop_check(step, step * 0.02, 10.0)
            if check is None:
                break
    assert 10.0 <= step * 0.02 <= 10.0 + 0.02
    assert checks < step / 10


def test_resnet20_is_the_cifar_resnet20() -> None:
    m = build_model("resnet20", input_shape=(3, 32, 32), num_classes=10, width=16)
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    # He et al. 2016: 0.27 M parameters; 19 conv layers + the classifier
    assert 0.26e6 < model_info(m).params < 0.28e6
    convs = [c for c in m.modules() if isinstance(c, torch.nn.Conv2d) and c.kernel_size == (3, 3)]
    assert len(convs) == 19


def test_cifar100_synth_is_cifar_shaped_deterministic_and_has_100_classes() -> None:
    a, b = load_dataset("cifar100-synth"), load_dataset("cifar100-synth")
    assert (len(a.train), len(a.test), a.input_shape, a.num_classes) == (
        50_000, 10_000, (3, 32, 32), 100)
    x, y = a.train[12345]
    assert x.shape == (3, 32, 32) and torch.equal(x, b.train[12345][0]) and y == 45
    assert not torch.equal(a.train[0][0], a.test[0][0])  # held-out samples are others
    assert sorted({a.train[i][1] for i in range(200)}) == list(range(100))
    t = torch.from_numpy(a.train.templates.reshape(100, -1))
    corr = torch.corrcoef(t)
    assert corr[~torch.eye(100, dtype=bool)].abs().max() < 0.9  # 100 distinct classes
