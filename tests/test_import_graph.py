"""The import graph of the project's packages has no cycle, and no import hides inside a
function to dodge one.

Why a test and not a sentence in DESIGN.md: a cycle between two modules is easy to add and
easy to hide (move one import into the function that needs it, and Python stops
complaining), and a hidden cycle is what makes a module impossible to understand, test or
move on its own. So the graph is read from the source (``ast``, nothing is imported):

* every ``import``/``from ... import`` of a project module counts, wherever it stands: at
  module level, under ``if TYPE_CHECKING:``, in a ``try``, or inside a function, and so does
  ``importlib.import_module("literal.name")``. An import inside a function that closes a
  cycle is therefore still a cycle here;
* an edge goes to the module named, or to the module a ``from pkg import name`` names when
  ``name`` is a submodule; a package's ``__init__`` is an edge only when imported itself;
* a cycle is any strongly connected set of two or more modules (modules, not packages:
  ``a.x -> b.y -> a.z`` is no cycle unless ``a.z`` leads back to ``b.y``).

Imports inside functions are allowed only for start-up cost, and each one is covered by a
rule of ``LAZY`` below with its reason: a CLI command must answer ``--help`` and refuse bad
input without importing the orchestrator, pydantic's schemas or torch; the worker's heavy
imports stay out of the zygote's parent until it forks. A new lazy import of a project module
that no rule covers fails the test: hoist it to the top of the module, or, if it really is
for start-up cost, add the rule with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("netsenseml", "workloads", "topologies", "testbed")

#: Lazy (function-level) imports of project modules allowed for start-up cost. A rule is
#: (importer prefix, imported prefix): it covers an import when both names start with
#: them (a prefix ending in "." matches a package's modules; without, one module).
LAZY: dict[tuple[str, str], str] = {
    ("testbed.cli.", ""): "a CLI command imports what it runs when it runs: `netsense --help`, "
    "`netsense list` and a one-line refusal of a bad option stay fast",
    ("workloads.zygote", "workloads.train"): "the zygote's parent imports the worker (torch) "
    "in the background and forks ranks from it; importing it at the top would make every "
    "caller of the zygote pay for torch",
    ("topologies.registry", "topologies.base"): "topologies.base imports Mininet's node "
    "classes; the registry is read by the schema, which must not need Mininet",
    ("topologies.base", "topologies.links"): "links pull Mininet's link classes; only "
    "building a network needs them",
    ("testbed.orchestration.executors", "testbed.orchestration."): "the run machinery "
    "(scenario models, emulation, zygote) is loaded only where runs execute: by the local "
    "executor's session, or inside a Ray task; `sweep --dry-run` and the Ray driver never "
    "load it",
    ("testbed.orchestration.staged", ""): "the Ray driver imports staged to install a run's "
    "folder and never runs one; the run machinery is loaded only inside the Ray task",
    ("testbed.config.schemas", "testbed.config."): "`netsense schema` loads only the model "
    "it prints",
    ("testbed.config.scenario", "testbed.emulation.kernel"): "kernel probes run only for "
    "scenarios that ask for netem fields",
    ("testbed.config.sweep", "testbed.config."): "a sweep file's suggestions and the "
    "scenario module are needed only on refusal or expansion",
    ("testbed.emulation.emulated_network", "topologies.links"): "the shaped links subclass Mininet's; "
    "the emulation imports Mininet only when it builds a network",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    lazy: bool  # inside a function body


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            out[module_name(p)] = p
    return out


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_pkg: bool,
             modules: dict[str, Path]) -> list[str]:
    """The project modules an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    base = node.module or ""
    if node.level:  # relative import
        anchor = here.split(".")
        anchor = anchor if is_pkg else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in modules:
            out.append(sub)
        elif base in modules:
            out.append(base)
    return out


