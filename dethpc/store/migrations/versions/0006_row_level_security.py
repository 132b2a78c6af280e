"""v6: users of one shared PostgreSQL database see and change only their own rows.

Revision ID: 0006
Revises: 0005

PostgreSQL only (on SQLite, the database is one user's file in a 0700 ``DETHPC_HOME``,
and this revision changes nothing):

- group roles ``dethpc_users`` (may use the tables; every user's login role is a member)
  and ``dethpc_admin`` (sees and may change every row; a member of ``dethpc_users``),
  created when missing (roles belong to the server, not to one database). The role
  that migrates (the schema owner) becomes a member of ``dethpc_admin`` unless it is a
  superuser, which row-level security does not restrict anyway.
- grants to ``dethpc_users``: ``USAGE`` on the schema, ``SELECT, INSERT, UPDATE,
  DELETE`` on dethpc's tables, ``SELECT`` on ``alembic_version`` (a user's dethpc checks
  the revision on open and never migrates), ``USAGE, SELECT`` on the id sequences. No
  ``CREATE``: only the schema owner changes the schema.
- ``ENABLE`` and ``FORCE ROW LEVEL SECURITY`` on every table but ``alembic_version``,
  and one policy per table, for every command (``USING`` and ``WITH CHECK``): a row is
  visible and writable when ``pg_has_role(current_user, 'dethpc_admin', 'MEMBER')`` or
  when it is the connected role's:

  * ``experiment`` and ``daemonlease``: ``owner = current_user`` (the Unix user's name,
    which is the role's name; a user cannot insert or update a row to another owner);
  * ``searcherstate``, ``trial``, ``batch``, ``job``, ``checkpoint``, ``event``: their
    ``experiment_id`` is an experiment of ``current_user`` (``EXISTS``, an index lookup
    on ``experiment.id``), so a row cannot be attached to another user's experiment;
  * ``metric``, ``ingestoffset``: their ``trial_id`` is a trial of such an experiment.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

USERS = "dethpc_users"
ADMIN = "dethpc_admin"
IS_ADMIN = f"pg_has_role(current_user, '{ADMIN}', 'MEMBER')"
SUPERUSER = "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"

#: a row of table ``T`` whose experiment, or whose trial's experiment, is the role's
VIA_EXPERIMENT = ("EXISTS (SELECT 1 FROM experiment e WHERE e.id = T.experiment_id "
                  "AND e.owner = current_user::text)")
VIA_TRIAL = ("EXISTS (SELECT 1 FROM trial t JOIN experiment e ON e.id = t.experiment_id "
             "WHERE t.id = T.trial_id AND e.owner = current_user::text)")
#: table -> the predicate that makes a row the connected role's
OWNERSHIP: dict[str, str] = {
    "experiment": "experiment.owner = current_user::text",
    "daemonlease": "daemonlease.owner = current_user::text",
    **{t: VIA_EXPERIMENT.replace("T.", f"{t}.")
       for t in ("searcherstate", "trial", "batch", "job", "checkpoint", "event")},
    **{t: VIA_TRIAL.replace("T.", f"{t}.") for t in ("metric", "ingestoffset")},
}
SEQUENCES = ("experiment_id_seq", "trial_id_seq", "batch_id_seq", "job_id_seq",
             "metric_id_seq", "event_id_seq")


def _create_role(name: str) -> str:
    """Create a NOLOGIN group role unless it exists (another database of this server, or a
    concurrent migration of one, may have created it)."""
    missing = f"NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{name}')"  # noqa: S608
    return (f"DO $$ BEGIN IF {missing} THEN CREATE ROLE {name} NOLOGIN; END IF; "
            "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$")


def statements() -> list[str]:
    """The revision's SQL, in order (a test reads it; nothing here is user input)."""
    sql = [_create_role(USERS), _create_role(ADMIN),
           f"GRANT {USERS} TO {ADMIN}",
           # the schema owner must still see every row once FORCE applies to it
           (f"DO $$ BEGIN IF NOT {SUPERUSER} THEN "
            f"EXECUTE format('GRANT {ADMIN} TO %I', current_user); END IF; END $$"),
           ("DO $$ BEGIN EXECUTE format('GRANT USAGE ON SCHEMA %I TO " + USERS + "', "
            "current_schema()); END $$"),
           f"GRANT SELECT ON alembic_version TO {USERS}",
           f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(OWNERSHIP)} TO {USERS}",
           f"GRANT USAGE, SELECT ON SEQUENCE {', '.join(SEQUENCES)} TO {USERS}"]
    for table, mine in OWNERSHIP.items():
        allowed = f"{IS_ADMIN} OR {mine}"
        sql += [f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
                f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
                f"CREATE POLICY dethpc_owner ON {table} FOR ALL "
                f"USING ({allowed}) WITH CHECK ({allowed})"]
    return sql


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in statements():
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("dethpc does not downgrade a database: restore its backup")
