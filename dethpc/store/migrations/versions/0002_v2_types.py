"""v2: state enums, JSON columns, persisted unknown-tick counts, no schemainfo.

Revision ID: 0002
Revises: 0001

- ``*_json`` TEXT columns become JSON columns without the suffix
  (``experiment.labels``, ``searcherstate.snapshot``, ``trial.hparams``,
  ``trial.validate_at``, ``checkpoint.meta``, ``metric.metrics``). The stored
  text is already JSON: SQLite keeps it as is; PostgreSQL casts it (``::json``).
- State columns become VARCHAR(32) holding enum values (``Enum(native_enum=False)``
  in the models; no database enum type, so a new member needs no migration).
- ``trial.stop_reason`` and ``job.exit_reason`` become nullable: '' -> NULL; an
  exit reason this dethpc does not know becomes 'error' (it could not be read back).
- ``job.unknown_ticks`` (polls in a row the backend had no record of the job) moves
  from the daemon's memory into the store.
- ``searcherstate.events_applied`` (never used) and the ``schemainfo`` table
  (replaced by Alembic's ``alembic_version``) are dropped.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ENUM = sa.String(32)
#: ExitReason values as of this revision
_EXIT_REASONS = ("completed", "preempted", "time_limit", "requeued", "stopped", "node_fail",
                 "error", "cancelled")
_JSON = {  # table: [(old, new)]
    "experiment": [("labels_json", "labels")],
    "searcherstate": [("snapshot_json", "snapshot")],
    "trial": [("hparams_json", "hparams"), ("validate_at_json", "validate_at")],
    "checkpoint": [("metadata_json", "meta")],
    "metric": [("metrics_json", "metrics")],
}
_STATES = {"experiment": ["state"], "trial": ["state"], "batch": ["state"], "job": ["state"],
           "checkpoint": ["state"]}


def upgrade() -> None:
    for table in ("experiment", "searcherstate", "trial", "batch", "job", "checkpoint",
                  "metric"):
        with op.batch_alter_table(table) as b:
            for old, new in _JSON.get(table, []):
                b.alter_column(old, new_column_name=new, type_=sa.JSON(),
                               existing_type=sa.String(), existing_nullable=False,
                               postgresql_using=f"{old}::json")
            for col in _STATES.get(table, []):
                b.alter_column(col, type_=_ENUM, existing_type=sa.String(),
                               existing_nullable=False)
            if table == "trial":
                b.alter_column("stop_reason", type_=_ENUM, existing_type=sa.String(),
                               nullable=True, existing_nullable=False)
            if table == "job":
                b.alter_column("exit_reason", type_=_ENUM, existing_type=sa.String(),
                               nullable=True, existing_nullable=False)
                b.add_column(sa.Column("unknown_ticks", sa.Integer(), nullable=False,
                                       server_default="0"))
            if table == "searcherstate":
                b.drop_column("events_applied")
    with op.batch_alter_table("job") as b:
        b.alter_column("unknown_ticks", server_default=None, existing_type=sa.Integer(),
                       existing_nullable=False)
    # the columns are nullable now: '' (no reason) becomes NULL
    op.execute("UPDATE trial SET stop_reason = NULL WHERE stop_reason = ''")
    op.execute("UPDATE job SET exit_reason = NULL WHERE exit_reason = ''")
    known = ", ".join(f"'{r}'" for r in _EXIT_REASONS)
    op.execute(f"UPDATE job SET exit_reason = 'error' "  # noqa: S608 (constants only)
               f"WHERE exit_reason IS NOT NULL AND exit_reason NOT IN ({known})")
    op.drop_table("schemainfo")


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
