"""v5: the daemon's lease (one daemon per user across login nodes).

Revision ID: 0005
Revises: 0004

- ``daemonlease`` (``owner`` primary key, ``holder``, ``acquired_at``, ``expires_at``):
  dethpc.control.lease takes, renews and releases it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "daemonlease",
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("owner"),
    )


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
