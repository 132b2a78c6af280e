"""One task of Optuna's Slurm job array in the peers-at-scale benchmark: an Optuna worker.

Owns: one worker's life, as Optuna's documentation runs many workers on one study
("Easy Parallelization", optuna.readthedocs.io/en/stable/tutorial/10_key_features/
004_distributed.html; ``RDBStorage`` with ``heartbeat_interval``, ``grace_period`` and
``heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback``, the new name of
``RetryFailedTrialCallback`` deprecated in 4.9: optuna.readthedocs.io/en/stable/reference/
generated/optuna.storages.RetryFailedTrialCallback.html, and the checkpoint pattern of
optuna-examples' pytorch/pytorch_checkpoint.py: a retried trial resumes from the
checkpoint of the trial it retries, ``retried_trial_number``; ``JournalStorage`` with
``JournalFileBackend`` for a shared file system without a database server:
optuna.readthedocs.io/en/stable/reference/generated/optuna.storages.journal.
JournalFileBackend.html): load the study the runner created, then ``study.optimize(
n_trials=1)`` in a loop with ``SuccessiveHalvingPruner(min_resource=4,
reduction_factor=4)`` (rungs at 4, 16 and 64 steps: 1/4/16 validation periods, as
dethpc's ASHA). The loop stops *sampling* at ``n`` (``peer_optuna.take_another``): a
worker takes a trial while one waits (an enqueued draw or a retry of a failed trial, so
no retry is dropped) and leaves when none waits and ``n`` trials were created. (Before:
``MaxTrialsCallback(n, states=(COMPLETE, PRUNED))``, which let idle workers sample 22-30
trials past the draws while the last draws ran.) A worker that loses the race for the
last waiting trial gets a sampled trial from ``ask``: it is failed at once, unrun
(``user_attrs["not_run"]``). A trial is the shared
emulator: the curve is the hyperparameter ``curve`` (the shared draws, enqueued in
order by the runner), a validation every 4 steps reported to the pruner, a checkpoint
after each validation the pruner kept, under ``ckpt/t<n>`` where ``n`` is the trial's
lineage (its own number, or the number of the first trial it retries); the work log
names the trial ``t<n>``.

Slurm's signal (``--signal=B:USR1@...``; at preemption ``USR1`` then ``TERM``): the
handler only sets a flag; at the next step the trial checkpoints, ends ``preempted`` and
raises ``Leave`` (Optuna marks it FAIL); the worker then enqueues its retry at once with
the same ``RetryHeartbeatStaleTrialCallback`` (public API: the callback called on the
frozen trial) instead of waiting out the heartbeat's grace period, requeues its own task
with ``scontrol requeue`` (at a preemption too: Slurm requeues a preempted job only if it
is still running when the grace time ends) and exits. A worker killed outright (a node
crash) leaves its trial RUNNING: with the RDB storage another worker's heartbeat check
fails and retries it after ``grace_period``; the journal storage has no heartbeat
(Optuna 5: ``JournalStorage`` is no ``BaseHeartbeat``); with either storage a task Slurm
requeued fails and retries, when it starts again, the RUNNING trials it had taken itself
(``user_attrs["slurm_task"]``).

Written to win: a worker runs its trials in one process, so by the emulator's start-up
rule (container once per task run, client import and CUDA once per process) only its
first trial pays the start-up, as a real Optuna worker's; a pruned trial does not
checkpoint. SQLite under
64 workers: Optuna's FAQ warns against SQLite for parallel runs because pysqlite begins
its transactions late (two workers may pop the same enqueued trial, optuna issue 4002):
the engine gets SQLAlchemy's documented pysqlite recipe (no implicit BEGIN, ``BEGIN
IMMEDIATE`` on each transaction) and a 120 s busy timeout, so every transaction is
serialized. Run as ``python -m bench.peers_scale.optuna_worker CONFIG.json`` (the
runner's array script ``exec``s it, so Slurm's batch signal reaches Python); ``CONFIG.json
--create`` creates the study and enqueues the draws (the user's one command before
``sbatch``), ``--summary`` prints the trials by state and each lineage's verdict.
Must not: be imported by dethpc or by the benchmark's driver (it imports Optuna).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from bench.peers_scale.emulator import STATE_FILE, EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.peer_optuna import CUT, is_sampled, lineage_verdicts, take_another
from bench.peers_scale.worklog import EndReason, WorkLog

_flag: dict[str, Any] = {"signal": None, "at": 0.0}


def _on_signal(signum: int, _frame: object) -> None:
    """Only a flag: the work happens at the next step boundary."""
    if _flag["signal"] is None:
        _flag["signal"], _flag["at"] = signum, time.time()


class Leave(Exception):
    """Slurm asked this worker to go: its trial is checkpointed and must be retried."""


class NotQueued(Exception):
    """The trial was sampled, not taken from the queue (another worker popped the last
    waiting trial between this worker's check and its ask): ended at once, FAIL, unrun."""


def serialize_sqlite(engine: Any) -> None:
    """SQLAlchemy's pysqlite recipe ("Serializable isolation / Savepoints / Transactional
    DDL"): pysqlite opens no transaction itself; each one starts ``BEGIN IMMEDIATE``."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()        # connections made before the listeners are not reused


def retry_callback(cfg: dict[str, Any]) -> RetryHeartbeatStaleTrialCallback:
    return RetryHeartbeatStaleTrialCallback(max_retry=int(cfg["max_retry"]),
                                            inherit_intermediate_values=True)


def make_storage(cfg: dict[str, Any]) -> optuna.storages.BaseStorage:
    if cfg["kind"] == "journal":
        return JournalStorage(JournalFileBackend(cfg["journal"]))
    storage = RDBStorage(cfg["url"], engine_kwargs={"connect_args": {"timeout": 120}},
                         heartbeat_interval=int(cfg["heartbeat_interval"]),
                         grace_period=int(cfg["grace_period"]),
                         heartbeat_stale_trial_callback=retry_callback(cfg))
    serialize_sqlite(storage.engine)
    return storage


def load(cfg: dict[str, Any], seed: int) -> optuna.Study:
    return optuna.load_study(
        study_name=cfg["study"], storage=make_storage(cfg),
        sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=int(cfg["validate_every"]), reduction_factor=int(cfg["eta"]),
            min_early_stopping_rate=0))


class Worker:
    """The objective and its process-wide state."""

    def __init__(self, cfg: dict[str, Any], task: str) -> None:
        self.cfg, self.task = cfg, task
        self.curves = load_curves()
        self.log = WorkLog(Path(cfg["worklog"]))
        self.spec = EmulatorSpec(**cfg["spec"])
        self.current: int | None = None

    def objective(self, trial: optuna.Trial) -> float:
        self.current = trial.number
        if _flag["signal"] is not None:
            raise Leave("signalled before the trial started")
        # Optuna 5's Trial has no system_attrs: the callback reads the frozen trial
        frozen = [t for t in trial.study.get_trials(deepcopy=False,
                                                    states=(TrialState.RUNNING,))
                  if t.number == trial.number]
        if frozen and is_sampled(frozen[0].system_attrs):
            trial.set_user_attr("not_run", "sampled past the queue")
            raise NotQueued(f"trial {trial.number}")
        root = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen[0]) \
            if frozen else None
        lineage = trial.number if root is None else root
        curve = self.curves[trial.suggest_int("curve", 0, len(self.curves) - 1)]
        trial.set_user_attr("slurm_task", self.task)
        ckpt = Path(self.cfg["ckpt_root"]) / f"t{lineage}"
        emu = TrialEmulator(f"t{lineage}", curve, self.log, self.spec)
        emu.start("optuna")     # once a task run and a process: nothing after the first
        if (ckpt / STATE_FILE).exists():
            emu.restore(ckpt)
        saved, every, steps = emu.step, int(self.cfg["validate_every"]), curve.steps
        loss = float("nan")
        while emu.step < steps:
            if _flag["signal"] is not None:
                if emu.step > saved:
                    emu.save(ckpt)          # keep the steps since the last checkpoint
                emu.end(EndReason.PREEMPTED)
                raise Leave(f"signal {_flag['signal']} at step {emu.step}")
            emu.train_step()
            if emu.step % every == 0 or emu.step == steps:
                loss = emu.validate()
                trial.report(loss, emu.step)
                if trial.should_prune():
                    emu.end(EndReason.STOPPED)
                    raise optuna.TrialPruned(f"pruned at step {emu.step}")
                emu.save(ckpt)
                saved = emu.step
        emu.end(EndReason.COMPLETED)
        return loss


def stop_on_signal(study: optuna.Study, _trial: FrozenTrial) -> None:
    if _flag["signal"] is not None:
        study.stop()


def requeue_self(cfg: dict[str, Any], started: float) -> None:
    """A signalled task requeues itself, at the time limit and at a preemption alike (as
    submitit does): Slurm requeues a preempted job only when it is still running at the
    end of the grace time, and one that left before is over (seen: TIMEOUT, not
    requeued, its trial's retry left waiting). A failure is printed, not raised."""
    if _flag["signal"] is None:
        return
    if (Path(sys.argv[1]).parent / CUT).exists():
        print("the cell is over (its cut marker is there): no requeue", flush=True)
        return
    limit_s = float(cfg["time_limit_min"]) * 60
    near_limit = _flag["at"] - started >= limit_s - float(cfg["signal_s"]) - 60
    job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                         check=False, timeout=60)
    print(f"{'time limit' if near_limit else 'preempted'}: scontrol requeue {job}: exit "
          f"{res.returncode} {res.stderr.strip()}", flush=True)


def recover_own(study: optuna.Study, cfg: dict[str, Any], task: str) -> None:
    """A RUNNING trial this task had taken before Slurm restarted it (a node crash
    killed it) is failed and retried now: the journal storage has no heartbeat, and with
    the RDB storage this is sooner than the grace period (and works when no other worker
    starts a trial any more). One that another worker failed meanwhile is left alone."""
    if int(os.environ.get("SLURM_RESTART_COUNT", "0")) == 0:
        return
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("slurm_task") != task:
            continue
        try:
            failed = study.tell(t.number, state=TrialState.FAIL)
        except (RuntimeError, ValueError) as exc:   # already finished by someone else
            print(f"trial {t.number}: not retried here: {exc}", flush=True)
            continue
        retry_callback(cfg)(study, failed)
        print(f"retried trial {t.number}, left RUNNING by this task's last run", flush=True)


def queue(study: optuna.Study) -> tuple[int, int]:
    """(trials waiting: enqueued draws and retries; trials created, retries not counted)."""
    trials = study.get_trials(deepcopy=False)
    return (sum(t.state == TrialState.WAITING for t in trials),
            sum("failed_trial" not in t.system_attrs for t in trials))


def create(cfg: dict[str, Any]) -> None:
    """The user's one command before the array: the study, and the shared draws enqueued
    in order (``enqueue_trial``: waiting trials are taken first, oldest first)."""
    study = optuna.create_study(study_name=cfg["study"], storage=make_storage(cfg),
                                direction="minimize")
    for curve in cfg["draws"]:
        study.enqueue_trial({"curve": int(curve)})


def summary(cfg: dict[str, Any]) -> dict[str, Any]:
    """The study's trials by state, and how many were retries (for the raw record)."""
    study = optuna.load_study(study_name=cfg["study"], storage=make_storage(cfg))
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    return {"trials": len(trials), "states": states,
            "retries": sum("failed_trial" in t.system_attrs for t in trials),
            "sampled_not_run": sum("not_run" in t.user_attrs for t in trials),
            "beyond_draws": sum(t.number >= len(cfg["draws"])
                                and "failed_trial" not in t.system_attrs for t in trials),
            "verdicts": lineage_verdicts(
                (t.number, t.state.name,
                 RetryHeartbeatStaleTrialCallback.retried_trial_number(t)) for t in trials)}


def main() -> int:
    started = time.time()
    if sys.argv[2:] == ["--create"]:
        create(json.loads(Path(sys.argv[1]).read_text()))
        return 0
    if sys.argv[2:] == ["--summary"]:
        print(json.dumps(summary(json.loads(Path(sys.argv[1]).read_text()))))
        return 0
    signal.signal(signal.SIGUSR1, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    cfg = json.loads(Path(sys.argv[1]).read_text())
    task_id = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    task = f"{os.environ.get('SLURM_ARRAY_JOB_ID', '0')}_{task_id}"
    study = load(cfg, seed=int(cfg["seed"]) * 1000 + task_id)
    recover_own(study, cfg, task)
    worker = Worker(cfg, task)
    try:
        # one trial at a time: taken from the queue (a draw or a retry) while one
        # waits; none sampled once n were created (peer_optuna.take_another)
        while _flag["signal"] is None:
            waits, created = queue(study)
            if not take_another(waiting=waits, created=created, n=int(cfg["trials"])):
                break
            study.optimize(worker.objective, n_trials=1, gc_after_trial=False,
                           catch=(NotQueued,), callbacks=[stop_on_signal])
    except Leave as exc:
        number = worker.current
        frozen = [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                  if t.number == number]
        if frozen:
            retry_callback(cfg)(study, frozen[0])
        print(f"leaving: {exc}; trial {number} retried", flush=True)
        requeue_self(cfg, started)
        return 0
    requeue_self(cfg, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
