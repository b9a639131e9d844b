"""The ``netsense`` command (typer): run, list, doctor, clean, sweep, plot, report."""

from testbed.cli.app import app

__all__ = ["app"]
