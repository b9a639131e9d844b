"""Offline datasets for the worker, each split deterministically into train and held-out.

Why these: the testbed's hosts cannot download anything, so every dataset is either
committed in the repository (``digits``, ``text``: workloads/data/README.md), generated
(``synthetic``), or read from a
directory the user already has (``cifar10``/``cifar100``, standard python-pickle batches).
Names, kinds and default evaluation sizes are registered in ``workloads.registry``.

The train/held-out split and the synthetic data use fixed seeds of their own (not
``--seed``), so every run of a sweep evaluates on the same held-out samples and ``--seed``
only changes initialisation and shuffling. Ranks see disjoint shards of the train split
through ``DistributedSampler`` (set up by the worker).

- ``digits``: 1797 8x8 grey images, 10 classes; 1437 train / 360 held-out.
- ``synthetic``: 3x32x32 images, 10 classes (sized for the CNN). Each class has a smooth
  random template; a sample is its template, randomly translated (circular shift up to
  +-4 px) and scaled by U(0.5, 1.5), plus Gaussian noise of std 5 (templates have std 1).
  Learnable but not trivial: a small ResNet-18 needs about a hundred steps to get most of
  it right (a reading: docs/measurements.md). Samples are generated on demand from
  ``(data seed, index)`` so 8 workers do not each hold the set in memory.
  10,000 train / 1,000 held-out.
- ``cifar100-synth``: CIFAR-100's shape where no CIFAR is on disk: 3x32x32, 100 classes,
  50,000 train / 10,000 held-out, made like ``synthetic`` (a smooth template per class,
  translated, scaled, noise of std 2). Why 100 classes: like ``mixture``'s 300, a batch holds
  each class rarely, so what the model must learn arrives as small gradient components, the
  ones top-k defers to its residual; with 10 classes top-k would cost nothing. Real
  CIFAR-10/100 from ``--data-dir``: ``cifar10`` / ``cifar100`` below.
- ``mixture`` (the evaluation workload): 256 features, 300 classes. Class ``c`` has a mean
  ``mu_c ~ N(0, 0.45^2 I)`` (drawn once from a fixed seed); a sample of class ``c`` is
  ``mu_c + N(0, I)``; labels cycle ``index % 300``. 200,000 train / 10,000 held-out samples,
  generated on demand from ``(index)`` (no memory per worker beyond the means).
  Why this task: it is one where compression costs convergence. Class means lie ~10 noise
  standard deviations apart (Bayes accuracy > 99.9 %), so a target measures how fast
  training finds 300 class directions, not a noise floor; with 300 classes a batch of 64
  holds any one class once every ~5 steps, so most of what the model must learn arrives as
  small gradient components -- the ones top-k leaves in its residual: top-k needs more
  steps to the target than the dense methods (the convergence table and its command:
  workloads/README.md, benchmarks/convergence.py).
  Held-out size: ``--eval-samples`` defaults to 2000 for it (registry): a quantum of
  0.05 % and, at the 0.95 target, a binomial standard error of sqrt(0.95 * 0.05 / 2000) =
  0.49 %; every run sees the same samples, so method-to-method differences are paired.
  Why not more: an evaluation is a forward pass over them, a noticeable share of an
  evaluation interval (docs/measurements.md); ``--eval-samples 10000`` gives <= 0.5 % at any
  accuracy.
- ``text``: the committed character corpus; first 90 % train, last 10 % held-out; a sample
  is ``context + 1`` characters (input = first ``context``, target = shifted by one).
- ``cifar10`` / ``cifar100``: ``--data-dir`` containing ``cifar-10-batches-py`` or
  ``cifar-100-python`` (or those folders' contents); normalised per channel, no augmentation.

The paper's shapes (issue 41: the prototype trains torchvision's ResNet-18 and VGG-16 on
CIFAR-100 resized to 224 px, GPT-2 on OpenWebText at context 128):

- ``cifar100-224-synth``: ``cifar100-synth``'s samples (same templates, noise, split and
  sizes) resized to 3x224x224 bilinearly, as the prototype resizes CIFAR-100: a
  deterministic, learnable 100-class task of the paper's input shape, for time to accuracy
  without a download. Resized per sample on demand (~1 ms), so 8 workers hold no set.
- ``cifar100-224``: the user's CIFAR-100 (``--data-dir``, as ``cifar100``) resized to 224.
- ``gpt2-synth``: GPT-2's token shape (vocabulary 50257, ``--context`` tokens, default 64;
  the paper's 128 is set by the scenarios) from a deterministic generator: a Markov chain
  in which each token has four successors (drawn once, Zipf-like, so some tokens are
  frequent as in text) taken with probabilities 0.7/0.1/0.1/0.1: learnable (the best
  next-token accuracy is ~0.7), generated per index, 200,000 train / 10,000 held-out
  windows. No tokenizer is needed (none can be fetched here).
- ``openwebtext``: the user's GPT-2 tokens from ``--data-dir``: nanoGPT's
  ``data/openwebtext/prepare.py`` output, ``train.bin`` and ``val.bin`` (uint16 GPT-2 token
  ids), read through a memory map; windows of ``context + 1`` tokens every ``context``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from workloads.registry import RegistryError, dataset_entry, dataset_names, load_object

DATASETS: tuple[str, ...] = dataset_names()

SPLIT_SEED = 12345  # fixed: the held-out split must not change with --seed
DATA_DIR = Path(__file__).parent / "data"
CORPUS_PATH = DATA_DIR / "corpus.txt"


class DatasetError(Exception):
    """A dataset cannot be loaded (missing files, wrong model pairing); one-line message."""


@dataclass
class Data:
    """A loaded dataset: the two splits plus what the model factory needs to know."""

    name: str
    train: Dataset
    test: Dataset
    input_shape: tuple[int, ...]  # per sample; for text: (context,)
    num_classes: int  # for text: vocabulary size
    kind: str  # "image"/"vector" (class per sample) or "lm" (class per position)


# --------------------------------------------------------------------------- digits


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The (1797, 64) pixels and labels of the UCI digits test set (workloads/data/README.md).

    Shipped in workloads/data/ so the workers need no scikit-learn: the same file and rows
    as ``sklearn.datasets.load_digits``, read with numpy alone.
    """
    raw = np.loadtxt(DATA_DIR / "digits.csv.gz", delimiter=",", dtype=np.float32)
    return raw[:, :-1], raw[:, -1].astype(np.int64)


