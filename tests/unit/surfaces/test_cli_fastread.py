"""The read commands' fast path (``dethpc.surfaces.cli.fastread``, issue 47 item 1).

Over a table of store states, each command runs twice as the console script runs it:
as it comes (the fast path where it applies) and with ``DETHPC_FAST_READ=0`` (the typer
commands on the ORM, as before); stdout, stderr and the exit code must be the same
bytes, and where the fast path must answer it must not have imported SQLAlchemy,
sqlmodel, pydantic, Alembic, typer or click (and where it must not, the ORM answered).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dethpc.surfaces.cli.fastread import ReadCommand, parse

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "digits" / "random.yaml"
FORBIDDEN = ("sqlalchemy", "sqlmodel", "pydantic", "alembic", "typer", "click")

#: runs the console script's main in this process and says, at exit, what was imported
DRIVER = """
import atexit, json, os, sys
def _said():
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump(sorted({m.split(".")[0] for m in sys.modules}), f)
atexit.register(_said)
from dethpc.surfaces.entry import main
main(sys.argv[1:])
"""


def _run(home: Path, args: list[str], *, fast: bool) -> tuple[bytes, bytes, int, list[str]]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DETHPC_", "SLURM_", "XDG_"))}
    env.update({"DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(home.parent / "c.yaml"),
                "XDG_CACHE_HOME": str(home.parent / "cache"), "COLUMNS": "100",
                "MODULES_OUT": str(home.parent / "modules.json"),
                "DETHPC_FAST_READ": "1" if fast else "0"})
    done = subprocess.run([sys.executable, "-c", DRIVER, *args], env=env,
                          capture_output=True, timeout=120, check=False)
    return (done.stdout, done.stderr, done.returncode,
            json.loads((home.parent / "modules.json").read_text()))


def _store(home: Path):  # type: ignore[no-untyped-def]
    from dethpc.store import Store

    home.mkdir(parents=True, exist_ok=True)
    return Store(f"sqlite:///{home / 'dethpc.db'}")


def _fill(home: Path, *, open_experiment: bool, lease: bool) -> None:
    """Two experiments (one COMPLETED with trials, checkpoints, jobs, a bad node and one
    trial's log; one ACTIVE when ``open_experiment``), and a live daemon lease."""
    from dethpc.backends.base import JobState
    from dethpc.common.exitcodes import ExitReason
    from dethpc.control.experiments import current_user
    from dethpc.store.models import (
        Batch,
        Checkpoint,
        DaemonLease,
        Experiment,
        ExperimentState,
        Job,
        Trial,
        TrialState,
    )

    store, now, runs = _store(home), time.time(), home.parent / "runs"
    with store.session() as s:
        e = Experiment(name="digits", config_yaml=EXAMPLE.read_text(), run_dir=str(runs),
                       state=ExperimentState.COMPLETED, owner=current_user(),
                       labels=["a", "b"], progress=0.5, message="done; see log")
        s.add(e)
        s.add(Experiment(name="other", config_yaml=EXAMPLE.read_text(), run_dir=str(runs),
                         owner="someone-else", state=ExperimentState.CANCELED))
        if open_experiment:
            s.add(Experiment(name="running", config_yaml=EXAMPLE.read_text(),
                             run_dir=str(runs), owner=current_user(), progress=0.123456))
        s.flush()
        trials = [Trial(experiment_id=e.id or 0, request_id=i, state=st,
                        hparams={"lr": 0.1 * i, "opt": {"name": "adam"}}, steps_completed=i,
                        best_validation=None if i == 2 else 1.0 / (i + 1),
                        exit_reason="" if st is not TrialState.ERROR else "job failed",
                        meta={"k": i}, needs_job=st is TrialState.QUEUED)
                  for i, st in enumerate([TrialState.COMPLETED, TrialState.QUEUED,
                                          TrialState.ERROR, TrialState.QUEUED])]
        s.add_all(trials)
        s.flush()
        b = Batch(experiment_id=e.id or 0)
        s.add(b)
        s.flush()
        s.add(Job(experiment_id=e.id or 0, trial_id=trials[1].id or 0, batch_id=b.id or 0,
                  ref="7_1", state=JobState.PENDING, reason="JobHeldAdmin"))
        for k in range(3):
            s.add(Job(experiment_id=e.id or 0, trial_id=trials[2].id or 0,
                      batch_id=b.id or 0, ref=f"8_{k}", state=JobState.FAILED, live=False,
                      nodes="n1,n2", exit_reason=ExitReason.ERROR, ended_at=now - 10 + k))
        for k, (steps, metric) in enumerate([(5, 0.4), (9, 0.3), (12, None)]):
            s.add(Checkpoint(uuid=f"c{k}", experiment_id=e.id or 0,
                             trial_id=trials[0].id or 0, steps_completed=steps,
                             validation_metric=metric))
        if lease:
            s.add(DaemonLease(owner=current_user(), holder="otherhost:1:x",
                              acquired_at=now, expires_at=now + 3600))
    store.engine.dispose()
    log = runs / "trials" / str(trials[0].id)
    log.mkdir(parents=True)
    (log / "slurm-1_0.out").write_text("".join(f"line {i}\n" for i in range(30)))


def _older(home: Path) -> None:
    """A store at revision 0009 (the one before head), through Alembic."""
    from alembic import command
    from sqlalchemy import create_engine

    from dethpc.store import migrations

    home.mkdir(parents=True)
    engine = create_engine(f"sqlite:///{home / 'dethpc.db'}")
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "0009")
    engine.dispose()


