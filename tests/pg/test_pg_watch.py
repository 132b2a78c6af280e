"""The daemon's watch between ticks on PostgreSQL: ``Watcher.refresh`` reads each running
trial's ``validate_at`` undecoded (a JSON column read as text), which the driver may hand
back as text or as the decoded list; the points come out the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dethpc.backends.base import JobState
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.control.daemon.shared import Scope
from dethpc.control.daemon.watch import Watcher
from dethpc.store import Store
from dethpc.store.models import Batch, Job, Trial


def test_refresh_reads_the_running_trials_points_on_postgres(
        pg_store: Store, new_experiment: Callable[..., int], tmp_path: Path) -> None:
    exp_id = new_experiment("watch", run_dir=str(tmp_path / "run"))
    with pg_store.session() as s:
        trial = Trial(experiment_id=exp_id, request_id=1, hparams={}, target_length=512,
                      validate_at=[32, 128, 512], steps_completed=40)
        batch = Batch(experiment_id=exp_id, name="b", size=1)
        s.add(trial)
        s.add(batch)
        s.flush()
        assert trial.id is not None and batch.id is not None
        s.add(Job(experiment_id=exp_id, trial_id=trial.id, batch_id=batch.id,
                  array_index=0, ref="9_0", state=JobState.RUNNING))
        trial_id = trial.id
    cluster = ClusterConfig(runs_root=tmp_path, metrics_poll_s=0.2,
                            pools={"default": ResourcePool(name="default")})
    watcher = Watcher(pg_store, cluster, Scope(), None)
    watcher.refresh()
    acts = watcher.watch[trial_id].acts
    assert acts is not None
    assert (acts.points(), acts.seen, acts.run_ends_at_target) == ((32, 128, 512), 39, False)
    assert [acts.worth_a_pass(n) for n in (64, 128, 160)] == [False, True, False]