def load_digits_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    pixels, labels = _digits_arrays()
    x = torch.from_numpy(pixels).view(-1, 1, 8, 8) / 16.0  # (N,1,8,8) in [0,1]
    x = (x - 0.3) / 0.4
    y = torch.from_numpy(labels)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_test = len(y) // 5
    te, tr = perm[:n_test], perm[n_test:]
    return Data("digits", TensorDataset(x[tr], y[tr]), TensorDataset(x[te], y[te]),
                (1, 8, 8), 10, "image")


# --------------------------------------------------------------------------- synthetic


class SyntheticImages(Dataset):
    """Deterministic, learnable image classification generated per index (see module doc)."""

    def __init__(self, n: int, offset: int, num_classes: int = 10, noise: float = 5.0,
                 seed: int = SPLIT_SEED) -> None:
        self.n, self.offset, self.noise, self.seed = n, offset, noise, seed
        rng = np.random.default_rng(seed)
        # smooth templates: 8x8 noise upsampled to 32x32, unit variance
        low = rng.standard_normal((num_classes, 3, 8, 8)).astype(np.float32)
        t = np.kron(low, np.ones((1, 1, 4, 4), dtype=np.float32))
        t = torch.from_numpy(t)
        t = torch.nn.functional.avg_pool2d(torch.nn.functional.pad(t, (2, 2, 2, 2), "circular"),
                                           5, stride=1)
        self.templates = (t / t.std(dim=(1, 2, 3), keepdim=True)).numpy()
        self.num_classes = num_classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        idx = self.offset + int(i)
        rng = np.random.default_rng((self.seed, idx))
        y = idx % self.num_classes
        dy, dx = rng.integers(-4, 5, size=2)
        scale = np.float32(rng.uniform(0.5, 1.5))
        img = rng.standard_normal((3, 32, 32), dtype=np.float32)  # float32 throughout: speed
        img *= np.float32(self.noise)
        img += np.roll(self.templates[y], (int(dy), int(dx)), axis=(1, 2)) * scale
        return torch.from_numpy(img), y


def load_synthetic_data(data_dir: str | Path | None = None, context: int = 64,
                        n_train: int = 10_000, n_test: int = 1_000) -> Data:
    return Data("synthetic", SyntheticImages(n_train, 0), SyntheticImages(n_test, n_train),
                (3, 32, 32), 10, "image")


def load_cifar100_synth_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    """CIFAR-100's shape and split sizes, generated (module doc: ``cifar100-synth``)."""
    return Data("cifar100-synth",
                SyntheticImages(50_000, 0, num_classes=100, noise=CIFAR_SYNTH_NOISE),
                SyntheticImages(10_000, 50_000, num_classes=100, noise=CIFAR_SYNTH_NOISE),
                (3, 32, 32), 100, "image")


