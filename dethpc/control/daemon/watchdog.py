"""The hang watchdog: running trials that make no progress get their stacks dumped and
their job ended, a counted restart.

Owns: ``Watchdog.run`` -- after the reconcile, for each running job of an experiment
whose ``slurm.watchdog`` watches it (managed: unless off; a wrapped script: only with
``output: true``, ``dethpc sbatch --max-idle``): the newest progress mark of its trial
(the modification time of ``metrics.jsonl``, of the in-job API's ``heartbeat`` and,
with ``output``, of the job's output files), kept per
run in memory (``dethpc.control.hangs.RunWatch``: a restarted daemon starts counting
afresh, which only delays a verdict); a run idle past its allowance
(``hangs.judge``) gets ``hung.json`` (job, run, idle and allowed seconds), an event, and
the stack-dump signal (``STACK_DUMP_SIGNAL``) to every rank (one backend call for all
of them); ``DUMP_WAIT_S`` later the run's ``hung`` exit record is appended and its steps
are killed (one call): the batch shell's end reads ``hung.json``, records ``hung`` too
(``dethpc.launch.run_end``) and ends the job; one still running ``CANCEL_WAIT_S`` after
the verdict is returned for the tick's one cancel. The reconciler
counts it as a restart: the trial resumes from its latest checkpoint in a new job.
A wrapped script runs in the batch step itself, not in steps of its own: its job is
requeued instead (``scontrol requeue``: Slurm's TERM, then KILL, to every process of
the job, and the same job runs again), a counted run of the same job that starts with
``$DETHPC_LATEST_CHECKPOINT``.
Must not: judge (``hangs`` does), cancel by itself (the cancel phase does), or watch
jobs that are not running, trials that were asked to stop, or detached jobs (no
wrapper: nothing records their runs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from sqlmodel import col, select

from dethpc.backends.base import Backend, JobAction, JobInfo, JobState
from dethpc.common.exitcodes import ExitReason, exit_record
from dethpc.common.jobenv import STACK_DUMP_SIGNAL
from dethpc.common.jobref import job_refs
from dethpc.common.jsonlines import append_record
from dethpc.common.kinds import EventKind
from dethpc.common.markers import run_mark
from dethpc.common.paths import ExperimentPaths, TrialPaths
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon.shared import TickStats
from dethpc.control.hangs import CANCEL_WAIT_S, DUMP_WAIT_S, RunWatch, judge, observe
from dethpc.control.reconcile import load_config
from dethpc.control.reconcile.rows import chunks
from dethpc.control.resolved import Resolved
from dethpc.control.worker_pool_view import is_item_ref
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, Job

log = logging.getLogger(__name__)


def newest_mark(tp: TrialPaths, output: bool = False) -> float:
    """The newest modification time of the trial's progress files (0: none yet);
    ``output``: its newest job output file too (``TrialPaths.logs``, oldest first)."""
    out = 0.0
    for path in (tp.metrics, tp.heartbeat, *(tp.logs()[-1:] if output else ())):
        try:
            out = max(out, path.stat().st_mtime)
        except OSError:
            continue
    return out


class Watchdog:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 clock: Callable[[], float], *,
                 workers: Callable[[], Collection[str]] = frozenset) -> None:
        self.store, self.cluster, self.backend, self.clock = store, cluster, backend, clock
        #: the pool workers' refs the tick's poll asked about: jobs, but never a trial's
        #: (a worker array has no Job rows), so never looked up
        self.workers = workers
        #: job ref -> what this daemon saw of its current run
        self._watch: dict[str, RunWatch] = {}
        #: (ref, run) whose exit record this daemon wrote
        self._ended: set[tuple[str, int]] = set()

    def run(self, exp_ids: list[int], infos: dict[str, JobInfo], stats: TickStats,
            resolved: Mapping[int, Resolved] | None = None) -> list[str]:
        """Watch the running jobs; returns the hung jobs that outlived the kill of their
        steps, for the tick's cancel. ``resolved``: the tick's view of each experiment:
        those whose policy watches nothing are passed over without a transaction."""
        if resolved is not None:
            exp_ids = [e for e in exp_ids if (r := resolved.get(e)) is None or (
                r.kind.wrapped and r.cfg.slurm.watchdog.watches(r.kind.user_script))]
        if not exp_ids and not self._watch:
            return []
        # the jobs this poll saw running, the only ones watched: the store is asked for
        # those rows alone (reading every live job's row was 35,000 rows a tick at
        # 50,000 trials, for the 64 running: bench/tick_scale); neither a pool's items
        # nor its workers are a trial's job
        workers = self.workers()
        polled_running = sorted(ref for ref, info in infos.items()
                                if info.state is JobState.RUNNING and not is_item_ref(ref)
                                and ref not in workers)
        if not polled_running:   # nothing to watch (a pool search's every tick): no read
            self._watch.clear()
            return []
        now = self.clock()
        dump: list[str] = []
        kill: list[str] = []
        requeue: list[str] = []
        cancel: list[str] = []
        running: set[str] = set()
        with self.store.read() as s:
            for exp_id in exp_ids:
                exp = s.get(Experiment, exp_id)
                if exp is None or not exp.kind.wrapped:
                    continue
                r = resolved.get(exp_id) if resolved is not None else None
                policy = (r.cfg if r is not None else load_config(exp)).slurm.watchdog
                script = exp.kind.user_script
                if not policy.watches(script):
                    continue
                paths = ExperimentPaths(Path(exp.run_dir))
                # the two columns it reads, not Job objects
                for ref, trial_id in (row for chunk in chunks(polled_running) for row in s.exec(
                        select(Job.ref, Job.trial_id).where(
                            Job.experiment_id == exp_id, col(Job.live).is_(True),
                            col(Job.ref).in_(chunk)))):
                    info = infos.get(ref or "")
                    if ref is None or is_item_ref(ref) or info is None \
                            or info.state is not JobState.RUNNING:
                        continue
                    running.add(ref)
                    tp = paths.trial(trial_id)
                    if tp.stop.exists():       # asked to stop: its end is the stop's
                        continue
                    marked = run_mark(tp.hung, ref, info.restart_count)
                    if marked is not None:
                        waited = now - float(str(marked.get("time") or 0))
                        if waited >= CANCEL_WAIT_S:    # the batch shell did not end it
                            cancel.append(ref)
                        elif waited >= DUMP_WAIT_S and self._record_end(
                                tp, ref, info.restart_count, now):
                            (requeue if script else kill).append(ref)
                        continue
                    watch = self._seen(ref, info.restart_count, now)
                    watch = self._watch[ref] = observe(
                        watch, newest_mark(tp, policy.output))
                    hang = judge(policy, watch, now, self.cluster.max_idle_cap_s)
                    if hang is None:
                        continue
                    tp.hung.write_text(json.dumps({
                        "job": ref, "run": info.restart_count, "time": now,
                        "idle_s": round(hang.idle_s, 1), "max_idle_s": hang.allowed_s}))
                    what = "since its last progress" if hang.started else \
                        "since its run started (no progress yet)"
                    then = (f"the job is requeued in {DUMP_WAIT_S:.0f} s and the script "
                            "runs again with its latest reported checkpoint (counted)"
                            if script else
                            f"the job ends in {DUMP_WAIT_S:.0f} s and the trial restarts "
                            "from its latest checkpoint (counted)")
                    s.add(Event(experiment_id=exp_id, trial_id=trial_id, kind=EventKind.HUNG,
                                message=f"trial {trial_id} job {ref} run "
                                f"{info.restart_count}: no progress for {hang.idle_s:.0f} s "
                                f"{what}, allowed {hang.allowed_s:.0f} s: stacks asked "
                                f"for (SIG{STACK_DUMP_SIGNAL}, in the trial log), {then}"))
                    dump.append(ref)
        for ref in set(self._watch) - running:
            del self._watch[ref]
        if dump:
            self.backend.signal_steps(job_refs(sorted(dump)), STACK_DUMP_SIGNAL)
            stats.changed = True
            log.warning("hung: %s (stacks asked for)", ", ".join(sorted(dump)))
        if kill:
            # a hung step does not act on a TERM (its handler only sets a flag, and
            # nothing reads it), and a cancel would start Slurm's KillWait, whose
            # SIGKILL takes the batch shell too: KILL the steps alone, and the batch
            # shell records the run's end (``hung``) and ends the job at once
            self.backend.signal_steps(job_refs(sorted(kill)), "KILL")
        if requeue:
            # a wrapped script runs in the batch step: the requeue's TERM and KILL reach
            # it, and Slurm runs the job again (a counted run: its record says hung)
            self.backend.act(job_refs(sorted(requeue)), JobAction.REQUEUE)
            log.warning("hung: %s requeued", ", ".join(sorted(requeue)))
        return cancel

    def _record_end(self, tp: TrialPaths, ref: str, run: int, now: float) -> bool:
        """The hung run's exit record, written once by this daemon before it ends the
        job: a process stuck where it never sees the TERM (a sleep loop, a collective)
        outlasts Slurm's KillWait, and the SIGKILL after it takes the batch shell's own
        record with it. When the shell does write one (``run_end`` reads ``hung.json``),
        it says ``hung`` too. False: written already."""
        if (ref, run) in self._ended:
            return False
        self._ended.add((ref, run))
        append_record(tp.exit_log, exit_record(ExitReason.HUNG, -1, run, ref, "", now))
        return True

    def _seen(self, ref: str, run: int, now: float) -> RunWatch:
        """This daemon's watch of ``ref``'s run ``run`` (a new run keeps the longest gap)."""
        watch = self._watch.get(ref)
        if watch is None:
            return RunWatch(run, running_since=now)
        if watch.run != run:
            return RunWatch(run, running_since=now, longest_gap=watch.longest_gap)
        return watch
