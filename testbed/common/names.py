"""Names the testbed gives or accepts: user-chosen names that become folder names, folder
slugs of methods and values, and the per-run interface prefix.

Why one home: the same rule is checked when a scenario or sweep is read, used when a run
folder is made and matched when a crashed run is cleaned up; two copies of a pattern drift.
"""

from __future__ import annotations

import re
import secrets

#: A scenario, sweep, experiment or flow-group name: it names a folder, so no separators.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: Every node of a run is named ``<prefix><node>``; its interfaces carry the prefix, which
#: is how teardown and ``netsense clean`` find exactly what one run made.
PREFIX_PATTERN = "nst[0-9a-z]{4}"
PREFIX_RE = re.compile(PREFIX_PATTERN)
_PREFIX_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def is_name(text: str) -> bool:
    return isinstance(text, str) and NAME_RE.fullmatch(text) is not None


def is_prefix(text: str) -> bool:
    """A whole run prefix ('nst3f9a'), as an Emulation accepts it."""
    return isinstance(text, str) and PREFIX_RE.fullmatch(text) is not None


def has_prefix_form(name: str) -> bool:
    """An interface or registry name that starts with some run's prefix."""
    return PREFIX_RE.match(name) is not None


def random_prefix() -> str:
    """'nst' + 4 random base36 characters (callers check that no one uses it yet)."""
    return "nst" + "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(4))


def slug(text: str) -> str:
    """Folder-safe form of a method or value: 'topk:0.01' -> 'topk-0.01'; stable across runs."""
    s = re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-")
    return s or "x"
