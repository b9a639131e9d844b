"""The analysis commands (sweep, plot, report, ...) as a typer app of their own, for tests
that drive them through ``typer.testing.CliRunner`` without the whole ``netsense`` CLI."""

from __future__ import annotations

import typer

from testbed.cli.analysis import register


def analysis_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _main() -> None:  # a group, so commands are addressed by name as in netsense
        pass

    register(app)
    return app
