"""``dethpc sbatch`` without typer or the ORM (issue 47 item 1: <= 0.15 s more than sbatch).

Owns: ``answer(args)``: a plain ``dethpc sbatch [--no-daemon] [sbatch options] script
[args]`` (or its script on standard input) on the default SQLite store at head: what it
needs of the cluster config from the copy ``clustercache`` saved (``SbatchSite``: no
YAML, no validation, no backend object), its rows written with ``sqlite3``
(``SqliteAtHead``, ``dethpc.store.sbatch_rows``), the same protocol, wrapper, sbatch words,
output and exit code as the typer command, which shares ``run_plain``, ``dethpc_head``,
``ensure_daemon`` (a search's) and ``launch_daemon`` (a plain job's) from here. The
console script (``dethpc.surfaces.entry``) asks here first; None means "not mine",
decided before anything is read, written or printed: the full CLI (``sbatch_cmd``) runs
the command as it always has.

Not mine: ``--help``/``-h``/``--help-sbatch``, ``--search``, no words, sbatch's own
``--help``/``--usage``/``--version``; ``DETHPC_FAST_SBATCH=0``; a database other than the
default SQLite file (``database_url``, ``database_url_file``,
``DETHPC_DATABASE_URL_FILE``: PostgreSQL and its roles are the ORM's); a store that is
missing or not at the head revision (the ORM creates or migrates it); a backend that
does not take a user's sbatch (the CLI says why); a cluster config the CLI will refuse.
The daemon that tracks the job (unless ``--no-daemon``) is started as soon as the job is
planned when none runs (``service.prestart``: its imports run beside the submission's;
stopped again when sbatch refuses) and adopted at the end without waiting for its lock
(``launch_daemon``: the job is recorded, and the daemon adopts it once up; waiting cost a
first ``dethpc sbatch`` 0.8-1.1 s): no daemon module is imported here.
Must not: import typer, click, SQLAlchemy, sqlmodel, pydantic or Alembic
(tests/unit/surfaces/test_cli_fastsbatch.py checks), or print before it knows the
command is its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.common.jobenv import ENV_FAST_SBATCH

if TYPE_CHECKING:
    from dethpc.store import Store
    from dethpc.store.new_experiment import SqliteAtHead
    from dethpc.surfaces.sbatchwrap.site import SbatchSite

#: dethpc's own flag before the script: start no daemon
NO_DAEMON = "--no-daemon"


def dethpc_head(args: Sequence[str]) -> list[str]:
    """The words before the script (the first word that is neither an option nor the
    value of one of dethpc's own options): where dethpc's flags are looked for."""
    from dethpc.surfaces.sbatchwrap.search_cli import VALUE_OPTIONS

    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in VALUE_OPTIONS else 1
    return list(args[:min(i, len(args))])


def run_plain(argv: Sequence[str], environ: Mapping[str, str], cwd: Path,
              stdin_text: str | None, *, site: SbatchSite,
              store: Callable[[], Store | SqliteAtHead],
              max_array_size: Callable[[], int],
              planned: Callable[[], None] | None = None) -> tuple[str, str, int]:
    """Submit one job (or array) through the real sbatch: (stdout, stderr, exit code).
    ``store`` is opened once the backend is known to take a user's sbatch;
    ``max_array_size`` is asked only for an array job; ``planned`` is called once the
    job is planned (nothing refused it), before anything is recorded."""
    from dethpc.common.errors import DethpcError
    from dethpc.common.runner import CommandRunner
    from dethpc.common.traits import traits_of
    from dethpc.surfaces.cli.fastread import user_name
    from dethpc.surfaces.sbatchwrap import plain
    from dethpc.surfaces.sbatchwrap.search_cli import parse_command

    traits = traits_of(site.backend)
    if not traits.user_sbatch:
        raise DethpcError(f"dethpc sbatch submits through Slurm's sbatch; this cluster's "
                          f"backend is {traits.name} (cluster.yaml: backend). Use "
                          "`dethpc submit` with an experiment config on the local backend")
    cmd = parse_command(argv)
    if cmd.overrides:
        raise DethpcError("--config is for searches (dethpc sbatch --search FILE ...)")
    job = plain.plan(cmd, site, cwd=cwd, environ=environ, stdin_text=stdin_text,
                     max_array_size=lambda: max(1, max_array_size()))
    if planned is not None:
        planned()
    runner = CommandRunner(env=dict(environ), cwd=str(cwd))
    out = plain.submit(store(), site, job, runner, owner=user_name())
    return out.stdout, out.stderr, out.code


def ensure_daemon() -> None:
    """Start this user's daemon unless one runs (or adopt the one ``service.prestart``
    started), so that the job just submitted is tracked (said on stderr: sbatch's own
    output stays byte-identical)."""
    from dethpc.control import service

    if service.running_pid() is None:
        pid = service.start()
        sys.stderr.write(f"dethpc: started the daemon (pid {pid}) that tracks this job; "
                         f"log: {service.log_path()}\n")


def launch_daemon() -> None:
    """Start this user's daemon unless one runs (or adopt the one ``service.prestart``
    started) without waiting for it to take its lock (``service.launch``): a plain job
    is recorded before sbatch runs, and the daemon adopts it whenever it is up. Said on
    stderr with the supervisor's pid (the daemon's is not known yet); sbatch's own output
    stays byte-identical."""
    from dethpc.control import service

    keeper = service.launch()
    if keeper is not None:
        sys.stderr.write(f"dethpc: started the daemon (supervisor pid {keeper}) that tracks "
                         f"this job; log: {service.log_path()}\n")


def stdin_script(args: Sequence[str]) -> tuple[bool, str | None]:
    """Whether ``args`` name no script (nor ``--wrap``), and then standard input's text
    when it is not a terminal (sbatch reads the script there)."""
    from dethpc.common.sbatch_options import canonical_option
    from dethpc.surfaces.sbatchwrap.search_cli import parse_command

    cmd = parse_command(args)
    no_script = cmd.script is None and not any(canonical_option(o) == "--wrap"
                                               for o in cmd.options)
    if no_script and not sys.stdin.isatty():
        return True, sys.stdin.read()
    return no_script, None


def answer(args: list[str]) -> int | None:
    """Run ``dethpc sbatch ARGS`` (``args``: the words after ``sbatch``) when it is this
    module's; its exit code, or None (nothing done) for the full CLI to run it."""
    if os.environ.get(ENV_FAST_SBATCH, "1") == "0" or not args:
        return None
    from dethpc.common.errors import DethpcError
    from dethpc.surfaces.sbatchwrap.plain import wants_info

    words = list(args)
    head = dethpc_head(words)
    no_daemon = NO_DAEMON in head
    if no_daemon:
        words.remove(NO_DAEMON)
        head.remove(NO_DAEMON)
    if (not words or {"--help", "-h", "--help-sbatch"} & set(head) or wants_info(words)
            or any(a == "--search" or a.startswith("--search=") for a in head)):
        return None
    try:
        place = _place()
    except DethpcError:            # a cluster config the CLI will refuse, and say why
        return None
    if place is None:
        return None
    site, db = place
    try:
        _, stdin_text = stdin_script(words)
        environ, cwd = dict(os.environ), Path.cwd()

        def max_array_size() -> int:
            from dethpc.backends.slurm_site import SlurmSite
            from dethpc.backends.slurm_site_cache import SiteCache
            from dethpc.common.paths import dethpc_home
            from dethpc.common.runner import CommandRunner

            # the config kept by this user's last command (issue 48), else asked once
            return SlurmSite(CommandRunner(env=environ), None,
                             cache=SiteCache(dethpc_home(), environ)).max_array_size()

        def prestart() -> None:
            """The daemon started now unless one runs, its imports beside the submission's
            (stopped at exit unless ``launch_daemon`` adopts it: sbatch refused)."""
            from dethpc.control import service

            service.prestart()

        out, err, code = run_plain(words, environ, cwd, stdin_text, site=site,
                                   store=lambda: db, max_array_size=max_array_size,
                                   planned=None if no_daemon else prestart)
        sys.stdout.write(out)
        sys.stderr.write(err)
        if code == 0 and not no_daemon:
            launch_daemon()
        return code
    except DethpcError as exc:
        from dethpc.surfaces.cli.output import report_error

        sys.stdout.flush()
        report_error(exc)
        return exc.exit_code


