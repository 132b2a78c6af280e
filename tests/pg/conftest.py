"""A throwaway PostgreSQL server for the store tests (``tests.pg.pgserver.PgServer``:
Debian's postgresql binaries, a data directory under /tmp, stopped at the end). On
127.0.0.1 the ``dethpc`` superuser is trusted; every other role (the users that
``dethpc admin db add-user`` creates) logs in with its SCRAM password.

Without the binaries the tests skip with the reason, except under ``CI=true``,
where they FAIL (``scripts/test.sh`` installs Debian's ``postgresql`` as root).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from dethpc.store import Store
from dethpc.store.models import Experiment
from tests.conftest import in_ci
from tests.pg.pgserver import PgServer, bindir


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true makes the PostgreSQL tests mandatory, but {reason}")
    pytest.skip(f"no PostgreSQL: {reason} (apt-get install postgresql)")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    if bindir() is None:
        _unavailable("Debian's postgresql binaries are not installed")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    server = PgServer()   # tests/pg/pgserver.py, which bench/tick_scale uses too
    server.start()
    try:
        server.create("dethpc")
        yield server.url("dethpc")
    finally:
        server.stop()


@pytest.fixture
def pg_store(postgres_url: str) -> Store:
    """A ``Store`` on the session's PostgreSQL database."""
    return Store(postgres_url)


@pytest.fixture
def new_experiment(pg_store: Store) -> Callable[..., int]:
    """``new_experiment(name, config_yaml="{}", run_dir="/r")``: an experiment row added
    to ``pg_store`` in its own committed session, its id (the row the store tests start
    from)."""
    def add(name: str, config_yaml: str = "{}", run_dir: str = "/r") -> int:
        with pg_store.session() as s:
            exp = Experiment(name=name, config_yaml=config_yaml, run_dir=run_dir)
            s.add(exp)
            s.flush()
            assert exp.id is not None
            return exp.id
    return add
