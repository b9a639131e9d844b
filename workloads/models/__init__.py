"""Built-in models (one module each) and the registry-driven factory the worker uses.

Why a module per model: adding a built-in is one file with a factory
``factory(input_shape, num_classes, **knobs) -> nn.Module`` plus one ``register_model``
line in ``workloads.registry``; a user's model needs no file here at all
(``--model package.module:factory``). Sizes and reasons are in each module's docstring:
``mlp`` (gradient-size knob), ``resnet`` (the paper's CNN), ``gpt`` (the paper's LM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from workloads.models.gpt import GPT
from workloads.models.mlp import MLP, build_mlp, mlp_params, mlp_width_for_grad_mb
from workloads.models.resnet import ResNet18
from workloads.registry import RegistryError, model_entry

__all__ = [
    "GPT", "MLP", "ModelInfo", "ResNet18", "build_mlp", "build_model", "mlp_params",
    "mlp_width_for_grad_mb", "model_info",
]


@dataclass(frozen=True)
class ModelInfo:
    """What the worker prints and logs about a built model."""

    params: int
    grad_bytes: int  # bytes of fp32 gradient DDP must reduce each step (trainable params)


def model_info(model: nn.Module) -> ModelInfo:
    params = sum(p.numel() for p in model.parameters())
    grad = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return ModelInfo(params=params, grad_bytes=grad)


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int,
                **knobs: Any) -> nn.Module:
    """Build model ``name`` (registered or ``package.module:factory``) for data of
    ``input_shape`` (per sample) and ``num_classes``; ``knobs`` override its defaults."""
    entry = model_entry(name)
    model = entry.build_factory()(tuple(input_shape), num_classes,
                                  **entry.resolve_knobs(knobs))
    if not isinstance(model, nn.Module):
        raise RegistryError(f"model {name!r}: factory returned {type(model).__name__}, "
                            f"not a torch.nn.Module")
    return model
