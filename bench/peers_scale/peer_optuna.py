"""Optuna 5 in the peers-at-scale benchmark, as Optuna's documentation runs it on Slurm.

Owns: ``OptunaRunner`` -- ``optuna`` (``RDBStorage`` on a SQLite file on the shared path,
with heartbeats and ``RetryHeartbeatStaleTrialCallback``) and ``optuna-journal``
(``JournalStorage(JournalFileBackend)``, the storage Optuna's docs give for a shared file
system without a database server). What the user does: one short command that creates
the study and enqueues the shared draws (``bench.peers_scale.optuna_worker CONFIG
--create``), then one ``sbatch`` of a K-task job array (K = the cell's GPUs, what dethpc
gets as ``max_concurrent_trials``, at most the trials: ``tasks``): one GPU a task on
the preemptible ``low`` partition,
``--requeue`` (Slurm requeues a task after a preemption or a node failure),
``--signal=B:USR1@120`` (the time limit's warning, also sent at preemption), ``--time``
past the cell's timeout, the script ``exec``ing the worker (bench/peers_scale/
optuna_worker.py: its docstring cites the pages, what a worker does on Slurm's signal and
after a crash, and what is written to win).

Documentation: "Easy Parallelization" (optuna.readthedocs.io/en/stable/tutorial/
10_key_features/004_distributed.html), ``RDBStorage`` (heartbeat_interval, grace_period,
heartbeat_stale_trial_callback), ``RetryFailedTrialCallback`` /
``RetryHeartbeatStaleTrialCallback``, ``JournalFileBackend``, ``Study.optimize``,
``SuccessiveHalvingPruner`` (optuna.readthedocs.io/en/stable/reference/...), and
optuna-examples' pytorch/pytorch_checkpoint.py for the retried trial's checkpoint.

Why SQLite and not PostgreSQL: Optuna's docs would have a database server (MySQL or
PostgreSQL) for many workers; a Slurm user rarely has one the compute nodes may reach,
and running one on the login node would give Optuna a login-side process (the thing the
login kill hits) that the issue's "Optuna has none" excludes; the file on the shared path
is what a user without a site database does. Its known weakness under concurrency (the
late BEGIN of pysqlite) is fixed in the worker, not left to bite.

The login-side process: **none**. After ``sbatch`` nothing of Optuna runs on the login
node: the workers in the array coordinate through the storage file. ``kill_login``
returns None (the fault injector records that it had nothing to kill) and a person never
has to restart anything (``operator_check`` returns None). The search is finished when
the array has left the queue (every worker found no trial waiting and the ``n`` trials
created: ``take_another``, Optuna's "n trials" as "n asked, n run"). The peers' Python:
bench/peers/.venv's site-packages on ``PYTHONPATH`` under the system's python3.11 (the
venv's interpreter lives under /root, which the benchmark's user may not run).
Must not: import Optuna (the benchmark's driver runs in dethpc's environment).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers_scale import faults as flt
from bench.peers_scale.draws import shared_draws
from bench.peers_scale.systems import (
    PEERS_VENV,
    REPO,
    SYSTEM_PYTHON,
    VALIDATE_EVERY,
    Cell,
    Measured,
    as_system_user,
    chown_tree,
    run_measured,
    venv_site_packages,
)

#: ASHA's reduction factor (dethpc's divisor)
ETA = 4
#: seconds before the time limit Slurm signals a task (it may come up to 60 s early)
SIGNAL_S = 120
HEARTBEAT_S = 5
GRACE_S = 30
MAX_RETRY = 5


def take_another(*, waiting: int, created: int, n: int) -> bool:
    """A worker's rule before it asks for a trial: take one while a trial waits (an
    enqueued draw, or a retry of a failed trial: never dropped), and never sample a new
    one once ``n`` trials were created (the draws: ``n`` asked means ``n`` run). Retries
    do not count in ``created``."""
    return waiting > 0 or created < n


def is_sampled(system_attrs: dict[str, Any]) -> bool:
    """A trial Optuna sampled itself rather than took from the queue: no ``fixed_params``
    (``enqueue_trial``'s mark) and no ``failed_trial`` (a retry's). Under
    ``take_another`` a worker samples one only when another worker popped the last
    waiting trial between its check and its ask: it is ended at once, not run."""
    return "fixed_params" not in system_attrs and "failed_trial" not in system_attrs


#: Optuna's trial states as the benchmark's verdicts (metrics.Verdict's values)
_OPTUNA_VERDICT = {"COMPLETE": "decided", "PRUNED": "decided", "FAIL": "gave_up",
                   "RUNNING": "live", "WAITING": "live"}


def lineage_verdicts(trials: Iterable[tuple[int, str, int | None]]) -> dict[str, str]:
    """The study's final word on each work-log trial ``t<lineage>``, from ``(number,
    state, retried_trial_number)`` of every Optuna trial: decided once any trial of the
    lineage was COMPLETE or PRUNED (the pruner's decision stands though the worker died
    after); else its newest trial's state: RUNNING/WAITING (a retry enqueued or taken)
    live, FAIL with no retry after it (``MAX_RETRY`` spent) given up."""
    newest: dict[int, tuple[int, str]] = {}
    decided: set[int] = set()
    for number, state, root in trials:
        lineage = number if root is None else root
        if _OPTUNA_VERDICT.get(state) == "decided":
            decided.add(lineage)
        if lineage not in newest or number > newest[lineage][0]:
            newest[lineage] = (number, state)
    return {f"t{lin}": "decided" if lin in decided else _OPTUNA_VERDICT.get(state, "live")
            for lin, (_, state) in newest.items()}


def peers_pythonpath() -> str:
    """The repository (the emulator) and the peers' venv site-packages."""
    return os.pathsep.join([str(REPO), str(venv_site_packages(PEERS_VENV))])


