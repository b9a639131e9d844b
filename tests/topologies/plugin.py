"""The worked example of topologies/PLUGINS.md (``pair_topology.py``: two hosts and one
named link, ``cable``), taken from that file so that the documentation is what is tested,
and a scenario that uses it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE = "pair_topology"
KIND = f"{MODULE}:PairTopo"


def write_plugin(folder: Path) -> Path:
    """The ``pair_topology.py`` block of topologies/PLUGINS.md, as a file in ``folder``."""
    text = (REPO / "topologies" / "PLUGINS.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    code = next(b for b in blocks if b.startswith(f"# {MODULE}.py"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{MODULE}.py"
    path.write_text(code)
    return path


def pair_scenario(**topology) -> dict:
    return {
        "name": "pair", "topology": {"kind": KIND, **topology},
        # width 256 (340 kB of gradient a step): the run checks the plug-in's links, not
        # speed, and the default width's steps at 20 Mbit/s made this test a minute long
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32, "steps": 30,
                     "args": {"width": 256}},
        "methods": ["allreduce"], "probe_links": True, "probe_s": 1.0,
        "timeline": [{"at_s": 0, "kind": "set_rate", "link": "cable", "rate_mbit": 20}],
    }
