"""Input files given by name or by path (``netsense run smoke``, ``netsense sweep x.yaml``),
read as a YAML mapping with one-line errors.

Why one home: scenarios and sweeps are found and read the same way, and their errors
(file not found, unknown name with the list of known ones, YAML syntax with line and
column) must read the same; each caller raises its own error class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.common import bounded
from testbed.common.names import is_name


def resolve(name_or_path: str | Path, folder: Path, what: str,
            error: type[ValueError] = ValueError) -> Path:
    """An existing path as given, else ``folder/<name>.yaml`` (``what``: 'scenario')."""
    raw = str(name_or_path)
    path = Path(raw).expanduser()
    if "/" in raw or raw.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise error(f"{what} file not found: {raw}")
        return path
    if not is_name(raw):
        raise error(f"invalid {what} name {raw!r}")
    candidate = folder / f"{raw}.yaml"
    if not candidate.is_file():
        known = ", ".join(p.stem for p in sorted(folder.glob("*.yaml"))) or "none"
        raise error(f"unknown {what} {raw!r}; available: {known}")
    return candidate


def load_mapping(path: Path, label: str, error: type[ValueError] = ValueError
                 ) -> dict[str, Any]:
    """The YAML mapping in ``path``; errors start with ``label`` ('scenario smoke.yaml')."""
    try:  # size, alias-expansion and depth bounds: an input file is untrusted
        data = bounded.load_yaml(Path(path), label)
    except bounded.BoundError as exc:
        raise error(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise error(f"{label}: cannot read: {reason}") from None
    if not isinstance(data, dict):
        raise error(f"{label}: top level must be a mapping")
    return data
