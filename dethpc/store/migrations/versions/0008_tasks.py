"""v8: tasks, the non-trial processes and jobs a user starts (docs/observability.md).

Revision ID: 0008
Revises: 0007

- table ``task``: id, kind (tensorboard | notebook | shell | command), owner, state
  (starting | running | ended | failed), pid, job_ref, host, endpoint, work_dir,
  idle_timeout_s, experiment_ids (JSON), message, created_at, ended_at.
- PostgreSQL: the same owner policy as 0006's ``experiment`` (``owner = current_user``,
  or a member of ``dethpc_admin``), grants to ``dethpc_users`` on the table and its id
  sequence.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

USERS = "dethpc_users"
ALLOWED = ("pg_has_role(current_user, 'dethpc_admin', 'MEMBER') "
           "OR task.owner = current_user::text")


def statements() -> list[str]:
    """PostgreSQL's row-level security for ``task`` (a test reads it)."""
    return [f"GRANT SELECT, INSERT, UPDATE, DELETE ON task TO {USERS}",
            f"GRANT USAGE, SELECT ON SEQUENCE task_id_seq TO {USERS}",
            "ALTER TABLE task ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE task FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY dethpc_owner ON task FOR ALL USING ({ALLOWED}) "
            f"WITH CHECK ({ALLOWED})"]


def upgrade() -> None:
    op.create_table(
        "task",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Enum("tensorboard", "notebook", "shell", "command",
                                  name="taskkind", native_enum=False,
                                  create_constraint=False, length=32), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("state", sa.Enum("starting", "running", "ended", "failed",
                                   name="taskstate", native_enum=False,
                                   create_constraint=False, length=32), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("job_ref", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("endpoint", sa.String(), nullable=False),
        sa.Column("work_dir", sa.String(), nullable=False),
        sa.Column("idle_timeout_s", sa.Float(), nullable=False),
        sa.Column("experiment_ids", sa.JSON(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_task_owner", "task", ["owner"])
    if op.get_bind().dialect.name == "postgresql":
        for statement in statements():
            op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
