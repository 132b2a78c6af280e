"""``dethpc admin ...``: tools for the admins who configure dethpc on a cluster.

Owns: the ``admin_app`` typer sub-app: ``check`` (gather the live facts, run the
checks (and the probes), print one finding per problem with its fix (or JSON),
exit 0 when there is no error (warnings alone are 0), 1 with errors) and ``db`` (a
shared PostgreSQL database: ``add-user``, ``upgrade``, ``whoami``).
Must not: judge anything itself (``dethpc.surfaces.admin`` does), or print a password.
"""

from __future__ import annotations

import getpass
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from dethpc.common.errors import ConfigError, DethpcError, FieldError
from dethpc.common.runner import CommandRunner
from dethpc.common.traits import BackendKind
from dethpc.config.model import ClusterConfig
from dethpc.surfaces.admin import Finding, Severity, check_cluster, exit_code, gather_facts
from dethpc.surfaces.admin.checks import store_finding
from dethpc.surfaces.admin.probe import run_probes
from dethpc.surfaces.cli.common import ENV, print_json

admin_app = typer.Typer(help="Check the cluster config against the live Slurm cluster; "
                        "set up a shared database's users.",
                        no_args_is_help=True)
_out = Console(soft_wrap=True, highlight=False)

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.OK: "green"}


