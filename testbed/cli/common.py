"""What every ``netsense`` command shares: the error line, deprecation notes, option types.

One error style for the whole command line: ``error: <what> `` on stderr, exit 2 for bad
input, whether the command itself refuses the input or the argument parser does
(``testbed.cli.app.main`` reformats the parser's usage errors the same way), and the
training worker (``python -m workloads.train``) prints the same form.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from testbed.common import bounded

EXIT_BAD_INPUT = 2
DEFAULT_RESULTS = Path("results")

#: ``--results/-r``: the same option, the same meaning, on every command that reads or
#: writes run folders.
ResultsOption = Annotated[Path, typer.Option(
    "--results", "-r", metavar="DIR", help="results folder: runs are written to and read from here")]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="PATH=VALUE", help="override a scenario field: dotted.path=value (YAML value); repeatable")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr and exit; the contract for bad input."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def away_from_committed(folder: Path, told: str) -> Path | None:
    """Where a command writes instead of ``folder`` when git tracks ``folder`` (a committed
    results tree, ``results/runs/``: a default output inside it would leave untracked or
    changed files in the checkout): its view folder (``testbed.common.outputs.view_folder``),
    said on stderr with ``told``, the option that writes elsewhere; None when git does not
    track ``folder`` (outputs go where they always went)."""
    from testbed.common.outputs import tracked, view_folder

    if not tracked(folder):
        return None
    view = view_folder(folder)
    typer.echo(f"note: {folder} is a committed results tree (git tracks it): not writing into "
               f"it; output in {view} ({told} to write elsewhere)", err=True)
    return view


def deprecated(old: str, new: str) -> None:
    """One line on stderr for an old option spelling that still works."""
    typer.echo(f"note: {old} is deprecated; use {new}", err=True)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set a.b=value`` items as {dotted path: YAML-parsed value}."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            fail(f"--set {item!r}: expected dotted.path=value")
        key, raw = item.split("=", 1)
        if len(raw.encode()) > MAX_SET_BYTES:
            fail(f"--set {key.strip()}: value longer than {MAX_SET_BYTES} bytes")
        try:  # values are YAML under the same bounds as files; non-YAML text stays a string
            out[key.strip()] = bounded.parse_yaml(raw, f"--set {key.strip()}")
        except bounded.BoundError as exc:
            if "YAML syntax error" not in str(exc):
                fail(str(exc))
            out[key.strip()] = raw
    return out


MAX_SET_BYTES = 64 * 1024


def preflight() -> None:
    """Refuse (exit 2) before building anything when this machine cannot emulate; enter
    the rootless mode when this user may not create interfaces here.

    Rootless: the process replaces itself with the same command inside its own user +
    network + mount namespace (testbed.emulation.rootless) and comes back here, inside.
    """
    from testbed.emulation import leftovers, rootless

    mode = rootless.choose_mode()
    if mode.name == "none":
        fail(f"cannot emulate here: {mode.detail}; to fix: {mode.fix} (see `netsense doctor`)")
    for tool in ("mnexec", "iperf3", "tc", "ip"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found; see `netsense doctor`")
    if mode.name == "rootless" and not rootless.in_namespace():
        try:
            state_dir = leftovers.default_state_dir()
            leftovers.ensure_own_dir(state_dir)
        except OSError as exc:
            fail(str(exc))
        rootless.reexec(sys.argv[1:], state_dir)
    if rootless.in_namespace():
        try:
            rootless.prepare_namespace()
        except OSError as exc:
            fail(str(exc))


def check_runnable(scn: Any, folder: Path) -> None:
    """Refuse (exit 2) before anything is built where ``folder`` cannot be written
    (``--results``) or the scenario's workers need GPUs that are not visible (NCCL needs a
    GPU per emulated worker); then ``preflight``, unless the workers are real hosts
    (nothing is emulated on this machine)."""
    from testbed.common.outputs import OutputError, check_dir
    from testbed.orchestration import gpus

    try:
        check_dir(folder, "--results")
    except OutputError as exc:
        fail(str(exc))
    try:
        gpus.plan(scn.workload.device, scn.workload.backend, scn.world_size,
                  gpus.visible_gpus())
    except gpus.GpuPlanError as exc:
        fail(str(exc))
    if scn.topology.kind != "hosts":
        preflight()


#: A model and its batch, as the commands that time one (``profile``, ``doctor --profile``)
#: take them; each is checked by :func:`check_workload` before any process starts.
ModelOption = Annotated[str | None, typer.Option(
    "--model", metavar="NAME", help="model (netsense list), or package.module:factory")]
BatchOption = Annotated[int | None, typer.Option(
    "--batch-size", metavar="N", help="batch size of one worker")]
DatasetOption = Annotated[str | None, typer.Option(
    "--dataset", metavar="NAME",
    help="dataset (default: the first that fits the model and needs no --data-dir)")]
ModelArgsOption = Annotated[str, typer.Option(
    "--model-args", metavar="K=V,...", help="model knobs, e.g. width=512")]


def check_workload(model: str | None, batch_size: int | None, dataset: str | None,
                   model_args: str, data_dir: str | None = None
                   ) -> tuple[str, dict[str, Any]]:
    """``(dataset, knobs)`` for a model and batch given as options (the dataset chosen when
    not given; knobs with the model's defaults filled in, as the worker resolves them), or
    one error line naming the option and exit 2. Imports no torch."""
    from workloads import registry

    if model is None:
        fail(f"--model: required; accepted: {registry.accepted_models()}")
    if batch_size is None:
        fail("--batch-size: required; a positive integer")
    try:
        registry.check_model_name(model)
    except registry.RegistryError as exc:
        fail(f"--model: {exc}")
    plugin = registry.is_plugin(model)
    entry = None if plugin else registry.model_entry(model)
    try:
        given = registry.parse_knobs(model_args)
        knobs = given if entry is None else entry.resolve_knobs(given)
    except registry.RegistryError as exc:
        fail(f"--model-args: {exc}")
    fitting = registry.dataset_names() if entry is None else registry.datasets_for(entry)
    if dataset is None:
        usable = [n for n in fitting if not registry.dataset_entry(n).needs_data_dir]
        if plugin or not usable:
            fail(f"--dataset: required for {model}; accepted: {', '.join(fitting)}")
        dataset = usable[0]
    if dataset not in registry.dataset_names():
        fail(f"--dataset: {dataset!r} unknown; accepted: {', '.join(fitting)}")
    if dataset not in fitting:
        fail(f"--dataset: {dataset!r} does not fit model {model}; accepted: "
             f"{', '.join(fitting)}")
    data = registry.dataset_entry(dataset)
    if data.needs_data_dir and not data_dir:
        fail(f"--dataset {dataset}: read from files: give --data-dir")
    if batch_size < 1 or (data.train_samples is not None and batch_size > data.train_samples):
        top = f"1..{data.train_samples}" if data.train_samples else "a positive integer"
        fail(f"--batch-size: {batch_size} is not allowed for {dataset}; allowed: {top}")
    return dataset, knobs
