"""``dethpc.store.reader``: the schema check without Alembic, and rows as the ORM's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dethpc.store import migrations
from dethpc.store.reader import HEAD_REVISION, Reader


def test_head_revision_constant_is_the_newest_revision_script() -> None:
    """A new revision script must bump ``reader.HEAD_REVISION`` (else every read command
    would take the ORM path, or read a schema it does not know)."""
    assert HEAD_REVISION == migrations.head_revision()


def test_open_answers_only_a_store_at_head(tmp_path: Path) -> None:
    from dethpc.store import Store

    db = tmp_path / "dethpc.db"
    assert Reader.open(db) is None and not db.exists()      # never creates the file
    Store(f"sqlite:///{db}").engine.dispose()
    reader = Reader.open(db)
    assert reader is not None and reader.experiments() == []
    reader.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0009'")
    assert Reader.open(db) is None
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    assert Reader.open(tmp_path / "junk.db") is None


def test_rows_have_the_models_types(tmp_path: Path) -> None:
    from dethpc.common.kinds import ExperimentKind
    from dethpc.store import Store
    from dethpc.store.models import Experiment, Trial, TrialState

    db = tmp_path / "dethpc.db"
    store = Store(f"sqlite:///{db}")
    with store.session() as s:
        e = Experiment(name="x", config_yaml="", run_dir="/r", labels=["a"])
        s.add(e)
        s.flush()
        s.add(Trial(experiment_id=e.id or 0, request_id=0, hparams={"lr": 0.1},
                    state=TrialState.ERROR))
    with store.session() as s:
        orm_exp = s.get(Experiment, 1)
        orm_trial = s.get(Trial, 1)
    store.engine.dispose()
    reader = Reader.open(db)
    assert reader is not None
    exp, trial = reader.experiment(1), reader.trial(1)
    for row, orm in ((exp, orm_exp), (trial, orm_trial)):
        assert vars(row) == orm.model_dump()                    # type: ignore[union-attr]
    assert exp.kind is ExperimentKind.MANAGED and trial.state.is_terminal
    assert trial.needs_job is True
    reader.close()
