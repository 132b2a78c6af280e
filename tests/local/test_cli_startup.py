"""Issue 47 items 1 and 7: what the commonest commands import (the real console entry,
``python -X importtime -m dethpc.surfaces.entry``, in a subprocess).

- ``dethpc --version`` answers without the CLI (typer, rich, click), the store
  (SQLAlchemy, sqlmodel, pydantic, Alembic) or torch;
- ``dethpc --help`` answers from the copy of its own output that the first call saved
  (``dethpc.surfaces.cli.helpcache``), byte for byte, without typer or rich; a change of
  what shapes the text (here the terminal width) is a new key, printed by the CLI;
- a read-only command on a store at the current schema revision imports no Alembic;
- a fresh home's store is created at the head revision directly: no revision runs and
  Alembic is not imported (``dethpc.store.fresh``);
- a command imports only its own command group (``cli.main.app_for``): ``experiment
  list`` imports neither the daemon loop nor the admin's, the interactive tasks' or the
  other groups' modules, and prints what the whole tree prints.

(Times are bench/cli's; these tests assert only what is imported and printed.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dethpc.common.version import __version__

HEAVY = {"typer", "rich", "click", "sqlalchemy", "sqlmodel", "pydantic", "alembic", "torch"}


def run(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str],
                                                        set[str]]:
    """The entry run with ``args``; its result and every module it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dethpc.surfaces.entry",
                           *args], capture_output=True, text=True, env=env, timeout=120)
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:")}
    done.stderr = "\n".join(line for line in done.stderr.splitlines()
                            if not line.startswith("import time:"))
    return done, modules


def tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def environment(home: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), **extra}
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def test_version_imports_neither_the_cli_nor_the_store_nor_torch(
        home: Path, tmp_path: Path) -> None:
    done, modules = run(["--version"], environment(home, tmp_path))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{__version__}\n", "")
    assert tops(modules) & HEAVY == set()
    assert not any(m.startswith(("dethpc.store", "dethpc.control", "dethpc.surfaces.cli"))
                   for m in modules)


def test_help_is_answered_from_its_saved_copy(home: Path, tmp_path: Path) -> None:
    env = environment(home, tmp_path)
    first, first_modules = run(["--help"], env)
    assert first.returncode == 0 and "Usage: python -m dethpc.surfaces.entry" in first.stdout
    assert "typer" in tops(first_modules)  # the CLI printed it (and it was saved)
    again, modules = run(["--help"], env)
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, "")
    assert tops(modules) & HEAVY == set()
    assert not any(m.startswith(("dethpc.store", "dethpc.surfaces.cli.main"))
                   for m in modules)
    narrow, narrow_modules = run(["--help"], environment(home, tmp_path, COLUMNS="61"))
    assert narrow.returncode == 0 and "typer" in tops(narrow_modules)
    assert narrow.stdout != first.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 61


def test_a_read_only_command_on_a_current_store_imports_no_alembic(
        home: Path, tmp_path: Path) -> None:
    env = environment(home, tmp_path)
    created, _ = run(["experiment", "list"], env)  # a fresh home: created at head
    assert created.returncode == 0, created.stderr
    # the full CLI (the read path off): the ORM opens the store and checks its revision
    done, modules = run(["experiment", "list"], {**env, "DETHPC_FAST_READ": "0"})
    assert done.returncode == 0 and done.stdout == created.stdout
    assert "alembic" not in tops(modules)
    assert "sqlalchemy" in tops(modules)  # the store was opened: the check ran
    # the read path (docs/cli.md): the same answer with sqlite3 alone
    fast, fast_modules = run(["experiment", "list"], env)
    assert fast.returncode == 0 and fast.stdout == created.stdout
    assert not {"alembic", "sqlalchemy", "yaml"} & tops(fast_modules)


def test_a_fresh_home_is_created_at_head_without_running_a_migration(
        home: Path, tmp_path: Path) -> None:
    import sqlite3

    from dethpc.store.migrations import head_revision

    assert not (home / "dethpc.db").exists()
    done, modules = run(["experiment", "list"], environment(home, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "alembic" not in tops(modules)
    assert not any(m.startswith("dethpc.store.migrations.versions") for m in modules)
    assert "dethpc.store.fresh" in modules
    with sqlite3.connect(home / "dethpc.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)]


def test_a_command_imports_only_its_own_command_group(home: Path, tmp_path: Path) -> None:
    env = environment(home, tmp_path)
    assert run(["experiment", "list"], env)[0].returncode == 0   # the store, created
    done, modules = run(["experiment", "list", "--json"], env)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
    others = ("admin_cmd", "interactive_cmd", "task_cmd", "trial_cmd", "config_cmd",
              "dev_cmd", "sbatch_cmd", "dashboard_cmd", "jobapi_cmd")
    assert not {f"dethpc.surfaces.cli.{m}" for m in others} & modules
    assert not any(m.startswith(("dethpc.control.daemon", "dethpc.surfaces.admin"))
                   for m in modules)
    # the same words through the whole tree (``cli.main.app``) print the same
    whole = subprocess.run(
        [sys.executable, "-c", "import sys; from dethpc.surfaces.cli.main import app; "
         "sys.argv[0] = 'dethpc'; app()", "experiment", "list", "--json"],
        capture_output=True, text=True, env=env, timeout=120)
    assert (whole.returncode, whole.stdout, whole.stderr) == (0, done.stdout, done.stderr)
