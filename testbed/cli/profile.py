"""``netsense profile``: measure an accelerator profile on the device this machine has, or
check and list a profile file.

    netsense profile --model resnet18 --batch-size 64 [--dataset D] [--model-args K=V,...]
                     [--device auto|cpu|cuda] [--steps N] [-o FILE]
    netsense profile --check NAME|FILE

Why: a user with one GPU profiles once, then emulates a cluster of them on any host (the
pacer, ``netsenseml.accelerator``, holds each part of a real step to the profile's times).
The measurement is ``python -m workloads.profile`` in a child process (the testbed never
imports torch); this command checks the options before it starts (one line naming the
option and what is allowed, exit 2, nothing written), and writes the result:

* with ``-o FILE``: into FILE, atomically. A FILE that exists must be a valid profile of
  the same device: the entry is added, or replaces the entry of the same model, knobs and
  batch size. A FILE that exists and is not a valid profile, or that profiles another
  device, is refused (never overwritten: it may be someone's work). A new FILE gets
  ``format: 1``, ``name`` = its stem, ``device`` and ``source`` saying it was measured by
  this command, on which device, on which date;
* without ``-o``: the profile (one entry, no ``name``: a file takes its stem) on stdout.

``--check`` loads a profile (a shipped name or a path) as a run would and lists its
entries; a malformed one is its one-line error, exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli.common import (
    BatchOption,
    DatasetOption,
    ModelArgsOption,
    ModelOption,
    check_workload,
    fail,
)

DEVICES = ("auto", "cpu", "cuda")
MAX_STEPS = 10_000


def same_key(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two entries for the same model, knobs and batch size."""
    return (a.get("model") == b.get("model") and a.get("batch_size") == b.get("batch_size")
            and (a.get("knobs") or {}) == (b.get("knobs") or {}))


def merge(existing: dict[str, Any], entry: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``existing`` (a valid profile's JSON) with ``entry`` added, or replacing the entry
    of the same key; and which of the two happened."""
    out = dict(existing)
    entries = list(existing.get("entries") or [])
    for i, e in enumerate(entries):
        if same_key(e, entry):
            entries[i] = entry
            out["entries"] = entries
            return out, "replaced"
    out["entries"] = [*entries, entry]
    return out, "added"


def listing(prof: Any) -> list[str]:
    """Lines naming a profile and each entry's times (milliseconds)."""
    lines = [f"profile {prof.name}: {prof.device}", f"source: {prof.source}",
             f"{len(prof.entries)} entr{'y' if len(prof.entries) == 1 else 'ies'}:"]
    for e in prof.entries:
        t = e.timing
        codecs = ", ".join(f"{k} {v * 1e3:.3g}" for k, v in sorted(t.codec_s_per_mb.items()))
        buckets = ("buckets by element share" if t.buckets is None else
                   f"{len(t.buckets)} bucket{'' if len(t.buckets) == 1 else 's'}")
        lines.append(f"  {e.label()}: step {t.step_s * 1e3:.4g} ms (forward "
                     f"{t.forward_s * 1e3:.4g}, backward {t.backward_s * 1e3:.4g}, optimizer "
                     f"{t.optimizer_s * 1e3:.4g}); codec ms/MB: {codecs or 'none (free)'}; "
                     f"{buckets}; {t.origin}")
        if t.note:
            lines.append(f"    note: {t.note}")
    return lines


def _check(spec: str) -> None:
    from netsenseml import accelerator

    try:
        prof = accelerator.load(spec)
    except accelerator.ProfileError as exc:
        fail(f"--check: {exc}")
    for line in listing(prof):
        typer.echo(line)


def _existing(path: Path) -> dict[str, Any] | None:
    """The JSON of the valid profile at ``path``, None when there is no file; a file that
    is not a valid profile is refused."""
    from netsenseml import accelerator

    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        accelerator.parse(data, path.stem)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"-o {str(path)!r}: exists and is not a readable profile ({exc}); give a new "
             "file name")
    except accelerator.ProfileError as exc:
        fail(f"-o {str(path)!r}: exists and is not a valid profile ({exc}); give a new "
             "file name or fix it")
    return data


def _measure(argv: list[str]) -> dict[str, Any]:
    """The profile printed by ``python -m workloads.profile``; its refusal as ours."""
    proc = subprocess.run([sys.executable, "-m", "workloads.profile", *argv],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        if proc.returncode == 2 and last.startswith("error: "):
            fail(last[len("error: "):])
        fail(f"profiling failed (exit {proc.returncode}): {last}", code=1)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail("profiling failed: the worker printed no profile", code=1)


DeviceOption = Annotated[str, typer.Option(
    "--device", metavar="auto|cpu|cuda", help="where to measure (auto: cuda when visible)")]
StepsOption = Annotated[int, typer.Option(
    "--steps", metavar="N", help="timed steps (medians; after 2 warm-up steps)")]
CodecsOption = Annotated[str, typer.Option(
    "--codecs", metavar="SPEC,...", help="compressors whose cost per MB to measure "
    "('' for none)")]
ThreadsOption = Annotated[int, typer.Option(
    "--threads", metavar="N", help="CPU threads (0: torch's default, all cores)")]
DataDirOption = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="for datasets read from files")]
ProfileOutOption = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="FILE", help="profile file to write, or to add the entry "
    "to (default: print it)")]