def _place() -> tuple[SbatchSite, SqliteAtHead] | None:
    """The cluster config's site (from ``clustercache``'s copy) and the default SQLite
    store at head, with the Slurm client's variables in this process's environment (as
    ``clusterenv.effective_cluster`` puts them); None when the command is not mine."""
    from dethpc.store.credentials import ENV_VAR as URL_FILE_VAR

    if os.environ.get(URL_FILE_VAR):
        return None
    from dethpc.surfaces.cli.fastread import cluster_facts

    facts = cluster_facts()
    if facts is None or facts.own_database or facts.sbatch is None:
        return None
    site = facts.sbatch
    from dethpc.common.traits import traits_of

    if not traits_of(site.backend).user_sbatch:
        return None                 # the CLI says why
    from dethpc.common.paths import dethpc_home
    from dethpc.store.location import check_store, default_url
    from dethpc.store.new_experiment import SqliteAtHead

    url = default_url()
    db = SqliteAtHead.open(url)
    if db is None:
        return None
    # a SQLite file on NFS/Lustre/GPFS...: said once per home, as the ORM path does
    check_store(url, dethpc_home(), say=_say_plain)
    from dethpc.config.slurm_client import client_env

    os.environ.update(client_env(site.slurm_bin, site.slurm_conf, os.environ))
    return site, db


def _say_plain(text: str) -> None:
    from dethpc.surfaces.cli.output import err_console

    err_console.print(text, markup=False, highlight=False)
