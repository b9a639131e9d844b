"""Parameter counts of the paper's models, from their knobs alone (no torch).

Why torch-free: the sweep's time estimate (``netsense sweep --dry-run``,
``testbed.config.estimate``) needs each run's gradient size to estimate its communication,
and the orchestrator never imports torch. The model modules count with these same functions
(``tests/workloads/test_paper_models.py`` checks them against the built models).
"""

from __future__ import annotations

#: VGG configuration D (vgg16): channels in units of ``width / 64``, "M" a max-pool.
VGG16_CFG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                    512, 512, 512, "M", 512, 512, 512, "M")


def resnet18_imagenet_params(num_classes: int, width: int = 64, in_channels: int = 3) -> int:
    """Parameters of ``workloads.models.imagenet.ResNet18ImageNet``."""
    w = width
    n = in_channels * w * 49 + 2 * w  # stem conv + bn
    cin = w
    for cout, stride in ((w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2)):
        for c_in, s in ((cin, stride), (cout, 1)):
            n += c_in * cout * 9 + 2 * cout + cout * cout * 9 + 2 * cout
            if s != 1 or c_in != cout:
                n += c_in * cout + 2 * cout
        cin = cout
    return n + cin * num_classes + num_classes


def vgg16_params(num_classes: int, width: int = 64, hidden: int = 4096,
                 in_channels: int = 3) -> int:
    """Parameters of ``workloads.models.imagenet.VGG16``."""
    n, cin = 0, in_channels
    for v in VGG16_CFG:
        if v != "M":
            cout = int(v) * width // 64
            n += cin * cout * 9 + cout
            cin = cout
    return (n + cin * 49 * hidden + hidden + hidden * hidden + hidden
            + hidden * num_classes + num_classes)


def gpt2_params(num_classes: int = 50257, layers: int = 12, d_model: int = 768,
                heads: int = 12, positions: int = 1024) -> int:
    """Parameters of ``workloads.models.gpt.build_gpt2`` (tied embeddings; ``num_classes``
    is the vocabulary; ``heads`` changes no count)."""
    d = d_model
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return num_classes * d + positions * d + layers * block + 2 * d


#: The ``mixture`` dataset's features and classes (``workloads.datasets``, which imports
#: torch): the MLP's size on it, for the estimate.
MIXTURE_SHAPE = (256, 300)


def mlp_params(in_features: int, num_classes: int, width: int = 1024) -> int:
    """Parameters of ``workloads.models.mlp.MLP`` (three linear layers with biases)."""
    return (in_features * width + width + width * width + width + width * num_classes
            + num_classes)
