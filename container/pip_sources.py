"""Print the build arguments that give a container build this machine's pip sources.

Why: where PyPI is reached only through a TLS proxy with a local CA, or torch's CPU build
lies in a local wheel folder (`pip config list` shows find-links, file:// indexes, cert), a
container build sees none of that.  This prints, one per line, the `-v SRC:DST:ro` mounts
and `--build-arg PIP_...=` values that hand the same sources (read-only) to the build, and
`--build-arg TORCH_INDEX=` (empty) when a wheel folder already holds a CPU torch, so the
build never asks an index it cannot reach.  Run with the python whose pip config matters;
prints nothing when pip has no local sources.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CERT_IN_BUILD = "/run/netsense-pip-cert.pem"
PRECEDENCE = (":env:", "site", "user", "global")  # pip: environment beats config files


def pip_config() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, check=False).stdout
    best: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        key, sep, val = line.partition("=")
        if not sep:
            continue
        section, _, name = key.rpartition(".")
        rank = PRECEDENCE.index(section) if section in PRECEDENCE else len(PRECEDENCE)
        if name not in best or rank < best[name][0]:
            best[name] = (rank, val.strip().strip("'\""))
    return {name: val for name, (_, val) in best.items()}


def local_path(item: str) -> Path | None:
    path = item[len("file://"):] if item.startswith("file://") else item
    return Path(path) if path.startswith("/") and Path(path).exists() else None


def build_args(config: dict[str, str]) -> list[str]:
    args: list[str] = []
    mounts: set[Path] = set()
    cpu_torch = False
    for name in ("find-links", "index-url", "extra-index-url"):
        items = config.get(name, "").split()
        kept = []
        for item in items:
            path = local_path(item)
            if path is None:
                if "://" in item:  # a remote index: reachable from the build as from here
                    kept.append(item)
                continue
            # an index's pages link to files beside it (../../files/...): mount its parent
            mounts.add(path if name == "find-links" else path.parent)
            if name == "find-links" and any(path.glob("torch-*+cpu-*.whl")):
                cpu_torch = True
            kept.append(item)
        if kept:
            args.append(f"--build-arg=PIP_{name.replace('-', '_').upper()}={' '.join(kept)}")
    for path in sorted(mounts):
        args.append(f"--volume={path}:{path}:ro")
    cert = config.get("cert")
    if cert and Path(cert).is_file():
        args += [f"--volume={cert}:{CERT_IN_BUILD}:ro", f"--build-arg=PIP_CERT={CERT_IN_BUILD}"]
    if cpu_torch:
        args.append("--build-arg=TORCH_INDEX=")
    return args


if __name__ == "__main__":
    print("\n".join(build_args(pip_config())))
