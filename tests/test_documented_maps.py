"""The maps a newcomer reads stay current: DESIGN.md's package map names every module, and
every place that lists the ``netsense`` commands lists all of them.

Why a test: both lists are prose, and prose about code goes stale without a sound (DESIGN.md
once omitted eight modules; the command lists omitted ``sensing``). A new module or command
fails here until the map names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from testbed.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("netsenseml", "workloads", "topologies", "testbed")


def package_map() -> str:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    start = text.index("## Packages and the direction of their dependencies")
    return text[start:text.index("\n## ", start + 1)]


def test_design_package_map_names_every_module() -> None:
    section = package_map()
    missing = []
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if p.name == "__init__.py":
                continue
            folder = p.parent.relative_to(ROOT).as_posix()
            if p.stem == "__main__":
                named = "__main__" in section and folder.split("/")[-1] in section
            else:
                named = re.search(rf"(?<![\w]){re.escape(p.stem)}(?![\w])", section) is not None
            if not named:
                missing.append(p.relative_to(ROOT).as_posix())
    assert not missing, f"DESIGN.md's package map does not name: {', '.join(missing)}"


def commands() -> set[str]:
    """The commands a user is shown (an old name kept working is hidden, and listed nowhere)."""
    return {name for name, cmd in typer.main.get_command(app).commands.items()  # type: ignore[attr-defined]
            if not cmd.hidden}


def test_every_command_list_names_every_command() -> None:
    cmds = commands()
    assert {"run", "sweep", "plot", "report", "sensing"} <= cmds  # the reader itself
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = {m for line in readme.splitlines() if line.startswith("| `")
             for m in re.findall(r"`([a-z]+)[ `]", line.split("|")[1])}
    init_doc = (ROOT / "testbed/cli/__init__.py").read_text(encoding="utf-8").split('"""')[1]
    app_doc = (ROOT / "testbed/cli/app.py").read_text(encoding="utf-8").split('"""')[1]
    design = package_map()
    lists = {"README.md's command table": table,
             "testbed/cli/__init__.py's docstring": set(re.findall(r"[a-z]+", init_doc)),
             "testbed/cli/app.py's docstring": set(re.findall(r"[a-z]+", app_doc)),
             "DESIGN.md's package map": set(re.findall(r"[a-z]+", design))}
    stale = {where: sorted(cmds - names) for where, names in lists.items() if cmds - names}
    assert not stale, f"commands missing from: {stale}"
