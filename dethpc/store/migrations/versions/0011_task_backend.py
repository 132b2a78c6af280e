"""v11: the backend a task's job went to (docs/interactive.md).

Revision ID: 0011
Revises: 0010

- ``task.backend`` (VARCHAR(32), not null): ``slurm`` or ``local`` (``BackendKind``'s
  value) for a task whose job went through a backend (a shell, notebook, command, or
  TensorBoard's ``--slurm`` job); "" for a task that is a process on its host (TensorBoard
  without ``--slurm``). Liveness and ``task kill`` ask that backend. Existing rows with a
  job get ``slurm`` (only Slurm ran tasks' jobs before this revision), the others "".

Row-level security (0008) already covers the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task") as b:
        b.add_column(sa.Column("backend", sa.String(length=32), nullable=False,
                               server_default=""))
    op.execute("UPDATE task SET backend = 'slurm' WHERE job_ref != ''")
    with op.batch_alter_table("task") as b:
        b.alter_column("backend", server_default=None, existing_type=sa.String(length=32),
                       existing_nullable=False)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
