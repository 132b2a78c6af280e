"""The hang watchdog: running trials that make no progress get their stacks dumped and
their job ended, a counted restart.

Owns: ``Watchdog.run`` -- after the reconcile, for each running job of a managed
experiment with ``slurm.watchdog`` on: the newest progress mark of its trial (the
modification time of ``metrics.jsonl`` and of the in-job API's ``heartbeat``), kept per
run in memory (``dethpc.control.hangs.RunWatch``: a restarted daemon starts counting
afresh, which only delays a verdict); a run idle past its allowance
(``hangs.judge``) gets ``hung.json`` (job, run, idle and allowed seconds), an event, and
the stack-dump signal (``STACK_DUMP_SIGNAL``) to every rank (one backend call for all
of them); ``DUMP_WAIT_S`` later the run's ``hung`` exit record is appended and its steps
are killed (one call): the batch shell's end reads ``hung.json``, records ``hung`` too
(``dethpc.launch.run_end``) and ends the job; one still running ``CANCEL_WAIT_S`` after
the verdict is returned for the tick's one cancel. The reconciler
counts it as a restart: the trial resumes from its latest checkpoint in a new job.
Must not: judge (``hangs`` does), cancel by itself (the cancel phase does), or watch
jobs that are not running, trials that were asked to stop, or the other kinds of
experiment (a wrapped script has no heartbeat).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from sqlmodel import col, select

from dethpc.backends.base import Backend, JobInfo, JobState
from dethpc.common.exitcodes import ExitReason, exit_record
from dethpc.common.jobenv import STACK_DUMP_SIGNAL
from dethpc.common.jsonlines import append_record
from dethpc.common.kinds import ExperimentKind
from dethpc.common.markers import run_mark
from dethpc.common.paths import ExperimentPaths, TrialPaths
from dethpc.config.model import ClusterConfig
from dethpc.control.daemon.shared import TickStats
from dethpc.control.hangs import CANCEL_WAIT_S, DUMP_WAIT_S, RunWatch, judge, observe
from dethpc.control.pool_view import is_item_ref
from dethpc.control.reconcile import load_config
from dethpc.store import Store
from dethpc.store.models import Event, Experiment, Job

log = logging.getLogger(__name__)


def newest_mark(tp: TrialPaths) -> float:
    """The newest modification time of the trial's progress files (0: none yet)."""
    out = 0.0
    for path in (tp.metrics, tp.heartbeat):
        try:
            out = max(out, path.stat().st_mtime)
        except OSError:
            continue
    return out


class Watchdog:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend,
                 clock: Callable[[], float]) -> None:
        self.store, self.cluster, self.backend, self.clock = store, cluster, backend, clock
        #: job ref -> what this daemon saw of its current run
        self._watch: dict[str, RunWatch] = {}
        #: (ref, run) whose exit record this daemon wrote
        self._ended: set[tuple[str, int]] = set()

    def run(self, exp_ids: list[int], infos: dict[str, JobInfo],
            stats: TickStats) -> list[str]:
        """Watch the running jobs; returns the hung jobs that outlived the kill of their
        steps, for the tick's cancel."""
        now = self.clock()
        dump: list[str] = []
        kill: list[str] = []
        cancel: list[str] = []
        running: set[str] = set()
        with self.store.session() as s:
            for exp_id in exp_ids:
                exp = s.get(Experiment, exp_id)
                if exp is None or exp.kind != ExperimentKind.MANAGED:
                    continue
                policy = load_config(exp).slurm.watchdog
                if not policy.enabled:
                    continue
                paths = ExperimentPaths(Path(exp.run_dir))
                for job in s.exec(select(Job).where(Job.experiment_id == exp_id,
                                                    col(Job.live).is_(True))):
                    info = infos.get(job.ref or "")
                    if job.ref is None or is_item_ref(job.ref) or info is None \
                            or info.state is not JobState.RUNNING:
                        continue
                    running.add(job.ref)
                    tp = paths.trial(job.trial_id)
                    if tp.stop.exists():       # asked to stop: its end is the stop's
                        continue
                    marked = run_mark(tp.hung, job.ref, info.restart_count)
                    if marked is not None:
                        waited = now - float(str(marked.get("time") or 0))
                        if waited >= CANCEL_WAIT_S:    # the batch shell did not end it
                            cancel.append(job.ref)
                        elif waited >= DUMP_WAIT_S and self._record_end(
                                tp, job.ref, info.restart_count, now):
                            kill.append(job.ref)
                        continue
                    watch = self._seen(job.ref, info.restart_count, now)
                    watch = self._watch[job.ref] = observe(watch, newest_mark(tp))
                    hang = judge(policy, watch, now, self.cluster.max_idle_cap_s)
                    if hang is None:
                        continue
                    tp.hung.write_text(json.dumps({
                        "job": job.ref, "run": info.restart_count, "time": now,
                        "idle_s": round(hang.idle_s, 1), "max_idle_s": hang.allowed_s}))
                    what = "since its last progress" if hang.started else \
                        "since its run started (no progress yet)"
                    s.add(Event(experiment_id=exp_id, trial_id=job.trial_id, kind="hung",
                                message=f"trial {job.trial_id} job {job.ref} run "
                                f"{info.restart_count}: no progress for {hang.idle_s:.0f} s "
                                f"{what}, allowed {hang.allowed_s:.0f} s: stacks asked "
                                f"for (SIG{STACK_DUMP_SIGNAL}, in the trial log), the job "
                                f"ends in {DUMP_WAIT_S:.0f} s and the trial restarts "
                                "from its latest checkpoint (counted)"))
                    dump.append(job.ref)
        for ref in set(self._watch) - running:
            del self._watch[ref]
        if dump:
            self.backend.signal_steps(sorted(dump), STACK_DUMP_SIGNAL)
            stats.changed = True
            log.warning("hung: %s (stacks asked for)", ", ".join(sorted(dump)))
        if kill:
            # a hung step does not act on a TERM (its handler only sets a flag, and
            # nothing reads it), and a cancel would start Slurm's KillWait, whose
            # SIGKILL takes the batch shell too: KILL the steps alone, and the batch
            # shell records the run's end (``hung``) and ends the job at once
            self.backend.signal_steps(sorted(kill), "KILL")
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