def peers_env(cell: Cell) -> dict[str, str]:
    """What the system's user's commands (and, through sbatch, its jobs) get."""
    return {"SLURM_CONF": cell.env["SLURM_CONF"], "PYTHONPATH": peers_pythonpath(),
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONUNBUFFERED": "1"}


def array_script(*, tasks: int, minutes: int, out_dir: Path, config: Path,
                 env: dict[str, str]) -> str:
    """The job array's script (see the module doc); every value shell-quoted."""
    q = shlex.quote
    exports = "\n".join(f"export {k}={q(v)}" for k, v in sorted(env.items()))
    return f"""#!/bin/bash
#SBATCH --job-name=optuna
#SBATCH --partition=low
#SBATCH --account=dethpc
#SBATCH --array=0-{tasks - 1}
#SBATCH --gpus-per-node=a100:1
#SBATCH --cpus-per-task=1
#SBATCH --time={minutes}
#SBATCH --requeue
#SBATCH --signal=B:USR1@{SIGNAL_S}
#SBATCH --open-mode=append
#SBATCH --output={q(str(out_dir / "slurm-%A_%a.out"))}
# one Optuna worker a task (bench/peers_scale/optuna_worker.py); exec: the batch
# signal goes to Python itself
{exports}
exec {q(SYSTEM_PYTHON)} -m bench.peers_scale.optuna_worker {q(str(config))}
"""


#: written next to the workers' config by the runner at the cell's cut: a worker
#: signalled after it leaves instead of requeueing its task (optuna_worker.requeue_self;
#: the teardown is the benchmark's, not Optuna's: tasks requeued at the cut kept the
#: queue busy ~120 s a cell in the quick run at 442d6e5)
CUT = "cut"

@dataclass
class OptunaRunner:
    kind: str                       # "rdb" or "journal"
    name: str = ""
    login_process: str = ""
    commands_cpu_s: float = 0.0
    human_actions: list[str] = field(default_factory=list)
    measured_pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.kind not in ("rdb", "journal"):
            raise ValueError(f"kind: {self.kind!r} must be 'rdb' or 'journal'")
        self.name = self.name or ("optuna" if self.kind == "rdb" else "optuna-journal")
        self.cell: Cell | None = None
        self.array_id = ""
        self._last_poll = 0.0
        self._finished = False

    @property
    def dir(self) -> Path:
        assert self.cell is not None
        return self.cell.dir / "optuna"

    def config(self, cell: Cell) -> dict[str, Any]:
        """What every worker reads (the study, the storage, the emulator's costs)."""
        d = cell.dir / "optuna"
        return {"kind": self.kind, "study": f"peers-scale-{cell.seed}",
                "url": f"sqlite:///{d / 'optuna.db'}", "journal": str(d / "journal.log"),
                "trials": cell.trials, "draws": shared_draws(cell.seed, cell.trials),
                "seed": cell.seed, "worklog": str(cell.worklog),
                "ckpt_root": str(d / "ckpt"), "validate_every": VALIDATE_EVERY, "eta": ETA,
                "spec": {"startup_s": cell.spec.startup_s,
                         "container_s": cell.spec.container_part_s,
                         "time_scale": cell.spec.time_scale,
                         "save_s": cell.spec.save_s, "load_s": cell.spec.load_s,
                         "state_bytes": cell.spec.state_bytes},
                "heartbeat_interval": HEARTBEAT_S, "grace_period": GRACE_S,
                "max_retry": MAX_RETRY, "time_limit_min": self._minutes(cell),
                "signal_s": SIGNAL_S}

    @staticmethod
    def tasks(cell: Cell) -> int:
        """K: a worker a GPU (what dethpc gets as ``max_concurrent_trials``), but never
        more workers than trials (a worker beyond ``n`` would find nothing to take)."""
        return max(1, min(cell.gpus, cell.trials))

    @staticmethod
    def _minutes(cell: Cell) -> int:
        return int(cell.timeout_s // 60) + 30

    def _as_user(self, argv: list[str]) -> Measured:
        assert self.cell is not None
        res = run_measured(as_system_user(argv, peers_env(self.cell)), self.dir,
                           on_start=self.measured_pids.add)
        self.commands_cpu_s += res.cpu_s
        return res

    def launch(self, cell: Cell) -> None:
        self.cell = cell
        (self.dir / "ckpt").mkdir(parents=True)
        cfg_path = self.dir / "config.json"
        cfg_path.write_text(json.dumps(self.config(cell), indent=1))
        script = self.dir / "array.sbatch"
        script.write_text(array_script(tasks=self.tasks(cell), minutes=self._minutes(cell),
                                       out_dir=self.dir, config=cfg_path,
                                       env=peers_env(cell)))
        chown_tree(cell.dir)
        res = self._as_user([SYSTEM_PYTHON, "-m", "bench.peers_scale.optuna_worker",
                             str(cfg_path), "--create"])
        if res.rc != 0:
            raise RuntimeError(f"optuna create-study exited {res.rc}: {res.stderr[-2000:]}")
        res = self._as_user(["sbatch", "--parsable", str(script)])
        if res.rc != 0:
            raise RuntimeError(f"sbatch exited {res.rc}: {res.stderr[-2000:]}")
        self.array_id = res.stdout.strip().split(";")[0]
        cell.say(f"{self.name}: array {self.array_id} of {self.tasks(cell)} workers")

    def finished(self) -> bool:
        """The array has left the queue (asked as ``dethpc-faults`` every 5 s, so the
        system's RPC count stays its own)."""
        if self._finished or not self.array_id:
            return self._finished
        if time.monotonic() - self._last_poll < 5.0:
            return False
        self._last_poll = time.monotonic()
        assert self.cell is not None
        res = subprocess.run(flt.as_fault_user(["squeue", "-h", "-j", self.array_id,
                                                "-o", "%i"]),
                             capture_output=True, text=True, env=self.cell.env,
                             check=False, timeout=60, cwd="/tmp")
        # squeue fails while slurmctld restarts, and "Invalid job id" once it forgot it
        gone = res.returncode == 0 and not res.stdout.strip()
        gone = gone or "Invalid job id" in res.stderr
        self._finished = gone
        return gone

    def _end_array(self, timeout: float = 60.0) -> None:
        """At a cut, the array's workers SIGKILLed (as root, as the driver's clear_queue
        does) before the study is read: read while 64 workers still wrote to it, the
        summary took 122-124 s a cell (the quick run at 442d6e5, RDB and journal alike);
        the workers' RUNNING trials stay RUNNING in the study (unfinished at the cut)."""
        if self._finished or not self.array_id:
            return
        assert self.cell is not None
        (self.dir / CUT).touch()        # a signalled worker leaves without a requeue
        for cmd in (["scancel", "--signal=KILL", "--full", self.array_id],
                    ["scancel", self.array_id]):
            subprocess.run(cmd, env=self.cell.env, capture_output=True, check=False,
                           timeout=60, cwd="/tmp")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._last_poll = 0.0
            if self.finished():
                return
            time.sleep(0.5)

    def kill_login(self) -> str | None:
        return None                 # Optuna runs nothing on the login node

    def operator_check(self) -> str | None:
        return None                 # nothing of Optuna's for a person to restart

    def stop(self) -> dict[str, Any]:
        assert self.cell is not None
        facts: dict[str, Any] = {"array": self.array_id, "storage": self.kind}
        self._end_array()
        try:               # read as root: not the user's login CPU
            res = subprocess.run(
                [SYSTEM_PYTHON, "-m", "bench.peers_scale.optuna_worker",
                 str(self.dir / "config.json"), "--summary"],
                env={**os.environ, **peers_env(self.cell)},
                capture_output=True, text=True, check=False, timeout=300, cwd="/tmp")
            facts["study"] = json.loads(res.stdout) if res.returncode == 0 \
                else {"error": res.stderr[-1000:]}
            # the per-trial verdicts (metrics.trial_fates) out of the study's summary
            facts["verdicts"] = facts["study"].pop("verdicts", None)
        except (subprocess.TimeoutExpired, ValueError) as exc:
            facts["study"] = {"error": str(exc)}
        return facts


RUNNERS = {"optuna": lambda: OptunaRunner("rdb"),
           "optuna-journal": lambda: OptunaRunner("journal")}
