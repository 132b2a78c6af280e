"""One batch of trials submitted, recorded before sbatch and confirmed after.

Owns: ``BatchSubmitter.submit_recorded`` — what one batch of trials is: its batch row and
job rows (``submission.record_batch``: job name ``dethpc-e<exp>-b<batch>`` and
``--comment`` carry the identity the recover phase adopts it by), the trials' files and
the array script, and its ``JobRequest`` (an array with one task per trial, or one
trial's own job script; with ``--exclude`` of the nodes where the experiment's trials
keep failing, ``dethpc.control.bad_nodes``), handed to the one submission protocol
(``dethpc.control.submission.Submission``: record first, sbatch, confirm; a refusal
over a limit gives the trials back and asks the budget; any other error leaves the
batch SUBMITTING for the next tick's recovery). ``TrialFiles.write`` writes one
trial's ``hparams.json``, ``target.json`` and ``job.sbatch`` (idempotent; the worker
pool uses it too, without the ``job.sbatch``: a pool worker runs the trial's work item,
never that script: docs/worker-pool.md).
``batch_throttle`` is pure.
Must not: choose which trials go out or how many (the submit phase does), or submit a
batch it did not record first.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dethpc.backends.base import Backend, JobRequest
from dethpc.common.paths import ExperimentPaths
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.bad_nodes import exclusion
from dethpc.control.daemon.budget import SubmitBudget
from dethpc.control.submission import BatchLedger, Submission, record_batch
from dethpc.jobs.directives import run_limits
from dethpc.jobs.jobscript import batch_comment, batch_name, trial_checkpoint_dir
from dethpc.jobs.kinds import jobs_for
from dethpc.jobs.protocol import TrialJob
from dethpc.searchers.base import target_document
from dethpc.store import Store
from dethpc.store.models import BatchKind, Experiment, Trial


def batch_throttle(k: int, trials: int, array: bool) -> int:
    """The ``%K`` a new batch is submitted with: ``max_concurrent_trials`` ``k``, at most
    the batch's size; 0 (none) for a single job or without ``k``."""
    return min(k, trials) if k > 0 and array else 0


class TrialFiles:
    def __init__(self, cluster: ClusterConfig, backend: Backend, *, python: str,
                 jenv: Any) -> None:
        self.cluster, self.backend, self.python, self.jenv = cluster, backend, python, jenv

    def write(self, exp: Experiment, cfg: ExperimentConfig, trial: Trial, *,
              script: bool = True) -> Path:
        """hparams.json, target.json and (``script``) job.sbatch of one trial (idempotent);
        the job script's path. ``script`` False: a worker pool's run, which no job script
        runs (its render: ~0.6 ms of CPU a trial), so
        none is written (a job script left by an earlier run stays as it was)."""
        assert exp.id is not None and trial.id is not None
        run_dir = Path(exp.run_dir)
        tp = ExperimentPaths(run_dir).trial(trial.id).ensure()
        trial_checkpoint_dir(cfg, run_dir, exp.id, trial.id).mkdir(parents=True, exist_ok=True)
        tp.hparams.write_text(json.dumps(trial.hparams, indent=2))
        unit = cfg.searcher.max_length.unit.value if cfg.searcher.max_length else "batches"
        if trial.target_length > 0:
            tp.target.write_text(json.dumps(target_document(
                cfg.searcher, trial.target_length, trial.validate_at)))
        else:   # no searcher length (Determined 0.38): the training code decides
            tp.target.unlink(missing_ok=True)
        tp.stop.unlink(missing_ok=True)
        if not script:
            return tp.job_script
        tp.job_script.write_text(jobs_for(exp.kind, run_dir).trial_script(
            cfg, self.cluster, backend=self.backend.traits.kind, python=self.python,
            run_dir=run_dir, trial=TrialJob(exp_id=exp.id, trial_id=trial.id,
                                            hparams=dict(trial.hparams),
                                            target_length=trial.target_length, unit=unit),
            jenv=self.jenv))
        return tp.job_script


class BatchSubmitter:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 budget: SubmitBudget, files: TrialFiles, *, tag: str, jenv: Any) -> None:
        self.store, self.cluster, self.backend = store, cluster, backend
        self.budget, self.files, self.tag, self.jenv = budget, files, tag, jenv
        self.submission = Submission(backend, budget)

    def submit_recorded(self, exp: Experiment, cfg: ExperimentConfig, trials: list[Trial],
                        *, array: bool = True, deps: tuple[str, ...] = (),
                        pool: ResourcePool | None = None) -> int:
        """One sbatch: an array with one task per trial, or (``array=False``, one trial)
        the trial's own job script, with ``deps`` (the image gate's dependencies) added
        to its arguments. Returns how many trials were submitted. ``pool``: the
        config's resource pool as the tick resolved it (None: resolved here)."""
        assert exp.id is not None
        pool = pool or self.cluster.pool(cfg.resources.resource_pool)
        paths = ExperimentPaths(Path(exp.run_dir)).ensure()
        # nodes where this experiment's trials keep failing
        exclude, exclude_note = exclusion(self.store, exp.id, cfg, pool, time.time())
        batch = record_batch(
            self.store, exp.id, pool.name, BatchKind.TRIALS,
            lambda batch_id: batch_name(exp.id or 0, batch_id, self.tag), trials=trials,
            throttle=batch_throttle(cfg.searcher.max_concurrent_trials, len(trials), array))
        assert batch.id is not None
        tasks = [(i, self.files.write(exp, cfg, t)) for i, t in enumerate(trials)]
        jobs = jobs_for(exp.kind, paths.root)
        if array:
            script = paths.array_script(batch.id)
            script.write_text(jobs.array_script(cfg, self.cluster, run_dir=paths.root,
                                                exp_id=exp.id, batch_id=batch.id, tasks=tasks,
                                                tag=self.tag, jenv=self.jenv))
        else:
            script = tasks[0][1]
        limits = run_limits(cfg, pool)
        request = JobRequest(
            name=batch.name, comment=batch_comment(exp.id, batch.id, self.tag), script=script,
            workdir=jobs.workdir(paths.root),
            array_indices=tuple(range(len(trials))) if array else (),
            throttle=batch.throttle or None,
            time_limit_s=limits.time_limit_s, signal=limits.signal,
            signal_lead_s=limits.signal_lead_s,
            extra_args=(*deps, exclude) if exclude else deps)
        refs = self.submission.submit(BatchLedger(self.store, batch), request, exclude_note)
        if refs:
            self.budget.count_submitted(pool, len(refs) * max(1, len(cfg.slurm.components)))
        return len(refs)
