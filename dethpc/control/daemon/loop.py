"""The daemon: one reconcile loop of idempotent ticks.

Owns: ``Daemon.tick()`` — adopt jobs dethpc did not submit that registered
themselves (``dethpc.control.adoption``), adopt batches a crash left half-submitted, poll every
live job with one batched backend call, reconcile each experiment in its own
transaction (``dethpc.control.reconcile``), submit the trials that need a job as one
array per experiment and pool, cancel everything that must go in one call — and
``Daemon.run()``, the loop with backoff. Backend calls per tick do not grow
with the number of trials. Submissions stay within the user's per-user job
limits (``dethpc.backends.limits``): an array is cut to the headroom the poll's own
listing of the user's jobs leaves, the other trials wait in the store for a
later tick, and an sbatch refused over a limit is waited out, not an error.
Between ticks, ``Daemon.wait`` stats the live trials' metrics files and ingests those
that grew (``fast_tick``: no backend call), so a searcher's stop lands within about
``metrics_poll_s``; a run that ends in a worker pool (its ``results/`` changes) or a
client's change to an experiment (``service.wake``: a submit, pause, cancel, ...) brings
the next tick forward to ``tick_min_s`` after the last one.
Must not: hold state outside the store and the run directories (a killed
daemon loses nothing), or call the backend per job.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlmodel import select
from sqlmodel.sql.expression import SelectOfScalar

from dethpc.backends.base import Backend, JobInfo, JobRequest, JobState, PoolLimits
from dethpc.backends.limits import (
    cap_after_refusal,
    cap_after_success,
    counted_live,
    headroom,
    refusal_is_final,
)
from dethpc.common.errors import DethpcError, SubmitError, SubmitLimitError
from dethpc.common.paths import ExperimentPaths
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.adoption import Adopter
from dethpc.control.daemon.cancel import Canceller
from dethpc.control.daemon.housekeeping import CheckpointDeleter
from dethpc.control.daemon.incidents import event, fail_experiment, fail_unstarted, warn_once
from dethpc.control.daemon.poll import Poller
from dethpc.control.daemon.reconciling import Reconciling
from dethpc.control.daemon.recovery import Recovery
from dethpc.control.daemon.shared import (
    Guard,
    LeaseLost,
    Scope,
    TickStats,
    fault_point,
    slurm_unreachable,
)
from dethpc.control.daemon.watch import Watched, Watcher, next_delay
from dethpc.control.lease import Lease
from dethpc.control.pool_tend import PoolTender
from dethpc.control.reconcile import load_config
from dethpc.jobs.imagepull import (
    Puller,
    PullJob,
    PullState,
    images_of,
    pull_job,
    pull_job_script,
)
from dethpc.jobs.jobscript import batch_comment, batch_name, checkpoint_dir, instance_tag
from dethpc.jobs.kinds import jobs_for
from dethpc.jobs.protocol import TrialJob
from dethpc.jobs.render import make_env, parse_slurm_time
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    Trial,
)

log = logging.getLogger(__name__)
_Q = TypeVar("_Q", bound=SelectOfScalar[Any])


def pull_failed(pj: PullJob, image: str, job_id: str, info: JobInfo) -> str:
    """A pre-pull job that ended without the image: forget it (a later experiment tries
    again) and say why, with the runtime's last words."""
    pj.record.unlink(missing_ok=True)
    return (f"the image {image!r} could not be pulled (job {job_id} ended "
            f"{info.raw_state or info.state.value}): {pj.tail()}")


