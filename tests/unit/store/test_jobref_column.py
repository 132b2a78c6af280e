"""``Job.ref``'s column type (``dethpc.store.models.JobRefText``): a ``JobRef`` goes in as
its text and comes back a ``JobRef``; the stored text is what a plain string column
held (no migration: the schema test in test_store_migrations.py sees no change); a
worker pool's item ref, which names no job, comes back as the text it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import select

from dethpc.common.jobref import JobRef
from dethpc.control.worker_pool_view import item_ref
from dethpc.store import Store
from dethpc.store.models import Batch, Experiment, Job, Trial


@pytest.mark.parametrize(("written", "stored", "is_ref"), [
    (JobRef("123", task=4), "123_4", True),
    ("123_4", "123_4", True),                    # text written by older code: read as one
    (JobRef("77"), "77", True),
    (JobRef("9", het=1), "9+1", True),
    (item_ref(1, "t3-s0"), item_ref(1, "t3-s0"), False),
    (None, None, False),
])
def test_a_job_ref_round_trips_as_the_same_text(tmp_path: Path, written: str | None,
                                                stored: str | None, is_ref: bool) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with store.session() as s:
        exp = Experiment(name="e", config_yaml="", run_dir=str(tmp_path))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        trial = Trial(experiment_id=exp.id, request_id=0)
        batch = Batch(experiment_id=exp.id, name="b")
        s.add(trial)
        s.add(batch)
        s.flush()
        assert trial.id is not None and batch.id is not None
        s.add(Job(experiment_id=exp.id, trial_id=trial.id, batch_id=batch.id, ref=written))
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT ref FROM job")).scalar_one() == stored
    with store.session() as s:
        row = s.exec(select(Job)).one()
        col = s.exec(select(Job.ref)).one()
        by_ref = s.exec(select(Job).where(Job.ref == written)).all() if written else []
    for got in (row.ref, col):
        assert got == stored and isinstance(got, JobRef) is is_ref
    if is_ref:
        assert isinstance(row.ref, JobRef) and str(row.ref) == stored
        assert len(by_ref) == 1                     # a JobRef finds its row by its text
