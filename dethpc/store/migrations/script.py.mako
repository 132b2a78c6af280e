"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Write the operations by hand with plain SQLAlchemy types (never import dethpc.store.models
or sqlmodel here: this file must keep describing the schema as it is today). SQLite needs
``with op.batch_alter_table("t") as b:`` to drop or change a column.
tests/unit/test_store_migrations.py fails until head matches the models.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    raise NotImplementedError("dethpc migrates forward only; restore the backup instead")
