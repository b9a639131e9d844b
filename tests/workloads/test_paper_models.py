"""The paper's three models at their real sizes (issue 41): parameter counts.

ResNet-18 and GPT-2 small are built for real (~0.1 s and ~2 s); VGG-16 on the meta device
(no memory, ~0.05 s against ~1.5 s built), and every model's torch-free count
(``workloads.sizes``, which the sweep's estimate reads) against the built module.
"""

from __future__ import annotations

import pytest
import torch

from workloads import registry, sizes
from workloads.models import build_model


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("classes", "expected"), [(1000, 11_689_512), (100, 11_227_812)])
def test_resnet18_imagenet_is_torchvisions_size(classes, expected):
    m = build_model("resnet18-imagenet", input_shape=(3, 224, 224), num_classes=classes)
    assert count(m) == expected == sizes.resnet18_imagenet_params(classes)
    assert m.conv1.kernel_size == (7, 7) and m.conv1.stride == (2, 2)  # the ImageNet stem
    assert m(torch.randn(1, 3, 64, 64)).shape == (1, classes)


@pytest.mark.parametrize(("classes", "expected"), [(1000, 138_357_544), (100, 134_670_244)])
def test_vgg16_is_torchvisions_configuration_d(classes, expected):
    with torch.device("meta"):
        m = build_model("vgg16", input_shape=(3, 224, 224), num_classes=classes)
    assert count(m) == expected == sizes.vgg16_params(classes)
    assert m.classifier[0].in_features == 512 * 7 * 7 and m.classifier[3].out_features == 4096


def test_gpt2_small_is_124m_with_tied_embeddings():
    m = build_model("gpt2-small", input_shape=(128,), num_classes=50257)
    assert count(m) == 124_439_808 == sizes.gpt2_params()
    assert m.out.weight is m.tok.weight and len(m.blocks) == 12 and m.blocks[0].heads == 12
    assert m(torch.randint(50257, (1, 8))).shape == (1, 8, 50257)


def test_reduced_sizes_take_the_same_code_path_and_counts_agree():
    for name, shape, classes, knobs, fn in (
        ("resnet18-imagenet", (3, 32, 32), 100, {"width": 8}, sizes.resnet18_imagenet_params),
        ("vgg16", (3, 32, 32), 100, {"width": 8, "hidden": 64}, sizes.vgg16_params),
        ("gpt2-small", (16,), 500, {"layers": 2, "d_model": 64, "heads": 2, "positions": 32},
         sizes.gpt2_params),
    ):
        m = build_model(name, input_shape=shape, num_classes=classes, **knobs)
        assert count(m) == fn(classes, **knobs), name


def test_registry_counts_without_torch_for_the_sweep_estimate():
    assert registry.param_count("vgg16", {}, "cifar100-224-synth") == 134_670_244
    assert registry.param_count("gpt2-small", {}, "gpt2-synth") == 124_439_808
    assert registry.param_count("resnet18", {}, "cifar100-synth") is None  # not declared
