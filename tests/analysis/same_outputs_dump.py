"""What ``same_outputs.sh`` (beside it) compares of export and the calibration, as text: the
scalars of every TensorBoard event file ``netsense export`` wrote (the files' own names and
headers carry a time stamp and the host), and the calibration's facts of every run
(``testbed.simulation.calibrate.load_runs``).

    python tests/analysis/same_outputs_dump.py RUNS TB_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path


def main(root: Path, tb: Path, out: Path) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from testbed.simulation.calibrate import load_runs

    lines = []
    for f in sorted(tb.rglob("*.netsense")):
        rel = str(f.parent.relative_to(tb))
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                lines.append(f"{rel} {ev.step} {ev.wall_time!r} {v.tag} {v.simple_value!r} "
                             f"{v.metadata.summary_description!r}")
    (out / "export.txt").write_text("\n".join(lines) + "\n")
    facts = [asdict(f) for f in load_runs(root)]
    for f in facts:
        f["path"] = str(Path(f["path"]).relative_to(root))
    (out / "calibrate.json").write_text(json.dumps(facts, indent=1, sort_keys=True,
                                                   default=str))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
