"""Alembic's environment for dethpc's state database (Alembic runs it; nothing imports it).

Owns: configuring Alembic on the connection that ``dethpc.store.migrations`` hands over in
``config.attributes["connection"]`` (already inside the caller's locked transaction, which
the caller commits). SQLite gets batch mode: its ALTER TABLE cannot drop or change columns,
so ``op.batch_alter_table`` re-creates the table.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "dethpc's migrations run when dethpc opens its database (dethpc.store.Store); "
        "there is no alembic.ini: open the store instead of running alembic directly")

context.configure(connection=connection, target_metadata=None,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
