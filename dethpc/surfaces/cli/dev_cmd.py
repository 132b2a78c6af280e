"""``dethpc dev ...``: developer commands; ``dethpc dev cluster up|down|status``.

Owns: the typer apps ``dev_app`` and ``cluster_app`` (the main CLI mounts
``dev_app`` under the name ``dev``). Thin: each command runs
``python -m dethpc.devcluster`` (same output, same exit code), because product code
never imports the dev cluster, a tool beside it (the import contract, docs/architecture.md).
"""

from __future__ import annotations

import subprocess
import sys

import typer

dev_app = typer.Typer(help="Developer tools.", no_args_is_help=True)
cluster_app = typer.Typer(
    help="Real single-host Slurm clusters, one per test lane (4 nodes each; partitions "
    "debug, low, high) for development and CI. Needs root on Debian/Ubuntu.",
    no_args_is_help=True,
)
dev_app.add_typer(cluster_app, name="cluster")


LANE_HELP = "Only this lane's cluster (default: $DETHPC_DEVCLUSTER_LANE, else every lane)."
LANES_HELP = ("How many lanes (clusters) when none is named (default: "
              "$DETHPC_DEVCLUSTER_LANES, else 3).")
SLURM_HELP = ("The Slurm release: 22.05 (Debian's) or 25.11 (built once per machine from "
              "third_party/slurm); default $DETHPC_DEVCLUSTER_SLURM, else 22.05.")


@cluster_app.command("up")
def up(
    force: bool = typer.Option(
        False, "--force", help="Overwrite an /etc/slurm config the dev cluster did not write."
    ),
    user: list[str] = typer.Option(
        [], "--user", help="Also add this user to the accounting records (repeatable)."
    ),
    lane: int | None = typer.Option(None, "--lane", help=LANE_HELP),
    lanes: int | None = typer.Option(None, "--lanes", help=LANES_HELP),
    slurm: str | None = typer.Option(None, "--slurm", help=SLURM_HELP),
) -> None:
    """Install, start or repair the clusters; idempotent; waits until 4 nodes are usable."""
    words = ["up", *(["--force"] if force else []), *(w for u in user for w in ("--user", u))]
    raise typer.Exit(_devcluster([*words, *_lane_words(lane, lanes, slurm)]))


@cluster_app.command("down")
def down(lane: int | None = typer.Option(None, "--lane", help=LANE_HELP),
         slurm: str | None = typer.Option(None, "--slurm", help=SLURM_HELP)) -> None:
    """Stop the daemons (and leftover job steps) that `up` started, nothing else."""
    raise typer.Exit(_devcluster(["down", *_lane_words(lane, None, slurm)]))


@cluster_app.command("status")
def status(
    lane: int | None = typer.Option(None, "--lane", help=LANE_HELP),
    lanes: int | None = typer.Option(None, "--lanes", help=LANES_HELP),
    slurm: str | None = typer.Option(None, "--slurm", help=SLURM_HELP),
) -> None:
    """Show the daemons and sinfo; exit 0 when the clusters are up, 1 otherwise."""
    raise typer.Exit(_devcluster(["status", *_lane_words(lane, lanes, slurm)]))


def _lane_words(lane: int | None, lanes: int | None, slurm: str | None) -> list[str]:
    return [*(["--lane", str(lane)] if lane is not None else []),
            *(["--lanes", str(lanes)] if lanes is not None else []),
            *(["--slurm", slurm] if slurm else [])]


def _devcluster(words: list[str]) -> int:
    """``python -m dethpc.devcluster WORDS`` with this interpreter; its exit code."""
    return subprocess.run([sys.executable, "-m", "dethpc.devcluster", *words],
                          check=False).returncode