def _import_module_arg(node: ast.AST) -> str | None:
    """The module of ``importlib.import_module("a.b")`` (a literal name), else None: an
    import by string is an import all the same."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    f = node.func
    called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    arg = node.args[0].value
    return arg if called == "import_module" and isinstance(arg, str) else None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(child, name, is_pkg, modules):
                    if target != name:
                        found.append(Import(name, target, child.lineno, lazy))
            dynamic = _import_module_arg(child)
            if dynamic in modules and dynamic != name:
                found.append(Import(name, dynamic, child.lineno, lazy))
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, inner)

    visit(tree, False)
    return found


def all_imports() -> list[Import]:
    modules = project_modules()
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # recursion depth is bounded by the module count
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def lazy_rule(imp: Import) -> str | None:
    for (importer, imported), reason in LAZY.items():
        if imp.importer.startswith(importer) and imp.imported.startswith(imported):
            return reason
    return None


def describe(comp: list[str], edges: list[Import]) -> str:
    inside = set(comp)
    lines = [f"{e.importer} -> {e.imported} (line {e.line}{', in a function' if e.lazy else ''})"
             for e in edges if e.importer in inside and e.imported in inside]
    return "cycle between " + ", ".join(comp) + ":\n    " + "\n    ".join(sorted(set(lines)))


def test_the_reader_finds_imports_at_every_level() -> None:
    """The reader itself: a known module-level, TYPE_CHECKING and function-level import."""
    edges = all_imports()
    by = {(e.importer, e.imported): e for e in edges}
    assert ("testbed.orchestration.run", "testbed.orchestration.worker_records") in by
    assert not by[("testbed.orchestration.run", "testbed.orchestration.worker_records")].lazy
    assert by[("workloads.zygote", "workloads.train")].lazy
    assert cycles([Import("a", "b", 1, False), Import("b", "c", 1, True),
                   Import("c", "a", 1, False), Import("c", "d", 1, False)]) == [["a", "b", "c"]]


def test_no_import_cycle_between_modules() -> None:
    edges = all_imports()
    found = cycles(edges)
    assert not found, "\n".join(describe(c, edges) for c in found)


def test_every_lazy_project_import_is_for_start_up_cost() -> None:
    uncovered = [f"{e.importer} imports {e.imported} inside a function (line {e.line})"
                 for e in all_imports() if e.lazy and lazy_rule(e) is None]
    assert not uncovered, (
        "hoist these to module level, or add a LAZY rule with the start-up reason:\n  "
        + "\n  ".join(uncovered))


def test_every_lazy_rule_is_used() -> None:
    """A rule nothing needs any more is a stale excuse: remove it."""
    used = {next(k for k in LAZY if e.importer.startswith(k[0]) and e.imported.startswith(k[1]))
            for e in all_imports() if e.lazy and lazy_rule(e) is not None}
    assert set(LAZY) - used == set()


def module_level_closure(start: str, edges: list[Import]) -> set[str]:
    """Every project module that importing ``start`` runs: its module-level imports, theirs,
    and the packages (``__init__``) above each module imported."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.lazy:
            graph.setdefault(e.importer, set()).add(e.imported)
    modules = project_modules()
    seen: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        todo += [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]
        todo += sorted(graph.get(m, ()))
    return seen


def test_no_lazy_import_of_what_is_imported_anyway() -> None:
    """A lazy import saves start-up time only if the module is not loaded at the top by
    then: one whose target the importer's own top-level imports already load is noise."""
    edges = all_imports()
    pointless = sorted({f"{e.importer} imports {e.imported} inside a function (line {e.line}), "
                        "but its top-level imports load it anyway"
                        for e in edges if e.lazy
                        and e.imported in module_level_closure(e.importer, edges)})
    assert not pointless, "hoist these:\n  " + "\n  ".join(pointless)


def test_the_analysis_imports_neither_the_orchestration_nor_the_emulation() -> None:
    """Layers by meaning: the analysis reads run folders; what it shares with the runs that
    write them (a record's true status, the commit) lives in ``testbed.common``."""
    up = [f"{e.importer} imports {e.imported} (line {e.line})" for e in all_imports()
          if e.importer.startswith("testbed.analysis")
          and e.imported.startswith(("testbed.orchestration", "testbed.emulation"))]
    assert not up, "\n".join(up)


#: The configuration's one import of the emulation, with why it stays: validating a scenario's
#: netem fields asks this kernel (a LAZY rule above covers it too).
CONFIG_ASKS_THE_EMULATION = {("testbed.config.scenario", "testbed.emulation.kernel"):
                             "a scenario's delay/jitter/loss are refused on a kernel without "
                             "sch_netem before anything is built"}


def test_the_configuration_sits_below_the_emulation() -> None:
    """Layers by meaning: a scenario's description (rates, the faithful range it is held
    against, the estimate, the dilation rule) is read without the code that builds networks;
    the emulation reads the configuration, not the other way round."""
    up = sorted({f"{e.importer} imports {e.imported} (line {e.line})" for e in all_imports()
                 if e.importer.startswith("testbed.config")
                 and e.imported.startswith("testbed.emulation")
                 and (e.importer, e.imported) not in CONFIG_ASKS_THE_EMULATION})
    assert not up, "\n".join(up)
