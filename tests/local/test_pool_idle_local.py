"""A pool holds a worker only while there is work for it (issue 48's finding: workers
stayed idle after ASHA had stopped most trials, 2.76 GPU-hours held for 0.17 used).

A search of 4 trials under a concurrency limit of 8 starts 4 workers, not 8; when ASHA
has stopped the trials it does not continue, the idle workers leave at once (the
daemon retires those beyond the live runs: ``plan_workers``), here with the workers'
own ``idle_exit_s`` off so that only that rule can end them; the survivors' runs are
held on a file until then, so the check does not race the search's end.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlmodel import select

from dethpc.common import worker_queue as queue
from dethpc.store import Store
from dethpc.store.models import Batch, BatchKind
from tests.local.conftest import TOY, cli, wait_for, write_config


def _workers_held(home: Path) -> int:
    """Worker tasks the local backend runs now (what the allocation holds; every task of
    this home is a pool worker). Not processes: a worker forks its trials."""
    states = [json.loads(p.read_text()) for p in
              (home / "local-spool" / "tasks").glob("*/state.json")]
    return sum(1 for st in states if st.get("state") == "running")


def test_workers_no_more_than_the_work_and_idle_ones_leave(home, tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    cfg = write_config(
        tmp_path / "c.yaml",
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 6},
                         "step_time": 0.05, "wait_at": 8, "wait_while": str(hold)},
        searcher={"name": "adaptive_asha", "metric": "validation_loss", "max_trials": 4,
                  "max_concurrent_trials": 8, "divisor": 4, "max_rungs": 2,
                  "max_length": {"batches": 16}, "mode": "aggressive"},
        slurm={"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                           "lease_timeout_s": 30, "idle_exit_s": 0}})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    run_dir = Path(json.loads(cli("experiment", "describe", exp, "--json").stdout)["run_dir"])
    pool = queue.WorkerPoolPaths.of_run_dir(run_dir)

    def at_hold() -> int:     # runs past their rung that wait at step 8 on the hold
        return sum(1 for m in (run_dir / "trials").glob("*/metrics.jsonl")
                   if any(json.loads(line).get("kind") == "training"
                          and json.loads(line).get("steps") == 8
                          for line in m.read_text().splitlines() if line.strip()))

    def rung_judged() -> bool:
        # every run either ended (ASHA stopped it at its rung: its lease is gone) or waits
        # at step 8 on the hold, holding its lease until the hold goes. A run still
        # waiting for its rung's verdict holds a lease but is not at the hold yet: the
        # count is taken only once there is none (taking it earlier raced that verdict:
        # a lease counted held was handed back by the stop a moment later)
        leases = len(queue.active_leases(pool))
        return leases < 4 and leases == at_hold()

    try:
        wait_for(rung_judged, timeout=120, what="ASHA stopping trials at its first rung")
        held = len(queue.active_leases(pool))
        # the stopped trials' workers leave while the survivors' runs still hold theirs
        wait_for(lambda: _workers_held(home) == held, timeout=60, interval=0.1,
                 what=f"the idle workers leaving ({held} run(s) still held)")
        assert len(queue.active_leases(pool)) == held     # the held runs kept their workers
    finally:     # a failure must not leave the held runs (and their workers) behind
        hold.unlink(missing_ok=True)
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED" and len(d["trials"]) == 4, d
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    with store.session() as s:
        sizes = [b.size for b in s.exec(select(Batch).where(
            Batch.experiment_id == exp, Batch.kind == BatchKind.WORKERS))]
    assert sizes == [4], sizes       # one per runnable trial, not the limit of 8
    wait_for(lambda: _workers_held(home) == 0, timeout=60, what="the workers ending")
