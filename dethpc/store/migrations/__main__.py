"""``python -m dethpc.store.migrations new "what changes"``: a new, empty revision script.

Owns: the developer's helper that numbers the next revision (``0002``, ``0003``, ...) and
writes ``versions/NNNN_what_changes.py`` from ``script.py.mako``; fill in ``upgrade()`` by
hand, then run ``pytest tests/unit/store/test_store_migrations.py``.
"""

from __future__ import annotations

import sys

from dethpc.store.migrations import alembic_config, head_revision


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "new" or not argv[1].strip():
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    from alembic import command

    # Alembic prints the path of the file it writes
    command.revision(alembic_config(), message=argv[1], rev_id=f"{int(head_revision()) + 1:04d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
