"""Views of experiments say when no daemon updates them (issue 32 item 2), and a COMPLETED
experiment shows 100% whatever its searcher counted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dethpc.common.kinds import ExperimentKind
from dethpc.control.experiments import current_user
from dethpc.store.models import DaemonLease, Experiment, ExperimentState
from dethpc.surfaces import views
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.main import app

CONFIG = {"name": "n", "entrypoint": "true",
          "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}


def add(state: ExperimentState, progress: float = 0.0,
        kind: ExperimentKind = ExperimentKind.MANAGED) -> int:
    with ENV.store.session() as s:
        exp = Experiment(name="n", config_yaml=yaml.safe_dump(CONFIG), run_dir="/nowhere",
                         owner=current_user(), state=state, progress=progress, kind=kind)
        s.add(exp)
        s.commit()
        assert exp.id is not None
        return exp.id


@pytest.mark.parametrize("state,noted", [
    (ExperimentState.ACTIVE, True), (ExperimentState.STOPPING_CANCELED, True),
    (ExperimentState.PAUSED, False), (ExperimentState.COMPLETED, False)])
def test_list_and_describe_say_when_no_daemon_runs(home: Path, state: ExperimentState,
                                                   noted: bool) -> None:
    exp = add(state)
    for args in (["experiment", "list", "--json"], ["experiment", "describe", str(exp)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        said = "no dethpc daemon is running" in result.stderr
        assert said is noted, result.stderr
        if noted:
            assert "no daemon of yours has run on this database yet" in result.stderr


def test_the_note_says_when_the_last_tick_was_and_a_live_lease_silences_it(
        home: Path) -> None:
    add(ExperimentState.ACTIVE)
    ttl = ENV.cluster.daemon_lease_s
    with ENV.store.session() as s:
        s.add(DaemonLease(owner=current_user(), holder="h:1:t",
                          expires_at=time.time() - 600 + ttl))   # last renewed 10 min ago
        s.commit()
    result = CliRunner().invoke(app, ["experiment", "list"])
    assert "the last daemon tick was 10 min ago" in result.stderr, result.stderr
    with ENV.store.session() as s:
        row = s.get(DaemonLease, current_user())
        assert row is not None
        row.expires_at = time.time() + ttl                       # another node's, live
        s.add(row)
        s.commit()
    assert "no dethpc daemon" not in CliRunner().invoke(app, ["experiment", "list"]).stderr


@pytest.mark.parametrize("state,progress,shown", [
    (ExperimentState.COMPLETED, 0.0, 1.0), (ExperimentState.ACTIVE, 0.25, 0.25),
    (ExperimentState.ERROR, 0.5, 0.5)])
def test_shown_progress(home: Path, state: ExperimentState, progress: float,
                        shown: float) -> None:
    exp = add(state, progress, ExperimentKind.SBATCH)
    assert views.describe_experiment(ENV.store, exp)["progress"] == shown


def test_a_daemon_being_started_by_its_supervisor_silences_the_note(home: Path) -> None:
    """A plain ``dethpc sbatch`` returns before its daemon holds the lock
    (``service.launch``): while the supervisor is there, a view does not say that no
    daemon runs (``service.starting_or_running``)."""
    import fcntl

    from dethpc.common.paths import make_private_dir
    from dethpc.control import service

    add(ExperimentState.ACTIVE)
    make_private_dir(service.supervisor_lock_path().parent)
    with open(service.supervisor_lock_path(), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        service.supervisor_pid_path().write_text("123456")
        assert service.running_pid() is None and service.starting_or_running()
        result = CliRunner().invoke(app, ["experiment", "list"])
        assert result.exit_code == 0 and "no dethpc daemon" not in result.stderr, result.stderr
    assert not service.starting_or_running()
    result = CliRunner().invoke(app, ["experiment", "list"])
    assert "no dethpc daemon is running" in result.stderr, result.stderr
