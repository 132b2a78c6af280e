"""The commands that only look, answered without typer or the ORM (issue 47 item 1).

Owns: ``answer(args)``: ``dethpc experiment list`` (``e``, ``ls``; ``--json``, ``--wide``,
``--all``, ``--active``), ``experiment describe ID`` (``--json``, ``--wide``) and ``trial
logs ID`` (``t``; ``--tail N``) read with ``sqlite3`` (``dethpc.store.reader``), made into
the views' dicts by the same functions (``dethpc.surfaces.views``) and printed by the
same code (``dethpc.surfaces.cli.show``, ``output``) as the typer commands: the same
bytes, in a fraction of the time (bench/cli: typer, SQLAlchemy, sqlmodel and pydantic
were most of a 1.2 s answer). What it needs of the cluster config (its backend, whether
it names a database) comes from the copy ``clustercache`` saved while the config file
and everything its validation read are unchanged, without YAML or the parsers; ``rich`` is
imported only to draw a table or say a note (``--json`` and ``trial logs`` print plain).
The console script (``dethpc.surfaces.entry``) asks here
first; None means "not mine": the full CLI runs the command as it always has.

Not mine (None, decided before anything is printed), so the full CLI answers: any other
argument or spelling (``--help``, ``--follow``, a root option, an id that is not plain
digits: click's own errors and help stay click's); ``DETHPC_FAST_READ=0``; a database
other than the default SQLite file (``database_url``, ``database_url_file``,
``DETHPC_DATABASE_URL_FILE``: PostgreSQL and its row-level security are the ORM's); a
store that is missing or not at the head revision (the ORM path creates, migrates or
says what is wrong); an experiment or trial that does not exist (its error is the CLI's);
a view that would read Slurm or note that no daemon runs (``catch_up_if_untracked``,
``say_if_untracked``: open experiments and no daemon of this user).
Must not: write to the store, import typer, click, SQLAlchemy, sqlmodel, pydantic or
Alembic (tests/unit/surfaces/test_cli_fastread.py checks), or print before it knows the
command is its own.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.common.errors import DethpcError, NotFoundError

if TYPE_CHECKING:
    from dethpc.config.model import ClusterConfig
    from dethpc.store.reader import Reader
    from dethpc.surfaces.cli.clustercache import ReadFacts

#: ``DETHPC_FAST_READ=0``: every command through the full CLI (to compare, or to debug)
ENV_FAST_READ = "DETHPC_FAST_READ"
#: ``daemon_cmd.ENV_CATCH_UP`` (that module imports typer; a test checks the two agree)
ENV_CATCH_UP = "DETHPC_CATCH_UP"
_GROUPS = {"experiment": "experiment", "e": "experiment", "trial": "trial", "t": "trial"}
_VERBS = {("experiment", "list"): "list", ("experiment", "ls"): "list",
          ("experiment", "describe"): "describe", ("trial", "logs"): "logs"}
#: each command's flags (no value) and options taking one value
_FLAGS = {"list": {"--json": "json", "--wide": "wide", "-w": "wide", "--all": "all",
                   "-a": "all", "--active": "active"},
          "describe": {"--json": "json", "--wide": "wide", "-w": "wide"},
          "logs": {}}
_VALUED = {"list": {}, "describe": {}, "logs": {"--tail": "tail"}}
_TAKES_ID = {"list": False, "describe": True, "logs": True}


@dataclass(frozen=True)
class ReadCommand:
    """A read command as the typer command would have parsed it."""

    verb: str
    ident: int = 0
    json: bool = False
    wide: bool = False
    all: bool = False
    active: bool = False
    tail: int = 0


def parse(args: list[str]) -> ReadCommand | None:
    """The command ``args`` spell, or None for anything this module does not answer."""
    if len(args) < 2 or args[0] not in _GROUPS:
        return None
    verb = _VERBS.get((_GROUPS[args[0]], args[1]))
    if verb is None:
        return None
    seen: dict[str, bool | int] = {}
    ident: int | None = None
    rest = args[2:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        name, sep, value = arg.partition("=")
        if arg in _FLAGS[verb]:
            seen[_FLAGS[verb][arg]] = True
        elif name in _VALUED[verb]:
            if not sep:
                i += 1
                if i == len(rest):
                    return None
                value = rest[i]
            if not (value.isascii() and value.isdigit()):
                return None
            seen[_VALUED[verb][name]] = int(value)
        elif arg.isascii() and arg.isdigit() and _TAKES_ID[verb] and ident is None:
            ident = int(arg)
        else:
            return None
        i += 1
    if _TAKES_ID[verb] and ident is None:
        return None
    return ReadCommand(verb, ident or 0, **seen)  # type: ignore[arg-type]


def answer(args: list[str]) -> int | None:
    """Run ``args`` when they are a read command this module answers; its exit code, or
    None (nothing printed) for the full CLI to run them."""
    if os.environ.get(ENV_FAST_READ, "1") == "0":
        return None
    command = parse(args)
    if command is None:
        return None
    try:
        reader = _open_reader()
    except DethpcError:          # a cluster config the CLI will refuse, and say why
        return None
    if reader is None:
        return None
    try:
        return _run(command, reader)
    finally:
        reader.close()


def _open_reader() -> Reader | None:
    """The default SQLite store at head with the cluster config's blessing, else None."""
    from dethpc.store.credentials import ENV_VAR as URL_FILE_VAR

    if os.environ.get(URL_FILE_VAR):
        return None
    facts = cluster_facts()
    if facts is None or facts.own_database:
        return None
    from dethpc.common.paths import dethpc_home
    from dethpc.store.location import check_store, default_url, sqlite_path
    from dethpc.store.reader import Reader

    url = default_url()
    path = sqlite_path(url)
    reader = Reader.open(path) if path is not None else None
    if reader is not None:
        # a SQLite file on NFS/Lustre/GPFS...: said once per home, as the ORM path does
        check_store(url, dethpc_home(), say=_say_plain)
    _CLUSTER.append(facts)
    return reader


