"""Build the backend a cluster config asks for.

Owns: ``make_backend`` — the one place that maps ``ClusterConfig.backend`` to a
``Backend`` instance with its settings (spool location and concurrency for
local, command timeout/retries for Slurm); ``slurm_backend`` for jobs only Slurm runs.
Must not: run commands or start processes (constructors are side-effect
free apart from the local spool directory being created).
"""

from __future__ import annotations

import getpass
from pathlib import Path

from dethpc.backends.base import Backend
from dethpc.common.errors import ConfigError, FieldError
from dethpc.common.paths import dethpc_home
from dethpc.common.runner import CommandRunner
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig


def local_spool_dir() -> Path:
    """Where the local backend keeps its state: ``<dethpc home>/local-spool``.

    Under the dethpc home (not the runs root) because it belongs to the machine's
    daemon, like the database, and must stay put across daemon restarts.
    """
    return dethpc_home() / "local-spool"


def make_backend(cluster: ClusterConfig, runner: CommandRunner | None = None) -> Backend:
    """The configured backend: ``local`` (default) or ``slurm``."""
    kind = BackendKind.parse(cluster.backend)
    if kind is BackendKind.LOCAL:
        from dethpc.backends.local import LocalBackend

        return LocalBackend(local_spool_dir(), max_concurrent=cluster.local_max_concurrent)
    if kind is BackendKind.SLURM:
        from dethpc.backends.slurm import SlurmBackend

        runner = runner or CommandRunner(timeout=cluster.command_timeout_s,
                                         retries=cluster.command_retries)
        return SlurmBackend(runner, user=_user())
    raise ConfigError([FieldError("backend", f"unknown backend {cluster.backend!r}; "
                                  "allowed: local, slurm")], source=cluster.source)


def slurm_backend(cluster: ClusterConfig | None = None,
                  runner: CommandRunner | None = None) -> Backend:
    """A Slurm backend whatever ``cluster.backend`` says, with the cluster's command
    settings (defaults without one): for jobs only Slurm can run, the interactive
    tasks' allocations (``srun --overlap`` attaches to them) and TensorBoard's
    ``--slurm`` job."""
    from dethpc.backends.slurm import SlurmBackend

    runner = runner or (CommandRunner(timeout=cluster.command_timeout_s,
                                      retries=cluster.command_retries)
                        if cluster is not None else CommandRunner())
    return SlurmBackend(runner, user=_user())


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
