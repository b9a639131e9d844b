"""The README's own-job snippet: the python block right after its marker, as a reader copies it
(run under torchrun by test_readme_job.py, compared with examples/my_job.py by the own-job test)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- snippet: own-job -->"


def readme_snippet() -> str:
    """The python block right after the README's marker, character for character."""
    text = (REPO / "README.md").read_text()
    assert MARKER in text, "README lost its own-job snippet marker"
    m = re.search(r"```python\n(.*?)```", text[text.index(MARKER):], re.S)
    assert m, "no python block after the marker"
    return m.group(1)
