"""The tests are laid out as the packages are, and no test file imports from another.

* ``tests/<name>/`` holds the tests of the package ``<name>`` (``netsenseml``,
  ``workloads``, ``topologies``) or of ``testbed/<name>``, and every such package has one;
  the one folder of tests that
  crosses packages is listed in ``ACROSS`` with its reason. Folders without test files
  (``tests/jobs``: scripts the tests run as own jobs; ``data/``) are not tests' homes.
* What two test files share lives in a helper module named for what it holds
  (``tests/cli/invoke.py``, ``tests/workloads/ranks.py``, ...), never in a ``test_*.py``:
  importing a test module runs its collection-time code and ties one test file's edits to
  another's (issue 43 counted 31 such imports).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
TOP_PACKAGES = ("netsenseml", "workloads", "topologies")

#: Test folders that belong to no single package, with why.
ACROSS = {
    "reliability": "whole-command failure contracts (bad input, full disks, interruptions, "
    "damaged results, leftovers): each one runs the `netsense` command through several "
    "packages at once",
}


def _imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_no_test_file_imports_another_test_file() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for name in _imported_modules(path):
            parts = name.split(".")
            if parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:]):
                found.append(f"{path.relative_to(ROOT).as_posix()} imports {name}")
    assert not found, "move the shared helper into a helper module: " + "; ".join(found)


def test_every_test_folder_mirrors_a_package() -> None:
    homes = set(TOP_PACKAGES) | {p.parent.name for p in (ROOT / "testbed").glob("*/__init__.py")}
    folders = sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    untested = sorted(homes - {f.name for f in folders})
    assert not untested, f"packages without a test folder of their own: {untested}"
    stray = []
    for folder in folders:
        if folder.name not in homes and folder.name not in ACROSS:
            stray.append(folder.name)
        if not (folder / "__init__.py").is_file():
            stray.append(f"{folder.name} (no __init__.py)")
    assert not stray, f"test folders that mirror no package: {stray}"
