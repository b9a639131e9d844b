"""Loading a topology file as ``mn --custom FILE --topo NAME,ARGS`` does, under the Python
that runs the ``mn`` script (its shebang, often the system's, which may lack pydantic and
this package): ``MN_LOAD`` execs the file, builds ``topos[NAME]`` with the integer
arguments and prints its worker hosts and named links."""

from __future__ import annotations

import shutil

import pytest


def mn_interpreter() -> str:
    """The Python that runs the `mn` script (its shebang), often the system's."""
    mn = shutil.which("mn")
    if mn is None:
        pytest.skip("no mn on PATH")
    with open(mn) as fh:
        first = fh.readline()
    if not first.startswith("#!"):
        pytest.skip(f"{mn} is not a script")
    return first[2:].split()[0]


MN_LOAD = """
import sys
sys.path.pop(0)  # like the mn script, whose own folder (not the cwd) is first on the path
customs = {}
path, name, *args = sys.argv[1:]
exec(compile(open(path).read(), path, "exec"), customs, customs)
topo = customs["topos"][name](*[int(a) for a in args])
print(" ".join(topo.worker_hosts))
print(" ".join(topo.named_links))
"""