CIFAR_SYNTH_NOISE = 2.0

class Resized(Dataset):
    """Another image dataset's samples resized to ``size`` x ``size`` (bilinear), on demand:
    CIFAR resized to 224 px as the paper's prototype trains on it."""

    def __init__(self, base: Dataset, size: int) -> None:
        self.base, self.size = base, size

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.base[i]
        x = torch.nn.functional.interpolate(x.unsqueeze(0), size=(self.size, self.size),
                                            mode="bilinear", align_corners=False)
        return x.squeeze(0), int(y)


PAPER_IMAGE_PX = 224


def load_cifar100_224_synth_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    """``cifar100-synth`` resized to 224 px (module doc)."""
    d = load_cifar100_synth_data()
    return Data("cifar100-224-synth", Resized(d.train, PAPER_IMAGE_PX),
                Resized(d.test, PAPER_IMAGE_PX), (3, PAPER_IMAGE_PX, PAPER_IMAGE_PX), 100,
                "image")


def load_cifar100_224_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    """The user's CIFAR-100 resized to 224 px (module doc)."""
    d = load_cifar_data("cifar100", data_dir)
    return Data("cifar100-224", Resized(d.train, PAPER_IMAGE_PX), Resized(d.test, PAPER_IMAGE_PX),
                (3, PAPER_IMAGE_PX, PAPER_IMAGE_PX), 100, "image")


# --------------------------------------------------------------------------- mixture

MIXTURE_FEATURES, MIXTURE_CLASSES, MIXTURE_SCALE = 256, 300, 0.45
MIXTURE_TRAIN, MIXTURE_TEST = 200_000, 10_000
_GOLDEN = 2654435761  # odd, so index -> seed is a bijection on 32-bit integers


class GaussianMixture(Dataset):
    """Samples ``offset .. offset + n - 1`` of the mixture (see module doc), made on demand.

    The noise of sample ``i`` comes from torch's CPU generator seeded with a bijective
    32-bit mix of ``i`` (~10 us a sample), the means from numpy's PCG64 seeded with
    ``seed``: a different generator, so no sample's noise can repeat the means' draws.
    """

    def __init__(self, n: int, offset: int, *, features: int = MIXTURE_FEATURES,
                 classes: int = MIXTURE_CLASSES, scale: float = MIXTURE_SCALE,
                 seed: int = SPLIT_SEED) -> None:
        self.n, self.offset, self.features, self.classes = n, offset, features, classes
        rng = np.random.default_rng(seed)
        self.means = torch.from_numpy(
            (rng.standard_normal((classes, features)) * scale).astype(np.float32))
        self.salt = seed * 97 + 1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        idx = self.offset + int(i)
        gen = torch.Generator().manual_seed((idx * _GOLDEN + self.salt) % 2**32)
        y = idx % self.classes
        return self.means[y] + torch.randn(self.features, generator=gen), y


def load_mixture_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    return Data("mixture", GaussianMixture(MIXTURE_TRAIN, 0),
                GaussianMixture(MIXTURE_TEST, MIXTURE_TRAIN), (MIXTURE_FEATURES,),
                MIXTURE_CLASSES, "vector")


# --------------------------------------------------------------------------- text


class CharWindows(Dataset):
    """Windows of ``context + 1`` characters starting every ``stride`` characters."""

    def __init__(self, ids: torch.Tensor, context: int, stride: int) -> None:
        if len(ids) < context + 2:
            raise DatasetError(f"text split of {len(ids)} chars is shorter than context {context}")
        self.ids, self.context, self.stride = ids, context, stride
        self.n = (len(ids) - context - 1) // stride + 1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = int(i) * self.stride
        chunk = self.ids[s : s + self.context + 1]
        return chunk[:-1], chunk[1:]


