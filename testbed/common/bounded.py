"""Reading untrusted files with bounds: size before reading, expansion while parsing.

Why: scenario, sweep and override YAML, trace files and result CSVs come from users (or from
a damaged results folder). A few hundred bytes of nested YAML aliases ("billion laughs")
expand to gigabytes once anything walks the parsed object (pydantic, ``json.dumps``,
``copy.deepcopy``); a multi-gigabyte file is read whole before anything can refuse it. So
every YAML goes through :func:`load_yaml` (size bound, then the composed node graph is
measured *with aliases expanded*, without constructing anything, so a bomb is refused in
milliseconds) and every other text input through :func:`read_text` (size bound).

Aliases as such stay legal: a sweep may reuse an override block with ``&name``/``*name``;
only the expanded size is bounded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

#: Largest YAML file accepted (scenario, sweep); --set values are much smaller still.
MAX_YAML_BYTES = 1 << 20
#: Largest number of YAML nodes after alias expansion (a big sweep has a few thousand).
MAX_YAML_NODES = 100_000
#: Deepest nesting of YAML collections (a scenario needs about 6).
MAX_YAML_DEPTH = 64
#: Largest trace file (a day of Mahimahi timestamps at 100 Mbit/s is ~70 MB; be generous
#: for traces, not for config).
MAX_TRACE_BYTES = 64 << 20
#: Largest result CSV read by the analysis (steps.csv, events.csv, link.csv).
MAX_CSV_BYTES = 512 << 20
#: Largest result JSON (summary.json, config.json, sweep.json).
MAX_JSON_BYTES = 16 << 20


class BoundError(ValueError):
    """An input over a bound, or not parseable; ``str()`` is one line naming the input."""


def check_size(path: Path, max_bytes: int, label: str | None = None) -> int:
    """The file's size; BoundError when it is not a regular file or is over ``max_bytes``."""
    label = label or str(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BoundError(f"{label}: cannot read: {exc.strerror}") from None
    if not os.path.isfile(path):
        raise BoundError(f"{label}: not a regular file")
    if st.st_size > max_bytes:
        raise BoundError(f"{label}: {st.st_size} bytes, more than the {max_bytes} accepted")
    return st.st_size


def read_text(path: Path, max_bytes: int, label: str | None = None) -> str:
    """The file's text, refusing it (BoundError) over ``max_bytes`` or when not UTF-8.

    Reads at most ``max_bytes + 1`` bytes whatever stat said, so a file growing meanwhile
    (or a pseudo-file reporting size 0) cannot get past the bound.
    """
    label = label or str(path)
    check_size(path, max_bytes, label)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise BoundError(f"{label}: cannot read: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise BoundError(f"{label}: more than the {max_bytes} bytes accepted")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BoundError(f"{label}: not UTF-8 text (binary?)") from None


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """A key given twice in one mapping: YAML's loader silently keeps the last one, so a
    scenario would run with a value its author may have overlooked; refuse it instead,
    naming both lines. (``<<`` merge keys may repeat; merged keys may be overridden.)"""
    seen: dict[str, int] = {}
    for k, _ in node.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
            continue
        line = k.start_mark.line + 1
        if k.value in seen:
            raise BoundError(f"duplicate key {k.value!r} at lines {seen[k.value]} and {line}")
        seen[k.value] = line


def _expanded_nodes(root: yaml.Node, limit: int, depth_limit: int) -> int:
    """Nodes of the graph with every alias expanded; stops counting past ``limit``.

    Memoised per node, so a bomb's cost is its *distinct* node count, not its expansion.
    """
    memo: dict[int, int] = {}
    on_path: set[int] = set()

    def walk(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if depth > depth_limit:
            raise BoundError(f"nested deeper than {depth_limit} levels")
        if key in on_path:  # a recursive alias (the constructor would loop or fail)
            raise BoundError("recursive alias")
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += walk(child, depth + 1)
                if total > limit:
                    break
        elif isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
            for k, v in node.value:
                total += walk(k, depth + 1) + walk(v, depth + 1)
                if total > limit:
                    break
        on_path.discard(key)
        memo[key] = total
        return total

    return walk(root, 0)


def parse_yaml(text: str, label: str, *, max_nodes: int = MAX_YAML_NODES,
               max_depth: int = MAX_YAML_DEPTH) -> Any:
    """``yaml.safe_load`` of ``text`` with the expansion and depth bounds (BoundError)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise BoundError(f"{label}: YAML syntax error{where}: {problem}") from None
    except RecursionError:
        raise BoundError(f"{label}: nested too deeply") from None
    if node is None:
        return None
    try:
        n = _expanded_nodes(node, max_nodes, max_depth)
    except BoundError as exc:
        raise BoundError(f"{label}: {exc}") from None
    except RecursionError:
        raise BoundError(f"{label}: nested too deeply") from None
    if n > max_nodes:
        raise BoundError(f"{label}: more than {max_nodes} YAML nodes once aliases are "
                         "expanded (alias bomb?)")
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:  # constructor errors (e.g. an unknown !!tag)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BoundError(f"{label}: {problem}") from None
    finally:
        loader.dispose()


def load_yaml(path: Path, label: str | None = None, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """A YAML file parsed under the size, expansion and depth bounds (BoundError)."""
    label = label or Path(path).name
    return parse_yaml(read_text(Path(path), max_bytes, label), label)
