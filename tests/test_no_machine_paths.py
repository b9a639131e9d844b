"""No tracked file names a path of the machine it was built on: a build folder
(``/work/...``), a run folder under ``/tmp/s9...``, root's or a user's home. Such a path
means nothing on a reader's machine (issue 44: 26 lines of results/README.md named folders
that existed only on one build machine).

Allowed, and why:
- ``/home/netsense``: the container image's user home (Containerfile, container/), a real
  path inside the image;
- ``/root/.pyenv`` in tests/cli/test_rootless.py's docstring: it describes why a test skips
  on a machine whose interpreter lives there, not a folder a reader should open;
- ``/tmp`` as such (a default in code, ``/tmp/x`` in an example) is not matched: only
  ``/tmp/s9`` (the build machines' run folders) is.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATTERN = re.compile(r"/work/|/tmp/s9|/root/|/home/[A-Za-z_][\w.-]*")
ALLOWED = (
    ("Containerfile", "/home/netsense"),
    ("container/", "/home/netsense"),
    ("tests/cli/test_rootless.py", "/root/"),
    ("tests/test_no_machine_paths.py", ""),
)


def test_no_build_machine_paths_in_tracked_files() -> None:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                            check=True).stdout.decode().split("\0")
    found = []
    for name in filter(None, listed):
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (figures)
        for n, line in enumerate(text.splitlines(), 1):
            for m in PATTERN.finditer(line):
                if any(name.startswith(f) and m.group(0).startswith(a)
                       for f, a in ALLOWED):
                    continue
                found.append(f"{name}:{n}: {m.group(0)}")
    assert not found, "build-machine paths:\n" + "\n".join(found[:40])
