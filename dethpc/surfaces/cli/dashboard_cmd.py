"""``dethpc dashboard``: serve the read-only web dashboard (``dethpc.surfaces.dashboard``)."""

from __future__ import annotations

import typer

from dethpc.surfaces.cli.common import ENV


def dashboard(port: int = typer.Option(0, "--port", "-p",
                                       help="port to listen on (0: a free one, printed)"),
              host: str = typer.Option("127.0.0.1", "--host",
                                       help="address to listen on (default: this machine "
                                            "only; reach it with the printed ssh -L line)"),
              ) -> None:
    """Serve a read-only web dashboard of your experiments (an admin's: everyone's),
    behind a random access token; needs the ``dashboard`` extra."""
    from dethpc.common.errors import DethpcError
    from dethpc.control.experiments import current_user
    from dethpc.surfaces.dashboard.serve import check_installed, serve

    check_installed()
    if not 0 <= port <= 65535:
        raise DethpcError(f"--port {port} is not allowed: 0 (a free port) to 65535")
    serve(ENV.store, current_user(), host=host, port=port)
