"""v10: what a trial's training code tells the daemon besides metrics (docs/job-contract.md,
"Records for Determined's master calls").

Revision ID: 0010
Revises: 0009

- ``trial.meta`` (JSON, not null): the trial's metadata, as the training code last set it
  (``core_context.train.set_metadata``; Determined's trial metadata). Existing rows get ``{}``.
- ``trial.early_exit`` (VARCHAR(32), not null): the early exit the training code reported
  (``invalid_hp``, ``user_requested_stop``; Determined's ``EarlyExitReason``), "" none.
  The daemon tells the searcher when the trial's job ends. Existing rows get "".
- ``event.data`` (JSON, null): the fields of an event beyond its one-line message (an
  alert's level, title and description). Existing rows get NULL.

Row-level security (0006) already covers both tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trial") as b:
        b.add_column(sa.Column("meta", sa.JSON(), nullable=False,
                               server_default=sa.text("'{}'")))
        b.add_column(sa.Column("early_exit", sa.String(length=32), nullable=False,
                               server_default=""))
    with op.batch_alter_table("trial") as b:
        b.alter_column("meta", server_default=None, existing_type=sa.JSON(),
                       existing_nullable=False)
        b.alter_column("early_exit", server_default=None, existing_type=sa.String(length=32),
                       existing_nullable=False)
    with op.batch_alter_table("event") as b:
        b.add_column(sa.Column("data", sa.JSON(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