class Daemon:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 *, clock: Callable[[], float] = time.time, lease: Lease | None = None,
                 owner: str | None = None, wake: Path | None = None) -> None:
        self.store, self.cluster, self.backend, self.clock = store, cluster, backend, clock
        self.owner, self.lease = owner, lease
        self.scope, self.guard = Scope(owner), Guard(lease)
        self.watcher = Watcher(store, cluster, self.scope, wake)
        self.checkpoints = CheckpointDeleter(store)
        self.jenv = make_env()
        self.python = cluster.python or sys.executable
        self.tag = instance_tag(store.url)
        #: this tick's view of the user's jobs (the poll's listing plus what this tick
        #: submitted since), None when the backend does not list them; and whether
        #: sbatch refused a submission over a limit this tick (no more tries until the
        #: next). Rebuilt every tick.
        self.queue: list[JobInfo] | None = None
        self.refused = False
        #: most trials per submission after sbatch refused one over a limit dethpc
        #: cannot see (halved on each refusal, doubled on each success, None again once
        #: it is back above the refused size): a hint, lost harmlessly on restart
        self.cap: int | None = None
        self.refused_size = 0
        #: jobs dethpc did not submit that registered themselves in the spool
        self.adopter = Adopter(store, cluster.runs_root, cluster.backend,
                               runs_mode=cluster.runs_mode)
        #: image pulls into the SIF cache, in the background (containers.pull: login)
        self.puller: Puller | None = None
        #: sbatch arguments that make this experiment's trials wait for its pre-pull jobs
        #: (``containers.pull: job``), set by ``images_ready`` for this submission
        self.dependencies: tuple[str, ...] = ()
        #: pre-pull jobs some experiment's trials depend on: job id -> (image, experiments)
        self.pull_watch: dict[str, tuple[str, set[int]]] = {}
        #: experiments run by a worker pool (``slurm.workers``): items and workers
        self.pools = PoolTender(
            store, cluster, backend, python=self.python, tag=self.tag, room=self.room,
            count_submitted=lambda cfg, n: self.count_submitted(
                self.cluster.pool(cfg.resources.resource_pool), n),
            write_trial=self.write_trial)
        self.canceller = Canceller(store, backend, self.pools, self.guard)
        self.recovery = Recovery(store, backend, self.scope, self.guard, self.canceller,
                                 runs_root=cluster.runs_root)
        self.poller = Poller(store, backend, self.pools, self.scope)
        self.reconciling = Reconciling(store, clock, self.guard, self.canceller,
                                       self.checkpoints)

    # ------------------------------------------------------------------ tick
    def mine(self, query: _Q, experiment_id: Any = None) -> _Q:
        return self.scope.mine(query, experiment_id)

    def holds(self) -> None:
        """Raise ``LeaseLost`` unless this daemon still holds its lease."""
        self.guard.holds()

    def tick(self) -> TickStats:
        self.holds()
        self.watcher.mark()     # a result or wake from now on ends the next wait
        stats = TickStats()
        stats.changed = self.adopter.scan() > 0   # detached jobs: one listdir of the spool
        self.recovery.retry_cancels(stats)        # scancels an earlier tick could not make
        exp_ids = self.scope.open_experiments(self.store)
        stats.experiments = len(exp_ids)
        if not exp_ids:
            return stats
        self.recovery.adopt(stats)                # batches a crash left SUBMITTING
        self.check_pulls()                        # pre-pull jobs that trials wait on
        seen = self.poller.observe(stats, exp_ids)  # one poll of every live job
        infos = seen.infos
        self.queue = list(seen.user_jobs) if seen.user_jobs is not None else None
        self.refused = False
        # ingest, feed the searchers, judge job ends; then the checkpoints GC doomed
        cancel = self.reconciling.run(exp_ids, infos, stats)
        self.canceller.cancel_wanted(cancel, stats)            # one scancel
        for exp_id in exp_ids:
            self.holds()
            try:
                self.sync_throttles(exp_id)
                stats.submitted += self.submit_experiment(exp_id)
                self.pools.tend(exp_id, infos)
            except DethpcError as exc:
                stats.errors.append(f"experiment {exp_id}: {exc}")
                if slurm_unreachable(exc):
                    # slurmctld restarting: the batch recorded before sbatch stays
                    # SUBMITTING, and the next tick's ``adopt`` finds it by name or
                    # submits it again; nothing is failed for a moment's silence
                    self.warn_once(exp_id, f"Slurm did not answer; the trials wait for the "
                                           f"next tick ({exc})")
                else:
                    self.fail_experiment(exp_id, f"submission failed: {exc}")
            except OSError as exc:
                # a full or unwritable runs_root: the batch recorded before the write is
                # retried (``adopt``) once there is room; the daemon goes on and says why
                message = (f"cannot write the job scripts under {self.cluster.runs_root}: "
                           f"{exc.strerror or exc} (errno {exc.errno}); the trials wait")
                stats.errors.append(f"experiment {exp_id}: {message}")
                self.warn_once(exp_id, message)
        return stats

    def adopt(self, stats: TickStats) -> None:
        self.recovery.adopt(stats)

    def delete_checkpoints(self, doomed: dict[str, str]) -> None:
        self.checkpoints.delete(doomed)

    # ------------------------------------------------------------------ submit
    def sync_throttles(self, exp_id: int) -> int:
        """Arrays still running whose ``%K`` differs from ``max_concurrent_trials``
        (changed by ``set-concurrency``) get the new limit: one ``scontrol update
        ArrayTaskThrottle`` per such array, none in a steady tick."""
        with self.store.session() as s:
            exp = s.get(Experiment, exp_id)
            if exp is None or exp.state != ExperimentState.ACTIVE \
                    or not exp.kind.daemon_submits:
                return 0  # the throttle of a job someone else submitted is theirs
            cfg = load_config(exp)
            if cfg.slurm.components and self.backend.traits.het_jobs:
                return 0  # heterogeneous trials are single jobs, no arrays to throttle
            k = cfg.searcher.max_concurrent_trials
            live = set(s.exec(select(Job.batch_id).where(
                Job.experiment_id == exp_id, Job.live == True)))  # noqa: E712
            changed = 0
            for batch in s.exec(select(Batch).where(
                    Batch.experiment_id == exp_id, Batch.state == BatchState.SUBMITTED)):
                if batch.id not in live or not batch.array_job_id:
                    continue
                want = min(k, batch.size) if k > 0 else 0
                if want == batch.throttle:
                    continue
                self.backend.set_throttle(batch.array_job_id, want)
                s.add(Event(experiment_id=exp_id, kind="throttle",
                            message=f"job {batch.array_job_id}: ArrayTaskThrottle "
                                    f"{batch.throttle} -> {want}"))
                batch.throttle = want
                s.add(batch)
                changed += 1
            return changed

    def submit_experiment(self, exp_id: int) -> int:
        with self.store.session() as s:
            exp = s.get(Experiment, exp_id)
            if exp is None or exp.state != ExperimentState.ACTIVE:
                return 0
            if not exp.kind.daemon_submits:
                return 0  # `dethpc sbatch` and detached jobs: never a job from the daemon
            trials = list(s.exec(select(Trial).where(
                Trial.experiment_id == exp_id, Trial.needs_job == True)  # noqa: E712
                .order_by(Trial.id)))  # type: ignore[arg-type]
        trials = [t for t in trials if not t.state.is_terminal]
        if not trials:
            return 0
        cfg = load_config(exp)
        if not self.images_ready(exp_id, cfg):
            return 0
        if self.pools.enabled(cfg, exp.kind):
            return self.pools.submit_items(exp, cfg, trials)
        if cfg.slurm.components and self.backend.traits.het_jobs:
            return self.submit_het(exp, cfg, trials)
        room = self.room(exp, cfg, len(trials))
        trials = trials[:room]
        limit = max(1, self.backend.max_array_size())
        submitted = 0
        for start in range(0, len(trials), limit):
            if self.refused:
                break
            submitted += self.submit_batch(exp, cfg, trials[start:start + limit])
        return submitted

    # ------------------------------------------------------------------ limits
    def pool_limits(self, pool: ResourcePool) -> PoolLimits:
        return self.backend.job_limits(pool.partition, pool.qos, pool.account,
                                       pool.sbatch_args)

    def room(self, exp: Experiment, cfg: ExperimentConfig, wanted: int,
             per_trial: int = 1) -> int:
        """How many of ``wanted`` trials (``per_trial`` jobs each) may be submitted now
        under the user's per-user submit limits; records a ``limit`` event (once while
        it lasts) when some must wait."""
        if self.refused:
            return 0
        capped = wanted if self.cap is None else min(wanted, self.cap)
        if self.queue is None:
            return capped
        pool = self.cluster.pool(cfg.resources.resource_pool)
        limits = self.pool_limits(pool)
        free = headroom(limits, self.queue)
        if free is None:
            return capped
        fits = min(capped, free // max(1, per_trial))
        if fits < wanted:
            assert exp.id is not None
            self.limit_event(exp.id, f"{wanted - fits} trial(s) wait: pool {pool.name!r} "
                             f"is at the user's job limit ({'; '.join(map(str, limits.limits))})"
                             "; they are submitted as the user's jobs end")
        return fits

    def count_submitted(self, pool: ResourcePool, jobs: int) -> None:
        """Jobs this tick submitted count against the limits until the next poll sees them."""
        if self.queue is not None:
            self.queue += [self.pool_limits(pool).tag()] * jobs

    def limit_event(self, exp_id: int, message: str) -> None:
        """A ``limit`` event, unless the experiment's newest one already says the same
        (a wait that lasts many ticks is one event, and one more when it changes)."""
        with self.store.session() as s:
            last = s.exec(select(Event).where(Event.experiment_id == exp_id,
                                              Event.kind == "limit")
                          .order_by(Event.id.desc())).first()  # type: ignore[union-attr]
            if last is not None and last.message == message:
                return
            s.add(Event(experiment_id=exp_id, kind="limit", message=message))

    def refusal(self, exp_id: int, batch_id: int, size: int, exc: SubmitLimitError) -> None:
        """sbatch refused batch ``batch_id`` over a limit: nothing was submitted. The
        batch is dropped (FAILED, no jobs), its trials need a job again, and nothing
        more is submitted this tick, and later submissions are capped (halved) in case
        the limit is one dethpc cannot see. Final (an error) only for a single trial
        while none of the user's jobs is live: then nothing will make room."""
        with self.store.session() as s:
            for job in s.exec(select(Job).where(Job.batch_id == batch_id)):
                t = s.get(Trial, job.trial_id)
                if t is not None and not t.state.is_terminal:
                    t.needs_job = True
                    s.add(t)
                s.delete(job)
            b = s.get(Batch, batch_id)
            assert b is not None
            b.state = BatchState.FAILED
            s.add(b)
            live = (counted_live(self.queue) if self.queue is not None else
                    len(list(s.exec(self.mine(select(Job.id).where(
                        Job.live == True), Job.experiment_id)))))  # noqa: E712
        if refusal_is_final(exc.word, live, size):
            raise SubmitError(f"{exc} (and none of the user's jobs is queued or running, "
                              "so waiting would not help)")
        self.refused = True
        self.refused_size = size
        self.cap = cap_after_refusal(size)
        self.limit_event(exp_id, f"sbatch refused the submission over a limit ({exc.word}); "
                         "the trials wait and are submitted again on a later tick")

    def submit_het(self, exp: Experiment, cfg: ExperimentConfig, trials: list[Trial]) -> int:
        """Trials with ``slurm.components`` are heterogeneous jobs, which Slurm cannot put
        in an array: one sbatch each, at most ``max_concurrent_trials`` live at once."""
        k = cfg.searcher.max_concurrent_trials
        with self.store.session() as s:
            live = len(list(s.exec(select(Job.id).where(
                Job.experiment_id == exp.id, Job.live == True))))  # noqa: E712
        room = len(trials) if k <= 0 else max(0, k - live)
        room = self.room(exp, cfg, min(room, len(trials)), per_trial=len(cfg.slurm.components))
        submitted = 0
        for t in trials[:room]:
            if self.refused:
                break
            submitted += self.submit_batch(exp, cfg, [t], array=False)
        return submitted

    def submit_batch(self, exp: Experiment, cfg: ExperimentConfig, trials: list[Trial],
                     array: bool = True) -> int:
        """One sbatch: an array with one task per trial, or (``array=False``, one trial)
        the trial's own job script."""
        assert exp.id is not None
        pool = self.cluster.pool(cfg.resources.resource_pool)
        paths = ExperimentPaths(Path(exp.run_dir)).ensure()
        with self.store.session() as s:
            batch = Batch(experiment_id=exp.id, pool=pool.name, size=len(trials))
            s.add(batch)
            s.flush()
            assert batch.id is not None
            batch.name = batch_name(exp.id, batch.id, self.tag)
            k = cfg.searcher.max_concurrent_trials
            batch.throttle = min(k, len(trials)) if k > 0 and array else 0
            for index, trial in enumerate(trials):
                t = s.get(Trial, trial.id)
                assert t is not None and t.id is not None
                t.needs_job = False
                s.add(t)
                s.add(Job(experiment_id=exp.id, trial_id=t.id, batch_id=batch.id,
                          array_index=index))
            s.add(batch)
            batch_id, name, throttle = batch.id, batch.name, batch.throttle
        tasks = [(i, self.write_trial(exp, cfg, t)) for i, t in enumerate(trials)]
        comment = batch_comment(exp.id, batch_id, self.tag)
        jobs = jobs_for(exp.kind, paths.root)
        if array:
            script = paths.array_script(batch_id)
            script.write_text(jobs.array_script(cfg, self.cluster, run_dir=paths.root,
                                                exp_id=exp.id, batch_id=batch_id, tasks=tasks,
                                                tag=self.tag, jenv=self.jenv))
        else:
            script = tasks[0][1]
        request = JobRequest(
            name=name, comment=comment, script=script, workdir=jobs.workdir(paths.root),
            array_indices=tuple(range(len(trials))) if array else (),
            throttle=throttle or None,
            time_limit_s=parse_slurm_time(cfg.slurm.time or pool.default_time),
            signal=pool.signal, signal_lead_s=pool.signal_grace_s,
            extra_args=self.dependencies)
        try:
            refs = self.backend.submit(request)
        except SubmitLimitError as exc:
            self.refusal(exp.id, batch_id, len(trials), exc)
            return 0
        fault_point("after_sbatch")
        self.cap = cap_after_success(self.cap, self.refused_size)
        self.count_submitted(pool, len(refs) * max(1, len(cfg.slurm.components)))
        with self.store.session() as s:
            b = s.get(Batch, batch_id)
            assert b is not None
            b.state, b.array_job_id = BatchState.SUBMITTED, refs[0].rsplit("_", 1)[0]
            s.add(b)
            for job in s.exec(select(Job).where(Job.batch_id == batch_id)):
                job.ref = refs[job.array_index]
                s.add(job)
            s.add(Event(experiment_id=exp.id, kind="submitted",
                        message=f"batch {batch_id}: {len(refs)} trial(s) as job "
                        f"{b.array_job_id}"))
        return len(refs)

    def write_trial(self, exp: Experiment, cfg: ExperimentConfig, trial: Trial) -> Path:
        """hparams.json, target.json and job.sbatch of one trial (idempotent)."""
        assert exp.id is not None and trial.id is not None
        run_dir = Path(exp.run_dir)
        tp = ExperimentPaths(run_dir).trial(trial.id).ensure()
        checkpoint_dir(cfg, run_dir, exp.id, trial.id).mkdir(parents=True, exist_ok=True)
        tp.hparams.write_text(json.dumps(trial.hparams, indent=2))
        unit = cfg.searcher.max_length.unit.value if cfg.searcher.max_length else "batches"
        if trial.target_length > 0:
            tp.target.write_text(json.dumps({"unit": unit, "length": trial.target_length,
                                             "validate_at": list(trial.validate_at)}))
        else:   # no searcher length (Determined 0.38): the training code decides
            tp.target.unlink(missing_ok=True)
        tp.stop.unlink(missing_ok=True)
        tp.job_script.write_text(jobs_for(exp.kind, run_dir).trial_script(
            cfg, self.cluster, backend=self.backend.traits.kind, python=self.python,
            run_dir=run_dir, trial=TrialJob(exp_id=exp.id, trial_id=trial.id,
                                            hparams=dict(trial.hparams),
                                            target_length=trial.target_length, unit=unit),
            jenv=self.jenv))
        return tp.job_script

    def images_ready(self, exp_id: int, cfg: ExperimentConfig) -> bool:
        """The experiment's images are SIFs in the cache, or being pulled by a job its
        trials can depend on. ``containers.pull: login``: a pull not done yet is started
        or waited for in the background, and this experiment's trials wait (no other
        experiment does). ``job`` (a backend with job dependencies): one pre-pull job per
        image, and the trials are submitted at once with ``--dependency=afterok`` on it
        (``self.dependencies``). A failed pull fails the experiment with the runtime's
        words."""
        settings = self.cluster.containers
        self.dependencies = ()
        images = images_of(cfg, self.cluster)
        if not images:
            return True
        if settings.pull == "job" and self.backend.traits.job_dependencies:
            return self.pulled_by_jobs(exp_id, cfg, images)
        if self.puller is None:
            self.puller = Puller(settings)
        for image in images:
            status = self.puller.state(image)
            if status.state == PullState.FAILED:
                self.fail_unstarted(exp_id, f"the image {image!r} could not be pulled: "
                                            f"{status.message}")
                return False
            if status.state == PullState.PULLING:
                return False
        return True

    def pulled_by_jobs(self, exp_id: int, cfg: ExperimentConfig, images: list[str]) -> bool:
        """``containers.pull: job``: each image's pre-pull job (submitted once, recorded
        under ``runs_root``), polled only while it has not left the queue."""
        from dethpc.jobs.containers import image_path

        settings = self.cluster.containers
        deps: list[str] = []
        for image in images:
            if image_path(settings, image).is_file():
                continue
            pj = pull_job(Path(self.cluster.runs_root), settings, image)
            job_id = pj.job_id()
            if job_id is None:
                pj.root.mkdir(parents=True, exist_ok=True)
                pj.script.write_text(pull_job_script(settings, image, self.python))
                pool = self.cluster.pool(cfg.resources.resource_pool)
                placement = [f"{flag}={value}" for flag, value in (
                    ("--partition", pool.partition), ("--qos", pool.qos),
                    ("--account", pool.account)) if value]
                try:
                    (job_id,) = self.backend.submit(JobRequest(
                        name=f"dethpc-pull-{self.tag}", comment=f"dethpc:pull={image}",
                        script=pj.script, workdir=pj.root, time_limit_s=3600,
                        extra_args=(*placement, f"--output={pj.output}", "--ntasks=1")))
                except DethpcError as exc:
                    self.fail_unstarted(exp_id, f"the pre-pull job of {image!r} was refused: "
                                                f"{exc}")
                    return False
                pj.record.write_text(job_id + "\n")
                self.event(exp_id, "pull", f"pre-pull job {job_id} for {image}")
            info = self.backend.poll([job_id]).get(job_id)
            if info is not None and info.state.is_terminal:
                if info.state == JobState.COMPLETED and image_path(settings, image).is_file():
                    continue
                self.fail_unstarted(exp_id, pull_failed(pj, image, job_id, info))
                return False
            deps.append(job_id)
            self.pull_watch.setdefault(job_id, (image, set()))[1].add(exp_id)
        if deps:
            self.dependencies = (f"--dependency=afterok:{':'.join(deps)}",
                                 "--kill-on-invalid-dep=yes")
        return True

    def check_pulls(self) -> None:
        """Pre-pull jobs that trials wait on: a failed one fails their experiments with
        the runtime's words before the reconciler sees Slurm kill the dependent jobs
        (one squeue, only while such a job is watched; the watch is in memory, so after
        a daemon restart a failed pull shows as the trials' cancelled jobs)."""
        if not self.pull_watch:
            return
        infos = self.backend.poll(sorted(self.pull_watch))
        settings = self.cluster.containers
        for job_id, (image, exp_ids) in list(self.pull_watch.items()):
            info = infos.get(job_id)
            if info is None or not info.state.is_terminal:
                continue
            del self.pull_watch[job_id]
            pj = pull_job(Path(self.cluster.runs_root), settings, image)
            if info.state == JobState.COMPLETED and pj.job_id() == job_id:
                continue
            message = pull_failed(pj, image, job_id, info)
            for exp_id in sorted(exp_ids):
                self.fail_experiment(exp_id, message)

    def warn_once(self, exp_id: int, message: str) -> None:
        warn_once(self.store, exp_id, message)

    def event(self, exp_id: int, kind: str, message: str) -> None:
        event(self.store, exp_id, kind, message)

    def fail_unstarted(self, exp_id: int, message: str) -> None:
        fail_unstarted(self.store, exp_id, message, self.clock)

    def fail_experiment(self, exp_id: int, message: str) -> None:
        fail_experiment(self.store, exp_id, message)

    # ------------------------------------------------------------------ loop
    def run(self, *, until_idle: bool = False, max_ticks: int | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> int:
        """Tick until told to stop; sleep ``tick_min_s`` after a busy tick, doubling up
        to ``tick_max_s`` while idle. ``until_idle`` returns once no experiment is open."""
        delay, ticks = self.cluster.tick_min_s, 0
        while not should_stop():
            try:
                stats = self.tick()
            except LeaseLost as exc:
                log.error("%s", exc)
                break
            except DethpcError as exc:
                log.error("tick failed: %s", exc)
                stats = TickStats(experiments=1)
            ticks += 1
            if until_idle and stats.experiments == 0:
                break
            if max_ticks is not None and ticks >= max_ticks:
                break
            delay = next_delay(delay, stats.busy, self.cluster.tick_min_s,
                               self.cluster.tick_max_s)
            try:
                if self.wait(delay, should_stop):
                    delay = self.cluster.tick_min_s
            except LeaseLost as exc:
                log.error("%s", exc)
                break
        return ticks

    # ------------------------------------------------------------------ between ticks
    def wait(self, seconds: float, should_stop: Callable[[], bool]) -> bool:
        """``Watcher.wait`` with this daemon's fast path (``fast_tick``)."""
        return self.watcher.wait(seconds, should_stop, self.fast_tick)

    def refresh_watch(self) -> None:
        self.watcher.refresh()

    def woken(self) -> bool:
        return self.watcher.woken()

    @property
    def wake(self) -> Path | None:
        return self.watcher.wake

    @wake.setter
    def wake(self, path: Path | None) -> None:
        self.watcher.wake = path

    @property
    def watch(self) -> dict[int, Watched]:
        return self.watcher.watch

    def fast_tick(self, grown: dict[int, set[int]]) -> bool:
        """``Reconciling.fast``: the grown metrics files ingested, no poll."""
        return self.reconciling.fast(grown)
