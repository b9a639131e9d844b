"""Gradient compressors, one module per family, behind one protocol (see ``base``).

``get(spec)`` builds a compressor from a spec string::

    none | fp16 | bf16 | int8 | topk:R | randomk:R | dgc:R      (0 < R <= 1)

``topk:R`` is exact top-k (``torch.topk``); ``dgc:R`` is top-k by a sampled threshold (the
fast variant of Deep Gradient Compression; its momentum correction lives in
``netsenseml.memory``).
"""

from __future__ import annotations

import torch

from netsenseml.compress.base import Compressor, Payload, index_dtype, ratio_to_k
from netsenseml.compress.cast import CastCompressor, NoCompression
from netsenseml.compress.quantize import Int8Compressor
from netsenseml.compress.sparse import RandomKCompressor, TopKCompressor

SPEC_FORMS = "none, fp16, bf16, int8, topk:R, randomk:R, dgc:R (R a kept fraction, 0<R<=1)"

__all__ = [
    "SPEC_FORMS",
    "CastCompressor",
    "Compressor",
    "Int8Compressor",
    "NoCompression",
    "Payload",
    "RandomKCompressor",
    "TopKCompressor",
    "get",
    "index_dtype",
    "parse_ratio",
    "ratio_to_k",
]


def parse_ratio(spec: str, text: str, forms: str = SPEC_FORMS) -> float:
    """Parses the ``R`` of ``name:R``; a ValueError names the spec and the accepted forms."""
    try:
        ratio = float(text)
    except ValueError:
        raise ValueError(f"invalid spec {spec!r}: ratio {text!r} is not a number; accepted: {forms}") from None
    if not 0.0 < ratio <= 1.0 or ratio != ratio:
        raise ValueError(f"invalid spec {spec!r}: ratio must satisfy 0<R<=1; accepted: {forms}")
    return ratio


def get(spec: str, **options: object) -> Compressor:
    """Returns a compressor for ``spec`` (see module docstring); ``options`` go to its constructor."""
    if not isinstance(spec, str):
        raise ValueError(f"invalid compressor spec {spec!r}; accepted: {SPEC_FORMS}")
    name, sep, arg = spec.strip().partition(":")
    name = name.lower()
    simple = {"none": NoCompression, "fp16": None, "bf16": None, "int8": Int8Compressor}
    if name in simple:
        if sep:
            raise ValueError(f"invalid spec {spec!r}: {name} takes no argument; accepted: {SPEC_FORMS}")
        if name == "fp16":
            return CastCompressor(torch.float16)
        if name == "bf16":
            return CastCompressor(torch.bfloat16)
        return simple[name](**options)  # type: ignore[misc]
    if name in ("topk", "randomk", "dgc"):
        if not sep:
            raise ValueError(f"invalid spec {spec!r}: {name} needs a ratio ({name}:R); accepted: {SPEC_FORMS}")
        ratio = parse_ratio(spec, arg)
        if name == "topk":
            return TopKCompressor(ratio, method="exact", **options)  # type: ignore[arg-type]
        if name == "dgc":
            return TopKCompressor(ratio, method="sampled", **options)  # type: ignore[arg-type]
        return RandomKCompressor(ratio, **options)  # type: ignore[arg-type]
    raise ValueError(f"unknown compressor spec {spec!r}; accepted: {SPEC_FORMS}")