CheckOption = Annotated[str | None, typer.Option(
    "--check", metavar="NAME|FILE", help="load a profile (shipped name or path) and "
    "list its entries; nothing is measured")]


def profile(
    model: ModelOption = None,
    batch_size: BatchOption = None,
    dataset: DatasetOption = None,
    model_args: ModelArgsOption = "",
    device: DeviceOption = "auto",
    steps: StepsOption = 20,
    codecs: CodecsOption = "fp16,bf16,int8,topk:0.01,randomk:0.01,dgc:0.01",
    threads: ThreadsOption = 0,
    data_dir: DataDirOption = None,
    out: ProfileOutOption = None,
    check: CheckOption = None,
) -> None:
    """Measure an accelerator profile entry on this machine's device (GPU or CPU), or
    --check a profile file.

    The entry (forward, backward, optimizer medians, codec costs per MB, DDP's buckets)
    is what a scenario's `accelerator: {profile: FILE}` paces emulated workers to.
    """
    if check is not None:
        if model is not None or batch_size is not None or out is not None:
            fail("--check: lists a profile; give it without --model, --batch-size or -o")
        _check(check)
        return
    dataset, knobs = check_workload(model, batch_size, dataset, model_args, data_dir)
    assert model is not None and batch_size is not None  # check_workload refuses None
    _check_measure_options(device, steps, threads, codecs)
    existing = _existing_out(out) if out is not None else None
    argv = ["--model", model, "--dataset", dataset, "--batch-size", str(batch_size),
            "--model-args", ",".join(f"{k}={v}" for k, v in knobs.items()),
            "--device", device, "--steps", str(steps), "--threads", str(threads),
            "--codecs", codecs, "--as-profile", out.stem if out is not None else "measured"]
    if data_dir:
        argv += ["--data-dir", data_dir]
    typer.echo(f"measuring {model}{_knobs(knobs)} batch {batch_size} on {dataset}, device "
               f"{device}, {steps} steps ...", err=True)
    measured = _measure(argv)
    if out is None:
        measured.pop("name", None)
        typer.echo(json.dumps(measured, indent=2))
        return
    _write(out, existing, measured, f"{model}{_knobs(knobs)} batch {batch_size}")


def _check_measure_options(device: str, steps: int, threads: int, codecs: str) -> None:
    """One error line naming the option, exit 2, for a device, step count, thread count or
    codec that cannot be measured."""
    from netsenseml import methods

    if device not in DEVICES:
        fail(f"--device: {device!r}; allowed: {', '.join(DEVICES)}")
    if not 1 <= steps <= MAX_STEPS:
        fail(f"--steps: {steps}; allowed: 1..{MAX_STEPS}")
    if threads < 0:
        fail(f"--threads: {threads}; allowed: 0 (torch's default) or a positive integer")
    for spec in (c.strip() for c in codecs.split(",") if c.strip()):
        try:
            parsed = methods.parse(spec, "compressor")
        except ValueError as exc:
            fail(f"--codecs: {exc}")
        if not parsed.codecs():
            fail(f"--codecs: {spec!r} has no codec to time; allowed: fp16, bf16, int8, "
                 "topk:R, randomk:R, dgc:R")


def _existing_out(out: Path) -> dict[str, Any] | None:
    """``-o FILE`` checked as a place to write, and the profile it holds (None: none)."""
    from testbed.common.outputs import OutputError, check_file

    try:
        check_file(out, "-o")
    except OutputError as exc:
        fail(str(exc))
    return _existing(out)


def _write(out: Path, existing: dict[str, Any] | None, measured: dict[str, Any],
           label: str) -> None:
    """The measured entry into ``out``: a new profile, or added to (replacing the same
    key in) the existing one of the same device; then what was done, in one line."""
    from testbed.common import files

    entry = measured["entries"][0]
    if existing is None:
        data, what = measured, f"wrote a new profile {out} with {label}"
    else:
        if existing.get("device") != measured["device"]:
            fail(f"-o {str(out)!r}: a profile of {existing.get('device')!r}; this was "
                 f"measured on {measured['device']!r}: write it to another file")
        data, done = merge(existing, entry)
        what = f"{done} {label} in {out}"
    files.atomic_write_text(out, json.dumps(data, indent=2) + "\n")
    step_ms = 1e3 * (entry["forward_s"] + entry["backward_s"] + entry["optimizer_s"])
    n = len(data["entries"])
    typer.echo(f"{what} ({n} entr{'y' if n == 1 else 'ies'}): step {step_ms:.4g} ms on "
               f"{measured['device']}; a scenario uses it with `accelerator: {{profile: "
               f"{out.resolve()}}}`")


def _knobs(knobs: dict[str, Any]) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in sorted(knobs.items())) + "]"


def register(parent: typer.Typer) -> None:
    """Add ``profile`` to the ``netsense`` command."""
    parent.command("profile")(profile)