def load_text_data(data_dir: str | Path | None = None, context: int = 64,
                   path: Path = CORPUS_PATH) -> Data:
    if not path.is_file():
        raise DatasetError(f"text corpus not found at {path}")
    text = path.read_text(encoding="utf-8")
    vocab = sorted(set(text))
    lookup = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    cut = int(len(ids) * 0.9)
    train = CharWindows(ids[:cut], context, stride=max(1, context // 4))
    test = CharWindows(ids[cut:], context, stride=context)
    return Data("text", train, test, (context,), len(vocab), "lm")


GPT2_VOCAB = 50257
TOKENS_TRAIN, TOKENS_TEST = 200_000, 10_000
_SUCCESSOR_P = np.array([0.7, 0.1, 0.1, 0.1])


class MarkovTokens(Dataset):
    """Windows ``offset .. offset + n - 1`` of the ``gpt2-synth`` chain (module doc)."""

    def __init__(self, n: int, offset: int, context: int, vocab: int = GPT2_VOCAB,
                 seed: int = SPLIT_SEED) -> None:
        self.n, self.offset, self.context, self.seed = n, offset, context, seed
        rng = np.random.default_rng(seed)
        # successors drawn Zipf-like: rank r has weight 1 / (r + 10)
        w = 1.0 / (np.arange(vocab) + 10.0)
        self.successors = rng.choice(vocab, size=(vocab, len(_SUCCESSOR_P)), p=w / w.sum())
        self.cumulative = np.cumsum(_SUCCESSOR_P)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng((self.seed, self.offset + int(i)))
        picks = np.searchsorted(self.cumulative, rng.random(self.context + 1), side="right")
        succ = self.successors
        tok = int(rng.integers(len(succ)))
        out = np.empty(self.context + 1, dtype=np.int64)
        for j in range(self.context + 1):
            out[j] = tok
            tok = int(succ[tok, min(int(picks[j]), succ.shape[1] - 1)])
        ids = torch.from_numpy(out)
        return ids[:-1], ids[1:]


def load_gpt2_synth_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    return Data("gpt2-synth", MarkovTokens(TOKENS_TRAIN, 0, context),
                MarkovTokens(TOKENS_TEST, TOKENS_TRAIN, context), (context,), GPT2_VOCAB, "lm")


class TokenWindows(Dataset):
    """Windows of ``context + 1`` GPT-2 tokens every ``context`` tokens of a uint16 file."""

    def __init__(self, path: Path, context: int) -> None:
        self.ids = np.memmap(path, dtype=np.uint16, mode="r")
        self.context = context
        self.n = (len(self.ids) - 1) // context
        if self.n < 1:
            raise DatasetError(f"{path}: {len(self.ids)} tokens, fewer than context {context}")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = int(i) * self.context
        chunk = torch.from_numpy(self.ids[s : s + self.context + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def load_openwebtext_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    """nanoGPT's tokenised OpenWebText (``train.bin``, ``val.bin``) from ``--data-dir``."""
    if data_dir is None:
        raise DatasetError("dataset openwebtext needs --data-dir containing train.bin and "
                           "val.bin (nanoGPT's data/openwebtext/prepare.py)")
    root = Path(data_dir)
    missing = [f for f in ("train.bin", "val.bin") if not (root / f).is_file()]
    if missing:
        raise DatasetError(f"dataset openwebtext: {root} lacks {', '.join(missing)} (uint16 "
                           "GPT-2 token ids, nanoGPT's prepare.py)")
    return Data("openwebtext", TokenWindows(root / "train.bin", context),
                TokenWindows(root / "val.bin", context), (context,), GPT2_VOCAB, "lm")


# --------------------------------------------------------------------------- CIFAR


_CIFAR = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"],
                b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}
_MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
_STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)


def load_cifar_data(name: str, data_dir: str | Path | None) -> Data:
    folder, train_files, test_files, label_key, classes = _CIFAR[name]
    if data_dir is None:
        raise DatasetError(f"dataset {name} needs --data-dir containing {folder}/")
    root = Path(data_dir)
    base = root / folder if (root / folder).is_dir() else root
    missing = [f for f in train_files + test_files if not (base / f).is_file()]
    if missing:
        raise DatasetError(
            f"dataset {name}: {base} lacks {', '.join(missing)} "
            f"(expected the python-pickle release, folder {folder}/)"
        )

    def read(files: list[str]) -> TensorDataset:
        xs, ys = [], []
        for f in files:
            with open(base / f, "rb") as fh:
                d = pickle.load(fh, encoding="bytes")
            xs.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(d[label_key], dtype=np.int64))
        x = torch.from_numpy(np.concatenate(xs)).float().div_(255.0)
        return TensorDataset((x - _MEAN) / _STD, torch.from_numpy(np.concatenate(ys)))

    return Data(name, read(train_files), read(test_files), (3, 32, 32), classes, "image")


def load_cifar10_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    return load_cifar_data("cifar10", data_dir)


def load_cifar100_data(data_dir: str | Path | None = None, context: int = 64) -> Data:
    return load_cifar_data("cifar100", data_dir)


# --------------------------------------------------------------------------- factory


def load_dataset(name: str, *, data_dir: str | Path | None = None, context: int = 64) -> Data:
    """Load registered dataset ``name``; raises DatasetError with a one-line reason."""
    try:
        entry = dataset_entry(name)
    except RegistryError as e:
        raise DatasetError(str(e)) from None
    return load_object(entry.loader)(data_dir=data_dir, context=context)
