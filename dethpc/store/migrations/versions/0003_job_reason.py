"""v3: the backend's reason for a job's state (Slurm's pending reason) is stored.

Revision ID: 0003
Revises: 0002

- ``job.reason`` (VARCHAR, not null, '' for none): what the last poll said of the job's
  state, e.g. ``Priority``, ``Resources`` or ``QOSMaxJobsPerUserLimit`` for a pending
  job; ``dethpc experiment describe`` shows it per trial. Existing rows get ''.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as b:
        b.add_column(sa.Column("reason", sa.String(), nullable=False, server_default=""))
    with op.batch_alter_table("job") as b:
        b.alter_column("reason", server_default=None, existing_type=sa.String(),
                       existing_nullable=False)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
