"""v9: a job's cancel that has not gone through (docs/architecture.md, "Cancels").

Revision ID: 0009
Revises: 0008

- ``job.cancel_due`` (BOOLEAN, not null, indexed ``ix_job_cancel_due``): the daemon
  closed the job (a stopped trial's job still pending in Slurm) and asked Slurm to
  cancel it, but ``scancel`` has not succeeded yet; the daemon cancels such jobs again
  on every tick until it does. Existing rows get false. Row-level security (0006)
  already covers the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as b:
        b.add_column(sa.Column("cancel_due", sa.Boolean(), nullable=False,
                               server_default=sa.false()))
    with op.batch_alter_table("job") as b:
        b.alter_column("cancel_due", server_default=None, existing_type=sa.Boolean(),
                       existing_nullable=False)
    op.create_index("ix_job_cancel_due", "job", ["cancel_due"])


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
