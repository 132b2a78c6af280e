"""The worker pool driven by the daemon on the local backend (issue 16 item 1).

ASHA's promotions run as new work items in live workers (no job per run); the
workers drain and exit when the experiment ends; ``set-concurrency`` shrinks a pool
of 3 workers to 1: the surplus finish their current run and exit, and the runs still
waiting then all go to the one left. Preemption, a node crash and a daemon SIGKILL
are proven on the dev cluster (tests/slurm/test_pool_daemon_slurm.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sqlmodel import select

from dethpc.backends.local_supervisor import NODENAME
from dethpc.common import worker_queue as queue
from dethpc.control.worker_pool_view import parse_item_ref
from dethpc.store import Store
from dethpc.store.models import Batch, BatchKind, Job
from tests.local.conftest import REPO, TOY, cli, wait_for, write_config


def _workers_alive(run_dir: Path) -> list[int]:
    """Pids of pool workers serving ``run_dir`` (their command line names it)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dethpc.launch.worker" in argv and str(run_dir).encode() in argv:
            found.append(int(pid))
    return found


def _submit(cfg: Path) -> tuple[int, Path]:
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    return exp, Path(d["run_dir"])


def test_promotions_run_as_items_in_live_workers_which_drain_at_the_end(home, tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        searcher={"name": "adaptive_asha", "metric": "validation_loss", "max_trials": 6,
                  "max_concurrent_trials": 2, "divisor": 3, "max_rungs": 3,
                  "max_length": {"batches": 18}, "variant": "promotion"},
        slurm={"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                           "lease_timeout_s": 30}})
    exp, run_dir = _submit(cfg)
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED", d
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    with store.session() as s:
        jobs = list(s.exec(select(Job).where(Job.experiment_id == exp)))
        batches = list(s.exec(select(Batch).where(Batch.experiment_id == exp)))
    workers = [b for b in batches if b.kind == BatchKind.WORKERS]
    assert [b.size for b in workers] == [2], workers          # one array, never again
    assert all(parse_item_ref(j.ref or "") for j in jobs)
    promoted = [j for j in jobs if not (j.ref or "").endswith("-s0")]
    assert promoted, "ASHA promoted nothing"
    for job in jobs:   # each run ran once, by a worker, and its record names the item
        recs = [json.loads(line) for line in (run_dir / "trials" / str(job.trial_id)
                                              / "exits.jsonl").read_text().splitlines()]
        mine = [r for r in recs if r["job"] == job.ref]
        assert [r["reason"] for r in mine] in (["completed"], ["stopped"]), (job.ref, recs)
        assert mine[0]["worker"] is True
        # the run's node (what the bad-node rule counts), never the worker's id
        assert mine[0]["nodes"] == [NODENAME] and job.nodes == NODENAME, (mine, job.nodes)
    assert (run_dir / "pool" / "drain").exists()
    wait_for(lambda: not _workers_alive(run_dir), timeout=60, what="drained workers exit")


def test_set_concurrency_retires_surplus_workers_after_their_run(home, tmp_path):
    # the first runs wait on a file until the shrink was given: 3 workers hold trials
    # when it comes however slow the machine is (CI: a 12-trial search of 5 s trials
    # completed while `set-concurrency`'s python started on a loaded box)
    hold = tmp_path / "hold"
    hold.touch()
    cfg = write_config(
        tmp_path / "c.yaml",
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 6},
                         "step_time": 0.25, "hold_while": str(hold)},
        searcher={"name": "random", "metric": "validation_loss", "max_trials": 12,
                  "max_concurrent_trials": 3, "max_length": {"batches": 20}},
        slurm={"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                           "lease_timeout_s": 30}})
    exp, run_dir = _submit(cfg)
    pool = queue.WorkerPoolPaths.of_run_dir(run_dir)
    wait_for(lambda: len(queue.active_leases(pool)) == 3, timeout=120,
             interval=0.05, what="3 workers holding trials")
    cli("experiment", "set-concurrency", exp, "1")
    hold.unlink()
    wait_for(lambda: len(os.listdir(pool.retire)) == 2 if pool.retire.exists() else False,
             timeout=60, what="2 workers retired")
    wait_for(lambda: len(_workers_alive(run_dir)) == 1, timeout=120, what="2 workers exit")
    # every run that had not ended when the two were gone
    ended = {p.name for p in pool.results.glob("*.json")}
    survivor = {n.split(queue.LEASE_SEP)[0] for n in queue.active_leases(pool)}
    cli("experiment", "wait", exp, "--timeout", "180", timeout=200)
    later = [queue.RunResult.from_json(p.read_text()) for p in pool.results.glob("*.json")
             if p.name not in ended]
    # the searcher created more after the shrink (3 trials had started before it)
    assert len(later) >= 2, later
    assert len({r.worker for r in later}) == 1, later
    assert not survivor or {r.worker for r in later} == survivor
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED" and len(d["trials"]) == 12


def test_the_core_api_tutorials_search_runs_in_a_pool(home, tmp_path):
    """``examples/core_api/adaptive.yaml``, stage 4 of Determined 0.38's Core API
    tutorial (the length lives in the training code: ``time_metric: batches``,
    ``max_time``; the script asks ``preempt.should_preempt()``), unchanged but for
    ``slurm.workers=2`` given as a user would: every trial runs as an item in one array
    of 2 workers, each run's record says so, and the search completes."""
    core_api = REPO / "examples" / "core_api"
    out = cli("submit", core_api / "adaptive.yaml", core_api, "--json",
              "--config", "slurm.workers=2")
    exp = json.loads(out.stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "240", timeout=260, check=False)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    run_dir = Path(d["run_dir"])
    assert d["state"] == "COMPLETED", (d["state"], _logs(run_dir))
    assert len(d["trials"]) == 8
    assert all(t["best_validation"] is not None for t in d["trials"]), d["trials"]
    store = Store(f"sqlite:///{home / 'dethpc.db'}")
    with store.session() as s:
        jobs = list(s.exec(select(Job).where(Job.experiment_id == exp)))
        batches = list(s.exec(select(Batch).where(Batch.experiment_id == exp)))
    assert [b.size for b in batches if b.kind == BatchKind.WORKERS] == [2], batches
    assert not [b for b in batches if b.kind == BatchKind.TRIALS]   # no job per trial
    assert jobs and all(parse_item_ref(j.ref or "") for j in jobs)
    for job in jobs:
        recs = [json.loads(line) for line in (run_dir / "trials" / str(job.trial_id)
                                              / "exits.jsonl").read_text().splitlines()]
        assert [r["worker"] for r in recs if r["job"] == job.ref] == [True], (job.ref, recs)


def _logs(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in run_dir.rglob("*.out"))[-3000:]
