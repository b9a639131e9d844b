"""The models and datasets the worker can train: one table each, importable without torch.

Why one registry: the worker (``--model``/``--dataset``), the scenario schema (validation
before anything is started), the benchmarks and the docs all need the same names and
properties. With this table, adding a built-in model is one module with a factory plus one
``register_model`` line below; nothing else in the package names models.

Why torch-free: the scenario schema validates names in the orchestrator, which must not pay
torch's import (~2 s) to refuse a typo. Entries therefore hold *import paths*
(``"workloads.models.mlp:build_mlp"``); the factory or loader is imported only when a
worker builds the model (:func:`load_object`).

**Model factories** have one signature, built-in or not::

    factory(input_shape: tuple[int, ...], num_classes: int, **knobs) -> torch.nn.Module

``input_shape`` is one sample's shape (``(C, H, W)`` for images, ``(features,)`` for
vectors, ``(context,)`` for text); ``num_classes`` is the number of classes (the vocabulary
size for text). ``knobs`` are the model's size settings (``width``, ``layers``, ...). A
classifier returns logits ``(batch, num_classes)``; a language model (datasets of kind
``lm``) returns ``(batch, context, vocab)``.

**Plug-ins**: wherever a model name is accepted, ``package.module:attr`` names a model by
import path (like ``mn --custom`` or torch's hooks); the module must be importable by the
workers (on ``PYTHONPATH``). ``attr`` is either a factory (it gets the defaults of
:class:`ModelEntry`: SGD with momentum 0.9, lr 0.05, any dataset kind, knobs only from
``--model-args``) or a :class:`ModelEntry` whose ``factory`` is the callable or a path,
to declare other defaults. The worked example is in workloads/README.md.

**Dataset kinds** decide which models fit which data and how the loss is taken:
``image`` (``(C, H, W)`` floats, one class per sample), ``vector`` (``(features,)``
floats, one class per sample), ``lm`` (``(context,)`` token ids, one class per position).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

KINDS: tuple[str, ...] = ("image", "vector", "lm")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw")
# package.module:attr -- dotted identifiers, one colon
PLUGIN_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


class RegistryError(ValueError):
    """A name that cannot be resolved; ``str()`` is the one line shown to the user."""


@dataclass(frozen=True)
class ModelEntry:
    """A model: its factory and the defaults the worker trains it with.

    ``knobs`` maps each size knob the factory takes to its default; the worker's shorthand
    flags (``--width``, ``--layers``, ``--d-model``) and ``--model-args`` override them.
    ``momentum`` applies to SGD only; ``weight_decay`` to both optimizers.
    """

    name: str
    factory: str | Callable[..., Any]
    kinds: tuple[str, ...] = KINDS
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    knobs: Mapping[str, int | float | str | bool] = field(default_factory=dict)
    summary: str = ""
    #: ``package.module:function`` counting the parameters without torch,
    #: ``function(num_classes, **knobs) -> int`` (the sweep's time estimate); None: unknown
    params: str | None = None

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise RegistryError(f"model {self.name}: kinds {bad or '()'} not in {KINDS}")
        if self.optimizer not in OPTIMIZERS:
            raise RegistryError(f"model {self.name}: optimizer {self.optimizer!r} not in "
                                f"{OPTIMIZERS}")
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))

    def resolve_knobs(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Default knobs overridden by ``given``. A knob the entry does not declare is
        refused, unless it declares none (a plain plug-in factory: it decides itself)."""
        if self.knobs:
            unknown = sorted(set(given) - set(self.knobs))
            if unknown:
                raise RegistryError(f"model {self.name} has no knob {', '.join(unknown)}; "
                                    f"its knobs: {', '.join(self.knobs)}")
        return {**self.knobs, **given}

    def build_factory(self) -> Callable[..., Any]:
        return load_object(self.factory) if isinstance(self.factory, str) else self.factory


@dataclass(frozen=True)
class DatasetEntry:
    """A dataset: its loader and what the worker needs to know before loading it.

    ``loader(data_dir=..., context=...)`` returns a ``workloads.datasets.Data``;
    ``eval_samples`` is the default number of held-out samples per evaluation (the
    worker's ``--eval-samples``), chosen per dataset for its resolution (see datasets.py).
    """

    name: str
    loader: str
    kind: str
    eval_samples: int = 1000
    needs_data_dir: bool = False
    summary: str = ""
    #: Training samples when fixed (None: depends on the data or the context), so that a
    #: batch larger than a rank's shard is refused before a network is built.
    train_samples: int | None = None
    #: Classes (the vocabulary for ``lm``) when fixed: a model's size without torch.
    classes: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RegistryError(f"dataset {self.name}: kind {self.kind!r} not in {KINDS}")


