"""What every CLI command shares: the cluster config, the store, the backend, output.

Owns: lazy construction of those (so ``config validate`` needs no database), the
options every view takes (``--json``, ``--wide``) and the note a view gives when no
daemon runs. Printing is ``dethpc.surfaces.cli.output``'s (re-exported here), the
effective cluster config ``dethpc.surfaces.cli.clusterenv``'s: the read path
(``dethpc.surfaces.cli.fastread``) uses both without typer or the ORM (issue 47).
Must not: hold logic the library lacks; import the ORM at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import typer

from dethpc.config.model import ClusterConfig
from dethpc.surfaces.cli.clusterenv import effective_cluster
from dethpc.surfaces.cli.output import (  # noqa: F401 - re-exported: what commands print with
    console,
    err_console,
    fmt_metric,
    plain_rows,
    print_json,
    report_error,
    say,
    table,
)

if TYPE_CHECKING:
    from dethpc.backends.base import Backend
    from dethpc.store import Store


@dataclass
class Env:
    cluster_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def cluster(self) -> ClusterConfig:
        """The effective cluster config (``clusterenv.effective_cluster``)."""
        return effective_cluster(self.cluster_path)

    @cached_property
    def store(self) -> Store:
        """The state database: the user's own credentials file when there is one
        (``dethpc.store.credentials``); on a shared database, a normal role must be the
        Unix user's (``dethpc.store.access.check_identity``). A SQLite file on a network
        filesystem is said once per home (``dethpc.store.location.check_store``)."""
        from dethpc.control.experiments import current_user
        from dethpc.store import Store
        from dethpc.store.access import check_identity
        from dethpc.store.credentials import database_url

        store = Store(database_url(self.cluster) or None)
        m = store.migration
        if m is not None and m.start is not None:  # an existing database was upgraded
            err_console.print(f"dethpc: upgraded database {store.safe_url} from schema "
                              f"revision {m.start} to {m.head} (docs/store.md)")
        check_identity(store.role, current_user(), store.safe_url)
        from dethpc.common.paths import dethpc_home
        from dethpc.store.location import check_store

        # a SQLite file on NFS/Lustre/GPFS...: said once per home, on stderr
        check_store(store.url, dethpc_home(),
                    say=lambda text: err_console.print(text, markup=False, highlight=False))
        return store

    @cached_property
    def backend(self) -> Backend:
        from dethpc.backends.factory import make_backend

        backend = make_backend(self.cluster)
        keep_site_facts(backend)
        return backend


def keep_site_facts(backend: Backend) -> None:
    """A Slurm backend of the CLI (and of the daemon it starts) keeps the site facts that
    change only with slurm.conf in ``$DETHPC_HOME`` for the user's next process
    (``dethpc.backends.slurm_site_cache``, issue 48: the submit's and its daemon's
    ``scontrol show config``, ``sinfo``, ``scontrol show federation`` asked once)."""
    from dethpc.common.traits import BackendKind

    if backend.traits.kind is not BackendKind.SLURM:   # local: nothing to import or keep
        return
    from dethpc.backends.slurm import SlurmBackend

    if isinstance(backend, SlurmBackend) and backend.site.cache is None:
        from dethpc.backends.slurm_site_cache import SiteCache
        from dethpc.common.paths import dethpc_home

        backend.site.cache = SiteCache(dethpc_home(), backend.runner.env)


ENV = Env()


WideOpt = typer.Option(False, "--wide", "-w", help="full values, however wide (no "
                       "column cut or left out to fit the terminal)")
JsonOpt = typer.Option(False, "--json", help="print JSON instead of a table")


def untracked_note(open_experiments: int, now: float | None = None, *,
                   read_now: bool = False) -> str | None:
    """What to say under a view of ``open_experiments`` not-ended experiments when no
    daemon of this user runs (none here, no live lease from another login node): that
    their state is not being updated, since when, and how to start one; ``read_now``:
    the view read the jobs' state from Slurm just now (``catch_up_if_untracked``). None
    when a daemon runs or nothing is open."""
    import time

    from dethpc.control.experiments import current_user
    from dethpc.store.models import DaemonLease
    from dethpc.surfaces import views

    if open_experiments <= 0 or views.daemon_running(ENV.store, current_user()):
        return None
    if read_now:
        return (f"note: no dethpc daemon is running: the state of the {open_experiments} "
                "open experiment(s) shown was read from Slurm just now, but nothing new is "
                "submitted until `dethpc daemon start`")
    with ENV.store.session() as s:
        row = s.get(DaemonLease, current_user())
    now = time.time() if now is None else now
    if row is None or not row.expires_at:
        since = "no daemon of yours has run on this database yet"
    else:
        age = max(0.0, now - (row.expires_at - ENV.cluster.daemon_lease_s))
        since = f"the last daemon tick was {_age(age)} ago"
    return (f"note: no dethpc daemon is running: the {open_experiments} open "
            f"experiment(s) shown are not being updated ({since}). `dethpc daemon start` "
            "tracks them again (jobs that ended meanwhile are read from Slurm's accounting)")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def say_if_untracked(states: list[str], *, read_now: bool = False) -> None:
    """``untracked_note`` for a view of experiments in ``states`` (those the daemon must
    act on: neither ended nor paused), on stderr."""
    from dethpc.store.models import ExperimentState

    moving = [s for s in map(ExperimentState, states) if s.needs_daemon]
    note = untracked_note(len(moving), read_now=read_now)
    if note:
        err_console.print(note, markup=False, highlight=False)