STATES = {
    "missing home": (lambda h: None, "orm"),
    "empty store": (lambda h: _store(h).engine.dispose(), "fast"),
    "ended experiments": (lambda h: _fill(h, open_experiment=False, lease=False), "fast"),
    "open experiment, daemon lease": (lambda h: _fill(h, open_experiment=True, lease=True),
                                      "fast"),
    "open experiment, no daemon": (lambda h: _fill(h, open_experiment=True, lease=False),
                                   "orm"),
    "older revision": (_older, "orm"),
}
COMMANDS = {
    "missing home": [["experiment", "list"]],
    "empty store": [["experiment", "list"], ["e", "ls", "--json"]],
    "ended experiments": [["experiment", "list", "--all", "-w"],
                          ["experiment", "describe", "1"],
                          ["experiment", "describe", "--json", "1"],
                          ["trial", "logs", "1", "--tail", "5"],
                          ["t", "logs", "3"]],
    "open experiment, daemon lease": [["experiment", "list", "--json", "--active"],
                                      ["experiment", "describe", "3", "--wide"]],
    "open experiment, no daemon": [["experiment", "list"]],
    "older revision": [["experiment", "list"]],
}


@pytest.mark.parametrize("state", list(STATES))
def test_fast_path_prints_the_same_bytes_as_the_orm_path(tmp_path: Path, state: str) -> None:
    make, path = STATES[state]
    (tmp_path / "c.yaml").write_text(f"backend: local\nruns_root: {tmp_path / 'runs'}\n")
    home = tmp_path / "home"
    migrates = state in ("missing home", "older revision")   # the ORM path changes it
    if not migrates:
        make(home)
    for args in COMMANDS[state]:
        runs = []
        for fast in (True, False):
            if migrates:
                shutil.rmtree(home, ignore_errors=True)
                make(home)
            runs.append(_run(home, args, fast=fast))
        fast_run, orm_run = runs
        assert fast_run[:3] == orm_run[:3], (state, args)
        assert fast_run[2] == 0 and (fast_run[0] or fast_run[1]), (state, args)
        imported = set(fast_run[3]) & set(FORBIDDEN)
        if path == "fast":
            assert not imported, (state, args, imported)
        else:
            assert "sqlalchemy" in imported, (state, args)


def test_an_unknown_experiment_is_the_clis_error(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(f"backend: local\nruns_root: {tmp_path / 'runs'}\n")
    home = tmp_path / "home"
    _store(home).engine.dispose()
    fast = _run(home, ["experiment", "describe", "42"], fast=True)
    orm = _run(home, ["experiment", "describe", "42"], fast=False)
    assert fast[:3] == orm[:3]
    assert fast[2] != 0 and b"experiment 42 does not exist" in fast[1]


@pytest.mark.parametrize("args,want", [
    (["experiment", "list"], ReadCommand("list")),
    (["e", "ls", "-a", "--json", "-w", "--active"],
     ReadCommand("list", json=True, wide=True, all=True, active=True)),
    (["experiment", "describe", "--json", "12"], ReadCommand("describe", 12, json=True)),
    (["trial", "logs", "5", "--tail=3"], ReadCommand("logs", 5, tail=3)),
    (["t", "logs", "--tail", "3", "5"], ReadCommand("logs", 5, tail=3)),
    (["experiment", "list", "--help"], None),
    (["experiment", "describe"], None),
    (["experiment", "describe", "1", "2"], None),
    (["experiment", "describe", "-1"], None),
    (["experiment", "describe", "x"], None),
    (["experiment", "describe", "١"], None),       # a digit click would not take
    (["trial", "logs", "5", "-f"], None),
    (["trial", "logs", "5", "--tail"], None),
    (["trial", "logs", "5", "--tail", "-2"], None),
    (["experiment", "list", "--tail", "2"], None),
    (["experiment", "list-trials", "1"], None),
    (["--cluster-config", "x", "experiment", "list"], None),
    (["trial", "describe", "1"], None),
])
def test_parse_takes_only_what_it_answers(args: list[str], want: ReadCommand | None) -> None:
    assert parse(args) == want


def test_fast_paths_constants_agree_with_the_cli() -> None:
    from dethpc.control.experiments import current_user
    from dethpc.surfaces.cli import daemon_cmd, fastread

    assert fastread.ENV_CATCH_UP == daemon_cmd.ENV_CATCH_UP
    assert fastread.user_name() == current_user()


def test_a_changed_cluster_config_is_read_again_not_its_saved_copy(tmp_path: Path) -> None:
    """The fast path keeps what it needs of the cluster config (``clustercache``); an edit
    that leaves the file's size and mtime as they were (within the file system's timestamp
    granularity) still reaches the CLI, which refuses the config, as the ORM path does."""
    config = tmp_path / "c.yaml"
    config.write_text(f"backend: local\nruns_root: {tmp_path / 'runs'}\n")
    home = tmp_path / "home"
    _fill(home, open_experiment=False, lease=False)
    first = _run(home, ["experiment", "list"], fast=True)
    assert first[2] == 0 and not set(first[3]) & set(FORBIDDEN)
    assert list((tmp_path / "cache" / "dethpc").glob("cluster-*.txt"))   # a copy saved
    again = _run(home, ["experiment", "list"], fast=True)
    assert again[:3] == first[:3] and "yaml" not in again[3]              # answered from it
    st = config.stat()
    config.write_text(config.read_text().replace("backend: local", "backend: lokal"))
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert config.stat().st_size == st.st_size
    fast, orm = (_run(home, ["experiment", "list"], fast=f) for f in (True, False))
    assert fast[:3] == orm[:3]
    assert fast[2] != 0 and b"backend" in fast[1] and "typer" in fast[3]
