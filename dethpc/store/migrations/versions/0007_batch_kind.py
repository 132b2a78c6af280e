"""v7: what a submission carries (the worker pool, docs/worker-pool.md).

Revision ID: 0007
Revises: 0006

- ``batch.kind`` (VARCHAR(32), not null): ``trials`` (one job per trial run, every
  batch before this revision), ``workers`` (a worker pool's array of long-lived
  workers) or ``items`` (work items put in a pool's queue; their job rows' refs name
  items, not Slurm jobs). Existing rows get ``trials``. Row-level security (0006)
  already covers the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batch") as b:
        b.add_column(sa.Column("kind", sa.String(length=32), nullable=False,
                               server_default="trials"))
    with op.batch_alter_table("batch") as b:
        b.alter_column("kind", server_default=None, existing_type=sa.String(length=32),
                       existing_nullable=False)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
