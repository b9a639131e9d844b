"""Gradient compressors, one module per family, behind one protocol (see ``base``).

``get(spec)`` builds a compressor from a spec string of the method grammar
(``netsenseml.methods``), restricted to compressors::

    allreduce (alias none) | fp16 | bf16 | int8 | topk:R | randomk:R | dgc:R   (0 < R <= 1)
    package.module:Class[:ARG]                                  (a user's compressor class)

``topk:R`` is exact top-k (``torch.topk``); ``dgc:R`` is top-k by a sampled threshold (the
fast variant of Deep Gradient Compression; its momentum correction lives in
``netsenseml.memory``).
"""

from __future__ import annotations

from netsenseml import methods
from netsenseml.compress.base import Codec, Compressor, Payload, declare, index_dtype, ratio_to_k
from netsenseml.compress.cast import CastCompressor, NoCompression
from netsenseml.compress.quantize import Int8Compressor
from netsenseml.compress.sparse import RandomKCompressor, TopKCompressor

SPEC_FORMS = methods.forms("compressor")

__all__ = [
    "SPEC_FORMS",
    "CastCompressor",
    "Codec",
    "Compressor",
    "Int8Compressor",
    "NoCompression",
    "Payload",
    "RandomKCompressor",
    "TopKCompressor",
    "declare",
    "get",
    "index_dtype",
    "ratio_to_k",
]


def get(spec: str, **options: object) -> Compressor:
    """Returns a compressor for ``spec`` (see module docstring); ``options`` go to its constructor."""
    resolved = methods.resolve(methods.parse(spec, kind="compressor"))
    if resolved.kind != "compressor":
        raise ValueError(f"invalid compressor spec {spec!r}: a comm hook, not a compressor class; "
                         f"accepted: {SPEC_FORMS}")
    return declare(resolved.build(**options))
