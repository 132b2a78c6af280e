"""The schema revision this dethpc reads and writes without Alembic.

Owns: ``HEAD_REVISION``, the newest revision script's id (``dethpc/store/migrations/
versions/NNNN_*.py``), a constant so that the paths that check a SQLite store's revision
with ``sqlite3`` alone (``reader.Reader.open`` for the read commands,
``new_experiment.SqliteAtHead.open`` for ``dethpc submit``) list no directory for it.
``migrations.head_revision`` reads the file names; tests/unit/store/test_store_reader.py
fails when the two differ, so a new revision script must change this line.
Must not: import anything.
"""

#: the newest schema revision: a store at any other is left to the ORM path (``Store``)
HEAD_REVISION = "0011"