_MODELS: dict[str, ModelEntry] = {}
_DATASETS: dict[str, DatasetEntry] = {}


def register_model(entry: ModelEntry) -> ModelEntry:
    if entry.name in _MODELS or ":" in entry.name:
        raise RegistryError(f"model name {entry.name!r} is taken or contains ':'")
    _MODELS[entry.name] = entry
    return entry


def register_dataset(entry: DatasetEntry) -> DatasetEntry:
    if entry.name in _DATASETS:
        raise RegistryError(f"dataset name {entry.name!r} is taken")
    _DATASETS[entry.name] = entry
    return entry


def model_names() -> tuple[str, ...]:
    return tuple(_MODELS)


def dataset_names() -> tuple[str, ...]:
    return tuple(_DATASETS)


def is_plugin(name: str) -> bool:
    return ":" in name


def accepted_models() -> str:
    """The accepted forms, for one-line error messages."""
    return f"{', '.join(_MODELS)} or package.module:factory"


def check_model_name(name: str) -> None:
    """Refuses a name that is neither registered nor a findable ``package.module:attr``.

    Does not import the plug-in's module (that would import torch); it only checks that
    the module can be found, so a typo is caught before any worker starts.
    """
    if name in _MODELS:
        return
    if not is_plugin(name):
        raise RegistryError(f"model {name!r} unknown; accepted: {accepted_models()}")
    if not PLUGIN_RE.match(name):
        raise RegistryError(f"model {name!r} is not of the form package.module:factory")
    module = name.split(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing
        found = False
    if not found:
        raise RegistryError(f"model {name!r}: module {module!r} not found on the Python path "
                            f"(PYTHONPATH)")


def model_entry(name: str) -> ModelEntry:
    """The entry of a registered model, or of a plug-in (imports its module)."""
    check_model_name(name)
    if name in _MODELS:
        return _MODELS[name]
    obj = load_object(name)
    if isinstance(obj, ModelEntry):
        return obj
    if not callable(obj):
        raise RegistryError(f"model {name!r} is a {type(obj).__name__}, not a factory "
                            f"or ModelEntry")
    return ModelEntry(name=name, factory=obj, summary="plug-in")


def dataset_entry(name: str) -> DatasetEntry:
    try:
        return _DATASETS[name]
    except KeyError:
        raise RegistryError(f"dataset {name!r} unknown; accepted: "
                            f"{', '.join(_DATASETS)}") from None


def param_count(model: str, knobs: Mapping[str, Any], dataset: str) -> int | None:
    """The model's parameters for this dataset without building it (torch-free), or None
    where the entry or the dataset does not say."""
    if is_plugin(model) or model not in _MODELS:
        return None
    entry, data = _MODELS[model], _DATASETS.get(dataset)
    if entry.params is None or data is None or data.classes is None:
        return None
    return int(load_object(entry.params)(data.classes, **entry.resolve_knobs(knobs)))


def fits(model: ModelEntry, dataset: DatasetEntry) -> bool:
    return dataset.kind in model.kinds


def datasets_for(model: ModelEntry) -> tuple[str, ...]:
    return tuple(n for n, d in _DATASETS.items() if d.kind in model.kinds)


def load_object(path: str) -> Any:
    """``package.module:attr`` -> the object (imports the module)."""
    module, _, attr = path.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise RegistryError(f"{path!r}: cannot import {module!r}: {e}") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise RegistryError(f"{path!r}: module {module!r} has no attribute {attr!r}") from None


def parse_knobs(text: str) -> dict[str, int | float | str | bool]:
    """``"width=512,depth=3,act=gelu,bias=false"`` -> typed dict (int, float, bool, str)."""
    out: dict[str, int | float | str | bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            raise RegistryError(f"bad knob {part!r}: expected name=value (lowercase name)")
        out[key] = _typed(raw.strip())
    return out


def _typed(raw: str) -> int | float | str | bool:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


# --------------------------------------------------------------------------- built-ins
# One line per model / dataset. Sizes and reasons: workloads/models/*.py, datasets.py.

register_model(ModelEntry(
    "mlp", "workloads.models.mlp:build_mlp", kinds=("image", "vector"),
    knobs={"width": 1024}, summary="3-layer perceptron; width sets the gradient size"))
register_model(ModelEntry(
    "resnet18", "workloads.models.resnet:build_resnet18", kinds=("image",),
    weight_decay=5e-4, knobs={"width": 32},
    summary="CIFAR-style ResNet-18; width = first-stage channels (64 = original)"))
register_model(ModelEntry(
    "resnet20", "workloads.models.resnet:build_resnet20", kinds=("image",),
    weight_decay=5e-4, knobs={"width": 16},
    summary="CIFAR ResNet-20 (0.27 M params at width 16): much compute per gradient byte"))
register_model(ModelEntry(
    "gpt", "workloads.models.gpt:build_gpt", kinds=("lm",), optimizer="adamw", lr=1e-3,
    weight_decay=0.01, knobs={"layers": 4, "d_model": 256},
    summary="decoder-only character LM; context comes from the dataset"))

register_model(ModelEntry(
    "resnet18-imagenet", "workloads.models.imagenet:build_resnet18_imagenet", kinds=("image",),
    weight_decay=5e-4, knobs={"width": 64},
    summary="torchvision's ResNet-18 (ImageNet stem; 11.2 M params with 100 classes), "
            "initialised: no pretrained weights here",
    params="workloads.sizes:resnet18_imagenet_params"))
register_model(ModelEntry(
    "vgg16", "workloads.models.imagenet:build_vgg16", kinds=("image",), lr=0.01,
    weight_decay=5e-4, knobs={"width": 64, "hidden": 4096},
    summary="torchvision's VGG-16 (configuration D; 134.7 M params with 100 classes), "
            "initialised: no pretrained weights here", params="workloads.sizes:vgg16_params"))
register_model(ModelEntry(
    "gpt2-small", "workloads.models.gpt:build_gpt2", kinds=("lm",), optimizer="adamw", lr=5e-5,
    weight_decay=0.01, knobs={"layers": 12, "d_model": 768, "heads": 12, "positions": 1024},
    summary="GPT-2 small (124.4 M params, tied embeddings, AdamW 5e-5 as the prototype), "
            "initialised: no pretrained weights here", params="workloads.sizes:gpt2_params"))

register_dataset(DatasetEntry(
    "digits", "workloads.datasets:load_digits_data", "image", eval_samples=1000,
    train_samples=1438,
    summary="UCI 8x8 digits (shipped in workloads/data), 10 classes, 1437 train / 360 held-out"))
register_dataset(DatasetEntry(
    "synthetic", "workloads.datasets:load_synthetic_data", "image", eval_samples=1000,
    train_samples=10_000,
    summary="generated 3x32x32 images, 10 classes"))
register_dataset(DatasetEntry(
    "cifar100-synth", "workloads.datasets:load_cifar100_synth_data", "image",
    eval_samples=2000, train_samples=50_000,
    summary="generated CIFAR-100-shaped images (3x32x32, 100 classes; real CIFAR: cifar100)"))
register_dataset(DatasetEntry(
    "mixture", "workloads.datasets:load_mixture_data", "vector", eval_samples=2000,
    train_samples=200_000,
    summary="generated 300-class Gaussian mixture in 256 dimensions (evaluation workload)"))
register_dataset(DatasetEntry(
    "text", "workloads.datasets:load_text_data", "lm", eval_samples=1000,
    summary="the committed character corpus"))
register_dataset(DatasetEntry(
    "cifar10", "workloads.datasets:load_cifar10_data", "image", eval_samples=1000,
    needs_data_dir=True, summary="CIFAR-10 python batches from --data-dir"))
register_dataset(DatasetEntry(
    "cifar100", "workloads.datasets:load_cifar100_data", "image", eval_samples=1000,
    needs_data_dir=True, summary="CIFAR-100 python batches from --data-dir"))
register_dataset(DatasetEntry(
    "cifar100-224-synth", "workloads.datasets:load_cifar100_224_synth_data", "image",
    eval_samples=1000, train_samples=50_000, classes=100,
    summary="cifar100-synth resized to 3x224x224 (the paper's input shape), 100 classes"))
register_dataset(DatasetEntry(
    "cifar100-224", "workloads.datasets:load_cifar100_224_data", "image", eval_samples=1000,
    needs_data_dir=True, classes=100,
    summary="CIFAR-100 python batches from --data-dir, resized to 224"))
register_dataset(DatasetEntry(
    "gpt2-synth", "workloads.datasets:load_gpt2_synth_data", "lm", eval_samples=1000,
    train_samples=200_000, classes=50257,
    summary="generated GPT-2 tokens (vocabulary 50257; a learnable Markov chain)"))
register_dataset(DatasetEntry(
    "openwebtext", "workloads.datasets:load_openwebtext_data", "lm", eval_samples=1000,
    needs_data_dir=True, classes=50257,
    summary="nanoGPT's train.bin/val.bin GPT-2 tokens from --data-dir"))
