"""The ``netsense`` command (typer): run, show, list, schema, doctor, clean, convergence, sweep, plot, report,
compare, pack, ab, export, sensing, simulate, profile, advise."""

from testbed.cli.app import app, main

__all__ = ["app", "main"]
