"""``resnet18-imagenet`` and ``vgg16``: the paper's two CNNs as torchvision defines them.

The authors' prototype trains torchvision's ``resnet18`` and ``vgg16`` (ImageNet-pretrained)
on CIFAR-100 resized to 224 px. Written here, not imported: PyPI's torchvision does not
import beside the torch this project pins, and no pretrained weights can be fetched on the
testbed's hosts, so both are **initialised** as torchvision initialises them (He normal,
fan-out, for convolutions; BatchNorm weight 1, bias 0; VGG's linear layers N(0, 0.01)). The
module and parameter names are torchvision's (``conv1``, ``layer1.0.conv1``, ``fc``;
``features.0``, ``classifier.6``), so a user's torchvision state_dict loads with
``load_state_dict`` where one is at hand (the last layer's shape follows ``num_classes``).

- ``ResNet18ImageNet``: 7x7 stride-2 stem + 3x3 stride-2 max-pool, four stages of two
  BasicBlocks (64/128/256/512 channels, strides 1/2/2/2, 1x1 convolution + BatchNorm on the
  shortcut where the shape changes), global average pool, linear head. 11,689,512 parameters
  with 1000 classes, 11,227,812 with 100 (44.9 MB of fp32 gradient). ``width`` scales every
  stage (64 = torchvision's; the tests use a small one through the same code path).
- ``VGG16``: configuration D of Simonyan & Zisserman (13 3x3 convolutions with ReLU, five
  max-pools, no BatchNorm: torchvision's ``vgg16``), adaptive 7x7 average pool, classifier
  25088 -> 4096 -> 4096 -> classes with ReLU and dropout 0.5. 138,357,544 parameters with
  1000 classes, 134,670,244 with 100 (538.7 MB of fp32 gradient; 553 MB with 1000).
  ``width`` scales the convolutions (64 = torchvision's), ``hidden`` the classifier (4096).

Both take any image size: the adaptive pools make the head independent of it (224 px is
what the paper trains at; the parameter count does not depend on it).
"""

from __future__ import annotations

import torch
from torch import nn

from workloads.models.resnet import _image_channels
from workloads.sizes import VGG16_CFG, resnet18_imagenet_params, vgg16_params

__all__ = ["VGG16", "ResNet18ImageNet", "build_resnet18_imagenet", "build_vgg16",
           "resnet18_imagenet_params", "vgg16_params"]


class BasicBlock(nn.Module):
    """torchvision's BasicBlock (expansion 1)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18ImageNet(nn.Module):
    """torchvision's ``resnet18`` (ImageNet stem); ``width`` = first-stage channels."""

    def __init__(self, in_channels: int = 3, num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        w = width
        self.conv1 = nn.Conv2d(in_channels, w, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = w
        for i, (cout, stride) in enumerate(((w, 1), (2 * w, 2), (4 * w, 2), (8 * w, 2))):
            self.add_module(f"layer{i + 1}", nn.Sequential(BasicBlock(cin, cout, stride),
                                                           BasicBlock(cout, cout, 1)))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class VGG16(nn.Module):
    """torchvision's ``vgg16`` (no BatchNorm); ``width`` scales the convolutions, ``hidden``
    the classifier."""

    def __init__(self, in_channels: int = 3, num_classes: int = 1000, width: int = 64,
                 hidden: int = 4096, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = in_channels
        for v in VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                cout = int(v) * width // 64
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
                cin = cout
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(cin * 7 * 7, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build_resnet18_imagenet(input_shape: tuple[int, ...], num_classes: int,
                            width: int = 64) -> ResNet18ImageNet:
    return ResNet18ImageNet(_image_channels("resnet18-imagenet", input_shape), num_classes,
                            width)


def build_vgg16(input_shape: tuple[int, ...], num_classes: int, width: int = 64,
                hidden: int = 4096) -> VGG16:
    return VGG16(_image_channels("vgg16", input_shape), num_classes, width, hidden)