@admin_app.command("check")
def check(
    pool: list[str] = typer.Option([], "--pool", "-p", help="Check only this pool "
                                   "(repeatable; default: every pool)."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    probe: bool = typer.Option(False, "--probe", help="Also run one tiny job per pool: "
                               "runs_root and python reachable from compute nodes?"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list what is fine."),
    user: str = typer.Option(None, "--user", help="Check this user's accounts and limits "
                             "(default: you)."),
    probe_timeout: float = typer.Option(300.0, "--probe-timeout",
                                        help="Seconds a probe job may take, queueing included."),
) -> None:
    """Compare the cluster config with the live cluster; one finding per problem, with the fix.

    Exit 0 without errors (warnings alone are 0), 1 with errors."""
    cfg = ENV.cluster
    if BackendKind.parse(cfg.backend) is not BackendKind.SLURM:
        raise DethpcError(f"{cfg.source} uses the {cfg.backend} backend; `admin check` "
                          "compares a Slurm cluster config (backend: slurm) with the cluster")
    unknown = [p for p in pool if p not in cfg.pools]
    if unknown:
        raise ConfigError([FieldError("--pool", f"unknown pool {p!r}; allowed: "
                                      f"{', '.join(sorted(cfg.pools))}") for p in unknown],
                          source="dethpc admin check")
    names = list(dict.fromkeys(pool)) or list(cfg.pools)
    runner = CommandRunner(timeout=cfg.command_timeout_s, retries=cfg.command_retries)
    facts = gather_facts(runner, user or getpass.getuser())
    findings = [_store(cfg), *check_cluster(cfg, facts, names)]
    if cfg.report_bad_nodes:
        from dethpc.surfaces.admin.bad_nodes import bad_node_findings

        findings += [f for f in bad_node_findings(ENV.store, cfg) if f.pool in names]
    if probe:
        findings += run_probes(cfg, runner, names, timeout_s=probe_timeout)
    code = exit_code(findings)
    if as_json:
        print_json({"cluster_config": cfg.source, "cluster": facts.cluster_name,
                    "slurm_version": facts.config.get("SLURM_VERSION", ""), "user": facts.user,
                    "findings": [f.to_dict() for f in findings], "exit_code": code})
    else:
        _print(findings, verbose, f"{cfg.source} against cluster {facts.cluster_name or '?'} "
               f"(Slurm {facts.config.get('SLURM_VERSION', '?')}), user {facts.user}")
    raise typer.Exit(code)


def _store(cfg: ClusterConfig) -> Finding:
    """Where the site's users' store is (one read of the mount table; see
    ``checks.store_finding``)."""
    from dethpc.store.location import default_url, locate

    loc = None if cfg.database_url_file is not None else \
        locate(cfg.database_url or default_url())
    return store_finding(cfg, loc)


def _print(findings: list[Finding], verbose: bool, title: str) -> None:
    _out.print(f"dethpc admin check: {escape(title)}")
    for f in findings:
        if f.severity is Severity.OK and not verbose:
            continue
        where = f"pool {f.pool}" if f.pool else "cluster"
        _out.print(f"[{_STYLE[f.severity]}]{f.severity.value.upper():7}[/] "
                   f"{escape(where)} {escape(f.check)}: {escape(f.message)}")
        if f.fix:
            _out.print(f"        fix: {escape(f.fix)}")
    counts = Counter(f.severity for f in findings)
    by_pool = Counter(f.pool for f in findings if f.severity is not Severity.OK)
    clean = sorted({f.pool for f in findings if f.pool and by_pool[f.pool] == 0})
    if clean and not verbose:
        _out.print(f"[green]ok[/]      every check passed for pool(s): {escape(', '.join(clean))}")
    _out.print(f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), "
               f"{counts[Severity.OK]} check(s) ok")


db_app = typer.Typer(help="A PostgreSQL database that the site's users share: their roles "
                     "and its schema (docs/admin.md).", no_args_is_help=True)
admin_app.add_typer(db_app, name="db")


@db_app.command("add-user")
def db_add_user(
    name: str = typer.Argument(..., help="The user's Unix user name (the role's name)."),
    admin: bool = typer.Option(False, "--admin", help="Also a dethpc admin: sees and may "
                               "change every user's rows."),
    credentials_file: Path = typer.Option(None, "--credentials-file", help="Where to write "
                                          "the user's database URL (0600; default "
                                          "./dethpc-db-NAME.url)."),
    no_password: bool = typer.Option(False, "--no-password", help="No password and no file "
                                     "(pg_hba.conf authenticates by peer, cert or GSSAPI)."),
    new_password: bool = typer.Option(False, "--new-password", help="The role exists: give "
                                      "it a new password (and a new credentials file)."),
) -> None:
    """Create a user's login role in the shared database (run with the schema owner's
    credentials); the password is generated, written only to the credentials file."""
    from dethpc.surfaces.admin.dbusers import add_user

    path = credentials_file or Path(f"dethpc-db-{name}.url")
    added = add_user(ENV.store, name, admin=admin, password=not no_password,
                     replace=new_password, credentials=path)
    groups = "dethpc_users" + (", dethpc_admin" if added.admin else "")
    verb = "gave a new password to" if added.replaced else "created"
    _out.print(f"{verb} database role {escape(added.name)} ({groups})", markup=False)
    if added.credentials is not None:
        whose = added.file_owner or "you"
        _out.print(f"credentials: {added.credentials} (mode 0600, owned by {whose}); the user "
                   "keeps them as ~/.dethpc/database_url (or names the file in "
                   "DETHPC_DATABASE_URL_FILE / the cluster config's database_url_file), "
                   "readable by them only", markup=False)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Bring the shared database to this dethpc's schema (the schema owner's credentials:
    users' roles never change the schema)."""
    from dethpc.store.migrations import head_revision

    m = ENV.store.migration
    at = "already at" if m is None else f"upgraded from {m.start or 'empty'} to"
    _out.print(f"database {ENV.store.safe_url}: {at} schema revision {head_revision()}",
               markup=False)


@db_app.command("whoami")
def db_whoami(as_json: bool = typer.Option(False, "--json")) -> None:
    """The database role this dethpc connects as, and whose rows it sees."""
    role = ENV.store.role
    if as_json:
        print_json({"role": role.name, "scope": role.scope.value,
                    "database": ENV.store.safe_url})
        return
    _out.print(f"database {ENV.store.safe_url}: role {role.name or '(none: SQLite)'}, "
               f"sees {role.scope.value}", markup=False)