def _say_plain(text: str) -> None:
    from dethpc.surfaces.cli.output import err_console

    err_console.print(text, markup=False, highlight=False)


#: what the read path needs of the cluster config, read by ``_open_reader`` (one per process)
_CLUSTER: list[ReadFacts] = []


def cluster_facts() -> ReadFacts | None:
    """The effective cluster config's facts as the typer root would load it from its path
    (the ``--cluster-config`` option's environment variable), from the copy
    ``clustercache`` saved when the file and everything its validation read are the same;
    None when that variable is set empty."""
    from dethpc.config.locate import ENV_VAR
    from dethpc.surfaces.cli.clustercache import read_facts

    path = os.environ.get(ENV_VAR)
    if path == "":
        return None

    def load() -> ClusterConfig:
        from dethpc.surfaces.cli.clusterenv import effective_cluster

        return effective_cluster(path)

    return read_facts(path, load)


def user_name() -> str:
    """Who runs this process (``dethpc.control.experiments.current_user``: that module's
    imports are the daemon's; tests/unit/surfaces/test_cli_fastread.py checks the two)."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - containers without a passwd entry
        return "unknown"


def _daemon_running(reader: Reader) -> bool:
    """``views.daemon_running`` read with ``reader``: this host's daemon lock or its
    supervisor, or a live lease of this user's daemon on another login node."""
    import time

    from dethpc.control.service import starting_or_running

    if starting_or_running():
        return True
    row = reader.daemon_lease(user_name())
    return not (row is None or not row.holder or row.expires_at < time.time())


def _quiet_view(reader: Reader, states: list[str]) -> bool:
    """True when the typer command would neither read Slurm (``catch_up_if_untracked``)
    nor note that no daemon runs (``say_if_untracked``) for a view of ``states``."""
    from dethpc.common.traits import BackendKind
    from dethpc.store.states import ExperimentState

    catch_up = (os.environ.get(ENV_CATCH_UP, "1") != "0"
                and BackendKind.parse(_CLUSTER[0].backend) is BackendKind.SLURM)
    moving = any(ExperimentState(s).needs_daemon for s in states)
    return not (catch_up or moving) or _daemon_running(reader)


def _run(command: ReadCommand, reader: Reader) -> int | None:
    from dethpc.surfaces import views
    from dethpc.surfaces.cli import show

    if command.verb == "list":
        rows = views.read_experiments(reader, include_ended=not command.active,
                                      owner=None if command.all else user_name())
        if not _quiet_view(reader, [r["state"] for r in rows]):
            return None
        show.experiment_list(rows, json_out=command.json, wide=command.wide)
        return 0
    if command.verb == "describe":
        try:
            d = views.read_describe(reader, command.ident)
        except NotFoundError:
            return None
        if not _quiet_view(reader, [d["state"]]):
            return None
        show.experiment_describe(d, json_out=command.json, wide=command.wide)
        return 0
    return _logs(command, reader)


def _logs(command: ReadCommand, reader: Reader) -> int | None:
    """``trial logs ID [--tail N]`` as ``shared.stream_trial_log`` prints it unfollowed."""
    from dethpc.common.paths import ExperimentPaths
    from dethpc.surfaces.cli.show import say_unrun

    trial = reader.trial(command.ident)
    exp = reader.experiment(trial.experiment_id) if trial is not None else None
    if trial is None or exp is None:
        return None
    tp = ExperimentPaths(Path(exp.run_dir)).trial(command.ident)
    text = b"".join(p.read_bytes() for p in tp.logs()).decode(errors="replace")
    if command.tail:
        text = "\n".join(text.splitlines()[-command.tail:]) + "\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    say_unrun({"id": trial.id, "state": trial.state, "exit_reason": trial.exit_reason},
              bool(text.strip()))
    return 0
