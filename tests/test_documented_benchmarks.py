"""Every benchmark command the documentation writes starts, as written.

Why: a benchmark is run by hand, months after it was written, from a line in a README; when
that line fails at import (a script named like a package it imports shadows it: Python puts
the script's own folder first on ``sys.path``) nobody notices until a reader does. So every
``benchmarks/<name>.py`` or ``.sh`` named in the Markdown files, the Makefile and the
benchmarks' own docstrings is started the way a reader would, ``python benchmarks/<name>.py
--help`` from the repository root, and must print its usage and exit 0. ``--help`` reaches
every import and the argument parser, and runs nothing heavy; ``test_benchmarks_tiny.py``
runs each one at a tiny size.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MENTION = re.compile(r"benchmarks/([A-Za-z0-9_]+\.(?:py|sh))")


def documents() -> list[Path]:
    docs = [p for p in ROOT.rglob("*.md")
            if not {".venv", "results", "node_modules"} & set(p.relative_to(ROOT).parts)]
    return sorted([*docs, ROOT / "Makefile", *(ROOT / "benchmarks").glob("*.py"),
                   *(ROOT / "benchmarks").glob("*.sh")])


def documented_scripts() -> dict[str, list[str]]:
    """script name -> the files that mention it."""
    found: dict[str, list[str]] = {}
    for doc in documents():
        for name in MENTION.findall(doc.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(name, []).append(str(doc.relative_to(ROOT)))
    return found


def test_documentation_names_only_benchmarks_that_exist() -> None:
    missing = {name: where for name, where in documented_scripts().items()
               if not (ROOT / "benchmarks" / name).is_file()}
    assert not missing, f"documented but not in benchmarks/: {missing}"


def test_every_benchmark_is_documented() -> None:
    """The other direction: a benchmark nobody can find from the docs is a dead one."""
    scripts = {p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh")}
    named = {name for name, where in documented_scripts().items()
             if any(w != f"benchmarks/{name}" for w in where)}
    assert scripts - named == set()


def test_every_documented_benchmark_starts_with_help() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {}
    for name in sorted(documented_scripts()):
        argv = (["bash"] if name.endswith(".sh") else [sys.executable]) + [
            f"benchmarks/{name}", "--help"]
        procs[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    failed = []
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        if proc.returncode != 0 or not out.strip():
            last = (err.strip().splitlines() or ["(no output)"])[-1]
            failed.append(f"benchmarks/{name} --help: exit {proc.returncode}: {last}")
    assert not failed, "\n".join(failed)

