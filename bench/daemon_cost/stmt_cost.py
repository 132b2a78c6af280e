"""What one store statement costs the daemon's process, by the layer it goes through.

The same two statements the daemon makes many times a pass -- one trial's row read by id,
and one trial row's UPDATE -- through Python's ``sqlite3`` (the floor), SQLAlchemy Core
(a statement built once, bound parameters) and the ORM (``sqlmodel``: a ``select`` of
``Trial`` objects; an attribute set and a ``Session.flush``), on a SQLite file created by
dethpc's own ``Store`` (the daemon's schema, 200 trials). CPU microseconds per statement
(``time.process_time`` over N statements after a warm-up of 50).

Why (issue 47 item 2): a pass of the daemon in bench/peers' pool search makes about 38
statements; this says what share of a pass the statements' layer can be, next to the
phase timings in ``bench/results/peers_128_issue47h_fast_acts.json``.

Usage: python bench/daemon_cost/stmt_cost.py [--n N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import bindparam, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from dethpc.store import Store
from dethpc.store.models import Experiment, Trial

REPO = Path(__file__).resolve().parents[2]
READ_SQL = ("SELECT id, experiment_id, request_id, state, hparams, target_length, "
            "validate_at, steps_completed FROM trial WHERE id = ?")
UPDATE_SQL = "UPDATE trial SET steps_completed = ? WHERE id = ?"


def build(root: Path, trials: int = 200) -> tuple[Store, Path, list[int]]:
    db = root / "db.sqlite"
    store = Store(f"sqlite:///{db}")
    with store.session() as s:
        exp = Experiment(name="stmt-cost", config_yaml="{}", run_dir=str(root))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        rows = [Trial(experiment_id=exp.id, request_id=i, hparams={"x": i},
                      target_length=512, validate_at=[32, 128, 512]) for i in range(trials)]
        s.add_all(rows)
        s.flush()
        ids = [t.id for t in rows if t.id is not None]
    return store, db, ids


def per_statement(fn: Callable[[int], None], n: int) -> float:
    """CPU microseconds per statement of ``fn(n)`` (after ``fn(50)``)."""
    fn(50)
    start = time.process_time()
    fn(n)
    return round((time.process_time() - start) / n * 1e6, 1)


def measure(store: Store, db: Path, ids: list[int], n: int) -> dict[str, float]:
    table = Trial.__table__  # type: ignore[attr-defined]
    core_read = sa_select(table).where(table.c.id == bindparam("id"))
    core_update = update(table).where(table.c.id == bindparam("tid")).values(
        steps_completed=bindparam("v"))
    orm_read = select(Trial).where(col(Trial.id) == bindparam("id"))

    def read_sqlite3(k: int) -> None:
        con = sqlite3.connect(db)
        for i in range(k):
            con.execute(READ_SQL, (ids[i % len(ids)],)).fetchall()
        con.close()

    def read_core(k: int) -> None:
        with store.engine.connect() as c:
            for i in range(k):
                c.execute(core_read, {"id": ids[i % len(ids)]}).fetchall()

    def read_orm(k: int) -> None:
        with Session(store.engine) as s:
            for i in range(k):
                list(s.exec(orm_read, params={"id": ids[i % len(ids)]}))
                s.expunge_all()

    def update_sqlite3(k: int) -> None:
        con = sqlite3.connect(db)
        for i in range(k):
            con.execute(UPDATE_SQL, (i, ids[i % len(ids)]))
        con.rollback()
        con.close()

    def update_core(k: int) -> None:
        with store.engine.connect() as c:
            for i in range(k):
                c.execute(core_update, {"tid": ids[i % len(ids)], "v": i})
            c.rollback()

    def update_orm(k: int) -> None:
        with Session(store.engine) as s:
            rows = {t.id: t for t in s.exec(select(Trial))}
            for i in range(k):
                t = rows[ids[i % len(ids)]]
                t.steps_completed = i + 1
                s.add(t)
                s.flush()
            s.rollback()

    return {"read: sqlite3": per_statement(read_sqlite3, n),
            "read: SQLAlchemy Core": per_statement(read_core, n),
            "read: ORM (sqlmodel)": per_statement(read_orm, n),
            "update: sqlite3": per_statement(update_sqlite3, n),
            "update: SQLAlchemy Core": per_statement(update_core, n),
            "update: ORM attribute + flush": per_statement(update_orm, n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="statements per layer")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" /
                    "daemon_stmt_cost.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, db, ids = build(Path(tmp))
        figures = measure(store, db, ids, args.n)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    doc = {"benchmark": "bench/daemon_cost/stmt_cost.py",
           "regime": f"SQLite file, 200 trials, {args.n} statements a layer, one process, "
                     f"the machine otherwise idle ({platform.machine()}, "
                     f"{platform.python_version()})",
           "commit": commit, "cpu_us_per_statement": figures}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
