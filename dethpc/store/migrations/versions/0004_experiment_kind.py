"""v4: an experiment's kind (who submits its jobs, what wraps them).

Revision ID: 0004
Revises: 0003

- ``experiment.kind`` (VARCHAR(32), not null): ``managed`` (``dethpc submit``),
  ``script`` (``dethpc sbatch --search``), ``sbatch`` (``dethpc sbatch``) or
  ``detached`` (a job that registered itself). Existing rows are ``managed``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiment") as b:
        b.add_column(sa.Column("kind", sa.String(length=32), nullable=False,
                               server_default="managed"))
    with op.batch_alter_table("experiment") as b:
        b.alter_column("kind", server_default=None, existing_type=sa.String(length=32),
                       existing_nullable=False)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
