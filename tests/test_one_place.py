"""Two ideas live in one place each (issue 51's targets), read from the source:

* **the method spec** (``netsenseml.methods``): no module compares a method's name with a
  registered method name (``spec.name == "powersgd"``, ``method.startswith("topk")``) -- it
  asks the spec (``spec.dense_steps``, ``spec.topk_ratio``, ``spec.reference`` ...); and a
  method's text is parsed only where it enters (:data:`ENTRIES`, each with where from);
* **the dilation value** (``netsenseml.dilation.Dilation``): no module multiplies or divides
  by the factor itself (``x * k``, ``rate / dilation.k``) -- it asks the value
  (``real_s``, ``virtual_mbit`` ...). A module whose ``k`` means something else is listed in
  :data:`OTHER_K` with what it means.

Each list also fails when an entry no longer applies, so it only shrinks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from netsenseml import methods

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("netsenseml", "testbed", "workloads", "topologies")
SPEC_MODULE = "netsenseml/methods.py"
DILATION_MODULE = "netsenseml/dilation.py"

#: An expression that holds a method's text or name: its last name is one of these.
_METHOD_HOLDER = re.compile(r"(^|_)(method|methods|name|m|baseline)$")
#: The functions of ``netsenseml.methods`` that read a method's text.
PARSERS = ("parse", "check", "check_findable", "as_spec", "load", "read", "level_spec")

#: Where a method's text enters, so a module may parse it (a spec passes ``parse`` /
#: ``as_spec`` unchanged).
ENTRIES = {
    "netsenseml/hooks.py": "hooks.register: the method a DDP job names",
    "netsenseml/compress/__init__.py": "compress.get: a compressor named by text",
    "netsenseml/convergence.py": "the convergence table's level keys (a file)",
    "netsenseml/accordion.py": "its light / heavy options name ladder levels as text",
    "testbed/config/scenario.py": "a scenario's methods",
    "testbed/config/sweep.py": "a sweep file's methods",
    "testbed/config/estimate.py": "estimate(scenario, method): the command's or sweep's text",
    "testbed/config/factor.py": "wire_share / codec_specs / per_bucket: a spec, or a command's text",
    "testbed/cli/app.py": "the command line",
    "testbed/cli/profile.py": "the command line (--codecs)",
    "testbed/analysis/tables.py": "run folders' config.json and records",
    "testbed/simulation/advise.py": "--methods",
    "testbed/simulation/advise_validation.py": "the run folders' config.json",
    "testbed/simulation/calibrate.py": "the calibration runs' config.json",
    "testbed/simulation/sim.py": "a job's method (jobs cross to their process as data)",
    "testbed/simulation/paced.py": "a run's config.json, a job's method",
    "testbed/simulation/figure.py": "the prediction CSV",
    "workloads/train.py": "the worker's --method",
    "workloads/profile.py": "--codecs",
    "workloads/host_timing.py": "--codecs",
}

#: Modules whose ``k`` is not the dilation factor, with what it is.
OTHER_K = {
    "netsenseml/compress/sparse.py": "the count of kept elements (top-k, random-k)",
    "testbed/config/events.py": "a multiple of a stream step or of a period",
    "testbed/simulation/calibrate.py": "the fitted contention share",
    "testbed/simulation/platform.py": "hosts per leaf",
}


def _sources() -> Iterator[tuple[str, ast.AST]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return None


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _names_a_method(text: str) -> bool:
    return text.partition(":")[0].lower() in methods.names()


def _holds_method(node: ast.AST) -> bool:
    name = _last_name(node)
    return name is not None and _METHOD_HOLDER.search(name) is not None


def method_name_switches(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, code)`` of each comparison of a method's name with a registered name, and
    each ``startswith`` of one, in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if (any(_names_a_method(s) for side in sides for s in _strings(side))
                    and any(_holds_method(side) for side in sides)):
                found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "startswith" and _holds_method(node.func.value)
              and any(_names_a_method(s) for a in node.args for s in _strings(a))):
            found.append((node.lineno, ast.unparse(node)))
    return found


def method_parses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, code)`` of each call of a :data:`PARSERS` function of ``netsenseml.methods``."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in PARSERS and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "methods"):
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.ImportFrom) and node.module == "netsenseml.methods"
              and any(a.name in PARSERS for a in node.names)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def factor_arithmetic(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, code)`` of each product or quotient with the dilation factor as an operand:
    a name ``k``, an attribute ``.k``, or a name or attribute with ``dilation`` in it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv):
            operands = [node.left, node.right]
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult | ast.Div):
            operands = [node.target, node.value]
        else:
            continue
        for o in operands:
            name = _last_name(o) if isinstance(o, ast.Name | ast.Attribute) else None
            if name is not None and (name == "k" or "dilation" in name.lower()):
                found.append((node.lineno, ast.unparse(node)))
                break
    return found


def test_no_method_name_switch_outside_the_spec() -> None:
    found = [f"{path}:{line}: {code}" for path, tree in _sources() if path != SPEC_MODULE
             for line, code in method_name_switches(tree)]
    assert not found, ("ask the method spec (a MethodSpec / MethodInfo property) instead of "
                       "comparing names: " + "; ".join(found))


def test_method_text_is_parsed_only_where_it_enters() -> None:
    parsing = {path for path, tree in _sources() if path != SPEC_MODULE and method_parses(tree)}
    outside = sorted(parsing - set(ENTRIES))
    assert not outside, (f"{outside} parse a method's text: take the spec from where it "
                         "entered (or list the module in ENTRIES with where the text comes from)")
    stale = sorted(set(ENTRIES) - parsing)
    assert not stale, f"ENTRIES lists modules that no longer parse a method: {stale}"


def test_no_dilation_factor_arithmetic_outside_the_value() -> None:
    found, other = [], set()
    for path, tree in _sources():
        if path == DILATION_MODULE:
            continue
        hits = factor_arithmetic(tree)
        if path in OTHER_K:
            if hits:
                other.add(path)
            continue
        found += [f"{path}:{line}: {code}" for line, code in hits]
    assert not found, "ask netsenseml.dilation.Dilation (real_s, virtual_s, real_mbit, ...): " \
        + "; ".join(found)
    stale = sorted(set(OTHER_K) - other)
    assert not stale, f"OTHER_K lists modules without such arithmetic any more: {stale}"


def test_the_checks_see_what_they_look_for() -> None:
    """Each detector on a snippet with and without what it looks for (not vacuous)."""
    bad = ast.parse('if spec.name == "powersgd" or job.method.startswith("topk"): pass\n'
                    'x = methods.parse(text)\n'
                    'y = rate / self.dilation.k * k\n')
    good = ast.parse('if spec.dense_steps or level == "topk" or reduction == "allreduce": pass\n'
                     'x = methods.resolve(spec)\n'
                     'y = Dilation(k).real_mbit(rate) * n\n')
    assert len(method_name_switches(bad)) == 2 and not method_name_switches(good)
    assert len(method_parses(bad)) == 1 and not method_parses(good)
    assert len(factor_arithmetic(bad)) == 2 and not factor_arithmetic(good)
