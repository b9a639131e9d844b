"""Every shipped method has its own colour, set in one place (``style.METHOD_COLORS``), and
every two of them can be told apart, also by a reader with a colour-vision deficiency.

Issue 44: int8 and top-k 0.01 were drawn in two similar greens (``topk:0.01`` missed the
table's ``topk-0.01`` and took a colour derived from its name). Distance is CIELAB's
(Delta E 1976, D65) between the colours as seen: as they are, and as Machado, Oliveira and
Fernandes (2009) simulate deuteranopia, protanopia and tritanopia (severity 1.0).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.analysis.figures import style

ROOT = Path(__file__).resolve().parents[2]
#: the methods the shipped sweeps compare side by side (one figure holds them all)
EVALUATED = ("allreduce", "fp16", "int8", "topk:0.1", "topk:0.01", "dgc:0.01", "powersgd:4",
             "netsenseml", "netsenseml-paper", "stellatrain", "accordion")
#: every built-in method, with the arguments the shipped sweeps use
SHIPPED = EVALUATED + ("bf16", "randomk:0.01", "topk:0.005", "topk:0.001", "dgc:0.001")
SIGHT = {
    "ordinary": np.eye(3),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}
_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                 [0.0193, 0.1192, 0.9505]])


def _lab(hex_colour: str, sight: np.ndarray) -> np.ndarray:
    c = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    x, y, z = _XYZ @ np.clip(sight @ linear, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = [np.cbrt(t) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _closest(methods: tuple[str, ...], sight: str) -> tuple[float, str, str]:
    lab = {m: _lab(style.method_color(m), SIGHT[sight]) for m in methods}
    return min((float(np.linalg.norm(lab[a] - lab[b])), a, b)
               for a, b in itertools.combinations(methods, 2))


def _methods(node: object) -> set[str]:
    if isinstance(node, dict):
        return set().union(*(set(map(str, v)) if k == "methods" else _methods(v)
                             for k, v in node.items()))
    if isinstance(node, list):
        return set().union(set(), *(_methods(v) for v in node))
    return set()


def test_shipped_sweeps_use_only_methods_listed_here() -> None:
    used: set[str] = set()
    for sweep in (ROOT / "testbed" / "sweeps").glob("*.yaml"):
        used |= _methods(yaml.safe_load(sweep.read_text()))
    assert used and used <= set(SHIPPED), sorted(used - set(SHIPPED))


def test_every_shipped_method_has_its_own_colour_from_the_table() -> None:
    colours = [style.method_color(m) for m in SHIPPED]
    assert len(set(colours)) == len(SHIPPED)
    assert set(colours) <= set(style.METHOD_COLORS.values())  # none derived from a name
    assert style.method_color("topk:0.01") == style.method_color("topk-0.01")  # both spellings


@pytest.mark.parametrize("sight", sorted(SIGHT))
def test_evaluated_methods_stay_apart(sight: str) -> None:
    # ordinary sight: far apart; with a deficiency: still clearly different (Delta E >= 15)
    d, a, b = _closest(EVALUATED, sight)
    assert d >= (30 if sight == "ordinary" else 15), f"{a} and {b}: Delta E {d:.1f} ({sight})"


def test_every_shipped_method_stays_apart_in_ordinary_sight() -> None:
    d, a, b = _closest(SHIPPED, "ordinary")
    assert d >= 25, f"{a} and {b}: Delta E {d:.1f}"
