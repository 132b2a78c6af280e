"""The dashboard's queries on PostgreSQL, as a dethpc admin (a superuser: every row).

The same store as the SQLite tests (``tests/dashboard_seed.py``) in a database of its
own on the tier's throwaway server: the admin's dashboard lists every user's experiments
(another user's included, which a user's dashboard never shows, see
tests/unit/surfaces/test_dashboard.py), and an experiment page, ASHA's rungs and a trial with its
pending reason and log come back as on SQLite.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from dethpc.control.experiments import current_user
from dethpc.store import Store
from dethpc.store.access import Scope
from dethpc.surfaces.dashboard import data
from tests.dashboard_seed import LOG_LINES, seed


def test_an_admins_dashboard_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DROP DATABASE IF EXISTS dethpc_dashboard"))
        conn.execute(text("CREATE DATABASE dethpc_dashboard"))
    url = make_url(postgres_url).set(database="dethpc_dashboard").render_as_string(
        hide_password=False)
    try:
        ids = seed(tmp_path, url)
        store = Store(url)
        assert store.role.scope is Scope.ALL_ROWS
        owner = data.visible_owner(store.role, current_user())
        assert owner is None
        shown = {e["id"]: e for e in data.experiments(store, owner)}
        assert set(shown) == {ids["finished"], ids["running"], ids["asha"], ids["other"]}
        assert shown[ids["other"]]["owner"] == f"not-{current_user()}"
        page = data.experiment_page(store, ids["finished"], owner, data.Page(2, 3))
        assert [t["id"] for t in page["trials"]] == ids["finished_trials"][3:]
        assert page["best_trial"]["id"] == ids["best_trial"]
        assert len(page["trials"][0]["curve"]) == 5
        assert [len(b["rungs"]) for b in
                data.experiment_page(store, ids["asha"], owner)["rungs"]] == [3, 2]
        trial = data.trial_page(store, ids["waiting_trial"], owner)
        assert trial["pending_reason"] == "QOSMaxJobsPerUserLimit"
        assert trial["log_tail"].splitlines()[-1] == f"log line {LOG_LINES - 1}"
        store.engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text("DROP DATABASE IF EXISTS dethpc_dashboard WITH (FORCE)"))
        admin.dispose()
