"""Size limits of the production code a reader pays for: no function over 60 lines, no class
whose constructor takes more than 12 parameters, ``netsenseml/hooks.py`` under 450 lines.

Checked on every module of the packages except those under ``EXCLUDE`` (each with its
reason); ``python tests/test_code_size.py`` prints the counts across the repository, excluded
folders included (what is left there), from the source's syntax tree (no import).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("netsenseml", "workloads", "topologies", "testbed")
MAX_FUNCTION_LINES = 60
MAX_CONSTRUCTOR_PARAMS = 12
#: folders not held to the limits yet: folder -> why (drop the entry once it meets them)
EXCLUDE: dict[str, str] = {}


def held() -> list[Path]:
    """Every module of the packages outside ``EXCLUDE``."""
    return [path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
            if not any(path.is_relative_to(ROOT / folder) for folder in EXCLUDE)]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    return n - 1 if a.args or a.posonlyargs else n  # less self


def oversized(path: Path) -> tuple[list[str], list[str]]:
    """(functions over the line limit, classes over the parameter limit) of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long, wide = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long.append(f"{node.name} ({lines} lines)")
        elif isinstance(node, ast.ClassDef):
            init = next((b for b in node.body if isinstance(b, ast.FunctionDef)
                         and b.name == "__init__"), None)
            if init is not None and _params(init) > MAX_CONSTRUCTOR_PARAMS:
                wide.append(f"{node.name} ({_params(init)} parameters)")
    return long, wide


def test_held_modules_keep_the_limits() -> None:
    over: dict[str, list[str]] = {}
    for path in held():
        long, wide = oversized(path)
        if long or wide:
            over[str(path.relative_to(ROOT))] = long + wide
    assert not over, f"over the limits: {over}"
    assert len((ROOT / "netsenseml" / "hooks.py").read_text().splitlines()) < 450


def main() -> None:
    n_long = n_wide = 0
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            long, wide = oversized(path)
            n_long, n_wide = n_long + len(long), n_wide + len(wide)
            if long or wide:
                print(f"{path.relative_to(ROOT)}: {', '.join(long + wide)}")
    print(f"functions over {MAX_FUNCTION_LINES} lines: {n_long}; classes with more than "
          f"{MAX_CONSTRUCTOR_PARAMS} constructor parameters: {n_wide}")


if __name__ == "__main__":
    sys.exit(main())
