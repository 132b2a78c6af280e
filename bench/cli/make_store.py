"""Write a large store for bench/cli once: ``EXPERIMENTS`` experiments, ``TRIALS`` trials.

One experiment (examples/digits' random search, COMPLETED, the current user's) and one
trial go in through the ORM, so the rows are what dethpc writes; the rest are copied from
them by two bulk ``INSERT ... SELECT`` statements in one transaction (seconds for
100,000 trials, against minutes row by row). The trials are spread evenly over the
experiments; the last trial's job output (200 lines) is written to its run directory.

Usage (``DETHPC_HOME`` names the home): python bench/cli/make_store.py EXPERIMENTS TRIALS
RUN_DIR. Prints the id of the last experiment and of the last trial.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

from dethpc.control.experiments import current_user
from dethpc.store import Store
from dethpc.store.models import Experiment, ExperimentState, Trial, TrialState

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "digits" / "random.yaml"


def main() -> None:
    experiments, trials, runs = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    per = max(1, trials // experiments)
    store = Store()
    if not store.url.startswith("sqlite:///"):
        raise SystemExit("bench/cli writes its store to SQLite only")
    now = time.time()
    with store.session() as db:
        e = Experiment(name="digits-random", config_yaml=CONFIG.read_text(), run_dir=str(runs),
                       state=ExperimentState.COMPLETED, owner=current_user(),
                       labels=["example", "digits"], progress=1.0, created_at=now,
                       ended_at=now)
        db.add(e)
        db.flush()
        db.add(Trial(experiment_id=e.id or 0, request_id=0, state=TrialState.COMPLETED,
                     hparams={"global_batch_size": 32, "lr": 0.01, "hidden_size": 64,
                              "dropout": 0.1, "optimizer": "adam"},
                     target_length=200, validate_at=[50, 100, 150, 200], runs=1,
                     steps_completed=200, best_validation=0.25, latest_validation=0.3,
                     exit_reason="completed", needs_job=False, created_at=now, ended_at=now))
    store.engine.dispose()
    db = sqlite3.connect(store.url.removeprefix("sqlite:///"))
    ecols = ", ".join(r[1] for r in db.execute("PRAGMA table_info(experiment)")
                      if r[1] != "id")
    tcols = [r[1] for r in db.execute("PRAGMA table_info(trial)")
             if r[1] not in ("id", "experiment_id", "request_id")]
    with db:
        db.execute(f"WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n "
                   f"WHERE i < ?) INSERT INTO experiment (id, {ecols}) "
                   f"SELECT n.i, {ecols} FROM n, experiment e WHERE e.id = 1", (experiments,))
        db.execute(f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n "
                   f"WHERE i < ? - 1) INSERT INTO trial (experiment_id, request_id, "
                   f"{', '.join(tcols)}) SELECT e.id, n.i, "
                   f"{', '.join('t.' + c for c in tcols)} FROM experiment e, n, trial t "
                   f"WHERE t.id = 1 AND NOT (e.id = 1 AND n.i = 0) ORDER BY e.id, n.i",
                   (per,))
    last_exp, last_trial = db.execute(
        "SELECT max(experiment_id), max(id) FROM trial").fetchone()
    db.close()
    trial_dir = runs / "trials" / str(last_trial)
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "slurm-1.out").write_text("".join(
        f"step {i}: loss {1 / (i + 1):.4f}\n" for i in range(200)))
    print(last_exp, last_trial)


if __name__ == "__main__":
    main()
