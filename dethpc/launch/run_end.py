"""How one run of a job ends: the requeue decision, in Python, for every kind of job.

Owns: ``RunFacts`` (what a job's batch shell saw: the step's exit code, the signals it
got and when, the startup hook's code, what ``dethpc should-stop`` answered), ``SlurmJobFacts``
(what ``scontrol show job`` says of the job itself: state, restarts, end time, whether
slurmctld preempted it), ``decide`` (a pure function from both to a ``RunDecision``: the
run's ``ExitReason``, whether the job requeues itself, its exit code) and the command
every job script calls once its step ended::

    eval "$(python -m dethpc.launch.run_end --kind trial --rc "$rc" ...)"

which asks ``scontrol`` only when the decision needs it (a run on Slurm that stopped on a
signal or failed), appends the run's exit record to ``exits.jsonl`` (trials and wrapped scripts;
its ``job`` is ``dethpc.common.jobref.ref_from_env``, the ref the store keeps) and
prints ``reason=… requeue=0|1 exit_code=…`` for the shell to act on. And ``start``: the
ref a run names itself by (``JOB_REF``), and whether the job's last recorded run already
completed (Slurm 25.11 starts a completed job once more after a preemption whose grace
ran out; docs/dev-cluster.md).

The templates (trial.sbatch.j2, _wrapped_run.j2, the pool worker's script) keep only
what gathers facts (traps, ``wait``) and what acts on the answer (``scontrol requeue``,
``exit``); tests/unit/launch/test_run_end.py holds the table.
Must not: import anything heavier than ``dethpc.common`` (it runs at the end of every
run, inside a preemption's grace).
Not to be confused with the daemon's ``dethpc.control.job_end`` (its ``Decision`` judges
a whole job from the store and a poll, reading the exit records written here) and
``dethpc.control.reconcile.job_ends`` (which carries that judgement out on the rows).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dethpc.common.exitcodes import (
    EXIT_PREEMPTED,
    EXIT_STOPPED,
    LOCAL_REQUEUE_EXIT,
    ExitReason,
    exit_record,
)
from dethpc.common.jobref import ref_from_env
from dethpc.common.jsonlines import append_record, read_new_lines
from dethpc.common.markers import run_mark
from dethpc.common.paths import TrialPaths
from dethpc.launch.run_start import run_number
from dethpc.launch.run_start import start as run_start

#: a signal this close to the job's end time (plus the pool's grace) is the walltime's
END_TIME_SLACK_S = 60
#: ``scontrol show job`` tries (a rate-limited or restarting slurmctld answers later),
#: the pause before the second (the third waits twice that) and each try's limit: all
#: of it inside Slurm's KillWait after a TERM (30 s by default; 5 s on the dev cluster)
SCONTROL_TRIES = 3
SCONTROL_PAUSE_S = 0.5
SCONTROL_TIMEOUT_S = 10.0
#: the job's question about itself. ``--local``: slurmctld of the cluster the job runs
#: on answers alone, without the FED_INFO RPC every plain ``scontrol show job`` sends
#: first (2 RPCs -> 1, sdiag on 22.05; issue 48). A job runs on the local cluster, whose
#: record of it is the live one, federation or not: nothing is lost. It matters because
#: a preemption ends many runs in the same second, each asking here (a pool's 5
#: workers preempted together: 15 of the user's RPCs in one second, 5 of them FED_INFO)
SHOW_JOB_ARGV = ("scontrol", "--local", "-o", "show", "job")


class RunKind(StrEnum):
    """What the batch shell ran."""

    TRIAL = "trial"      # dethpc's trial step (the Trainer / Core API: exit codes 80, 81)
    SCRIPT = "script"    # a user's script under the wrapper (`dethpc sbatch`, a search)
    WORKER = "worker"    # a pool worker (exit 85: it handed its lease back on a signal)


@dataclass(frozen=True)
class RunFacts:
    """What the batch shell knows when its step ended."""

    kind: RunKind
    rc: int
    #: the first signal the batch shell got in this run ("" none): its cause, the pool's
    #: early one or TERM (a TERM after the early one, at the end of a preemption's
    #: grace, is not recorded: that run was preempted, not requeued by hand)
    signal: str = ""
    signal_at: float = 0.0
    #: Slurm requeues in place (``scontrol requeue``); else the local backend, which
    #: requeues on ``LOCAL_REQUEUE_EXIT``
    in_place: bool = True
    #: the pool's ``signal_grace_s`` (the early signal comes that long before the limit)
    grace_s: int = 0
    #: the startup hook's exit code (trials; 0: none or it passed)
    hook_rc: int = 0
    #: scripts: what ``dethpc should-stop`` last answered yes to in this run
    acked: str = ""
    #: scripts: the early signal was forwarded to the script
    forward: bool = False
    #: this run's number (``SLURM_RESTART_COUNT``)
    run: int = 0
    #: ``dethpc trial preempt --time-limit`` sent this run's signal: the time limit's path
    rehearsed_limit: bool = False
    #: the daemon's hang watchdog ended this run (``hung.json`` names this job and run)
    hung: bool = False


@dataclass(frozen=True)
class SlurmJobFacts:
    """``scontrol show job`` of the job itself; ``state`` "" when it did not answer."""

    state: str = ""
    restarts: int = 0
    end_ts: float = 0.0          # 0: no end time (no time limit) or unknown
    preempted: bool = False      # slurmctld set PreemptTime


@dataclass(frozen=True)
class RunDecision:
    """How one run ends: its reason, whether the job requeues itself, the shell's exit
    code (the job side's; the daemon's judgement of a job is ``control.job_end.Decision``)."""

    reason: ExitReason
    requeue: bool
    exit_code: int


def exit_reason(f: RunFacts) -> ExitReason:
    """The run's reason from what the shell saw alone (no Slurm asked)."""
    if f.kind is RunKind.WORKER:
        return {0: ExitReason.COMPLETED, LOCAL_REQUEUE_EXIT: ExitReason.PREEMPTED}.get(
            f.rc, ExitReason.ERROR)
    if f.kind is RunKind.SCRIPT:
        if f.rc == 0:
            if f.acked in ("stop", "pause"):
                return ExitReason.STOPPED
            if f.acked == "signal":
                return ExitReason.PREEMPTED
            # the signal was forwarded: a script that exits 0 after it stopped for it
            if f.forward and f.signal and f.signal != "TERM":
                return ExitReason.PREEMPTED
            return ExitReason.COMPLETED
        return ExitReason.PREEMPTED if f.signal else ExitReason.ERROR
    # a failed startup hook is the trial's error, whatever the step's code
    if f.hook_rc != 0 and not f.signal:
        return ExitReason.ERROR
    if f.rc == 0:
        return ExitReason.COMPLETED
    if f.rc == EXIT_PREEMPTED:
        return ExitReason.PREEMPTED
    if f.rc == EXIT_STOPPED:
        return ExitReason.STOPPED
    # killed by the signal we forwarded before its handler was installed (python still
    # starting): nothing to checkpoint yet; the preemption it is
    if f.signal and f.rc > 128:
        return ExitReason.PREEMPTED
    return ExitReason.ERROR


def needs_job_facts(f: RunFacts) -> bool:
    """Only a run on Slurm that stopped on a signal, or whose trial or script failed,
    asks who ends its job: a failure may be the kill of a requeue whose TERM reached the
    step before the batch shell (``requeued_meanwhile``)."""
    asks = ({ExitReason.PREEMPTED} if f.kind is RunKind.WORKER
            else {ExitReason.PREEMPTED, ExitReason.ERROR})
    return f.in_place and exit_reason(f) in asks


def requeued_meanwhile(f: RunFacts, job: SlurmJobFacts | None) -> bool:
    """Slurm already counts a later run of this job than the one that just failed: the
    job was requeued (the script's own ``scontrol requeue``, Lightning's on its signal,
    or an operator's) and the run's step died of that requeue's kill. The batch shell
    may not have seen the TERM: Slurm signals the job's steps and its batch shell one
    after the other, and a step that died first ends the shell's ``wait`` before the
    shell's TERM arrives, which ``_run_end.j2`` then ignores (a fresh machine's CI,
    tests/slurm/test_site_scripts_slurm.py: Lightning's requeue recorded as an error
    and counted as a restart). The run ended because it was requeued, whatever the
    shell saw: a free end, never a restart."""
    return job is not None and job.restarts > f.run


def decide(f: RunFacts, job: SlurmJobFacts | None = None) -> RunDecision:
    """The requeue decision. A run that stopped on a signal, on Slurm, asks who ends its
    job (``who_ends``); a failed one is a requeue's kill when Slurm already counts a
    later run (``requeued_meanwhile``). Without Slurm (local), a preempted run exits
    ``LOCAL_REQUEUE_EXIT``. An error exits with its code; a worker with its own; every
    other end exits 0."""
    if f.hung and f.rc != 0:
        # ended by the watchdog (its TERM): a counted end, never requeued in place
        return RunDecision(ExitReason.HUNG, False, f.rc)
    reason, requeue = exit_reason(f), False
    if reason is ExitReason.ERROR and f.kind is not RunKind.WORKER \
            and requeued_meanwhile(f, job):
        return RunDecision(ExitReason.REQUEUED, False, 0)
    if reason is ExitReason.PREEMPTED and f.in_place:
        reason, requeue = who_ends(f, job or SlurmJobFacts())
    if requeue:
        return RunDecision(reason, True, 0)
    if f.kind is RunKind.WORKER:
        # on Slurm a worker that handed its lease back and is not requeued just ends
        stopped = f.in_place and f.rc == LOCAL_REQUEUE_EXIT
        return RunDecision(reason, False, 0 if stopped else f.rc)
    if reason is ExitReason.PREEMPTED and not f.in_place:
        return RunDecision(reason, False, LOCAL_REQUEUE_EXIT)
    if reason is ExitReason.ERROR:
        return RunDecision(reason, False, f.rc)
    return RunDecision(reason, False, 0)


def who_ends(f: RunFacts, job: SlurmJobFacts) -> tuple[ExitReason, bool]:
    """Who ends a job whose run stopped on a signal, and so whether it requeues itself.
    RUNNING: nobody yet (the early signal before a time limit, a preemption's grace, a
    user's ``scancel --signal``): it requeues itself, and a signal close to the end time
    without a PreemptTime is the walltime's. TIMEOUT: the time limit ended it (Slurm's
    TERM came while the step ran on). Restarts grown past this run: Slurm requeued it
    (``scontrol requeue``, a preemption whose grace ran out). No answer (slurmctld down
    or refusing this user's RPCs): the run stays preempted, a free end, and the job is
    left to end; the daemon resubmits the trial from its checkpoint. Anything else
    (CANCELLED): it is being cancelled, never requeued."""
    if job.state == "TIMEOUT":
        return ExitReason.TIME_LIMIT, False
    if job.state == "RUNNING":
        walltime = f.rehearsed_limit or (not job.preempted and job.end_ts > 0
                                         and job.end_ts - f.signal_at
                                         <= f.grace_s + END_TIME_SLACK_S)
        return (ExitReason.TIME_LIMIT if walltime else ExitReason.PREEMPTED), True
    if f.kind is RunKind.WORKER or not job.state:
        # a worker's runs keep their own records; no answer is no reason to cancel
        return ExitReason.PREEMPTED, False
    if job.restarts > f.run:
        return (ExitReason.REQUEUED if f.signal == "TERM" else ExitReason.PREEMPTED), False
    return ExitReason.CANCELLED, False


# ------------------------------------------------------------------ scontrol's answer
_FIELD = re.compile(r"(?:^|\s)(JobState|Restarts|EndTime|PreemptTime)=(\S*)")


def parse_job_facts(text: str) -> SlurmJobFacts:
    """``scontrol -o show job <ref>`` -> ``SlurmJobFacts`` (the first record: a heterogeneous
    job prints its leader first)."""
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(text.split("\n", 1)[0]):
        fields.setdefault(key, value)
    end_ts = 0.0
    end = fields.get("EndTime", "")
    if end and end[0].isdigit():
        try:
            end_ts = time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            end_ts = 0.0
    preempt = fields.get("PreemptTime", "")
    restarts = fields.get("Restarts", "0")
    return SlurmJobFacts(state=fields.get("JobState", ""),
                    restarts=int(restarts) if restarts.isdigit() else 0,
                    end_ts=end_ts, preempted=bool(preempt) and preempt[0].isdigit())


def ask_scontrol(ref: str, run: Callable[[list[str]], tuple[int, str]] | None = None,
                 tries: int = SCONTROL_TRIES, pause_s: float = SCONTROL_PAUSE_S) -> SlurmJobFacts:
    """``scontrol --local show job`` of this job (``SHOW_JOB_ARGV``), tried again when
    slurmctld did not answer (a rate limit, a restart); ``SlurmJobFacts()`` when it
    never did."""
    run = run or _run
    for attempt in range(tries):
        code, out = run([*SHOW_JOB_ARGV, ref])
        if code == 0 and "JobState=" in out:
            return parse_job_facts(out)
        if "Invalid job id" in out:
            break
        if attempt + 1 < tries:
            time.sleep(pause_s * (attempt + 1))
    return SlurmJobFacts()


def _run(argv: list[str]) -> tuple[int, str]:
    import subprocess  # only a run that stopped on a signal asks: the rest start faster

    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S,
                           check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return p.returncode, p.stdout + p.stderr


# ------------------------------------------------------------------ the run's nodes
def run_nodes(env: Mapping[str, str]) -> list[str]:
    """The nodes this run had (``SLURM_JOB_NODELIST``, expanded): what the daemon's
    bad-node rule counts (``dethpc.control.bad_nodes``); [] without Slurm, or for a
    list this parser does not read (it asks no command at the end of a run)."""
    from dethpc.common.hostlist import HostlistSyntaxError, expand_hostlist

    try:
        return expand_hostlist(env.get("SLURM_JOB_NODELIST", "").strip())
    except HostlistSyntaxError:
        return []


# ------------------------------------------------------------------ the run's files
def append_exit_record(trial_dir: Path, record: dict[str, object]) -> None:
    append_record(TrialPaths(trial_dir).exit_log, record)


def rehearsed_limit(trial_dir: Path, ref: str, run: int) -> bool:
    """``dethpc trial preempt --time-limit`` marked this job's run (``rehearsal.json``)."""
    mark = run_mark(TrialPaths(trial_dir).rehearsal, ref, run)
    return mark is not None and mark.get("what") == "time_limit"


def hung_marked(trial_dir: Path, ref: str, run: int) -> bool:
    """The daemon's hang watchdog ended this job's run (``hung.json``)."""
    return run_mark(TrialPaths(trial_dir).hung, ref, run) is not None


def acked_in_run(trial_dir: Path, run: int, started_at: float) -> str:
    """What ``dethpc should-stop`` last answered yes to in run ``run``, since it started
    (``stop-acks.jsonl``; a job the daemon submitted again starts at run 0 again)."""
    acks = [r for r in read_new_lines(TrialPaths(trial_dir).stop_acks, 0).records
            if r.get("run") == run]
    if acks and float(acks[-1].get("time") or 0) >= started_at:
        return str(acks[-1].get("why") or "")
    return ""


# ------------------------------------------------------------------ the command
def _shell(**values: object) -> str:
    return " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())


def end(argv: Sequence[str], env: Mapping[str, str]) -> str:
    p = argparse.ArgumentParser(prog="python -m dethpc.launch.run_end")
    p.add_argument("--kind", type=RunKind, required=True)
    p.add_argument("--rc", type=int, required=True)
    p.add_argument("--signal", default="")
    p.add_argument("--signal-at", type=float, default=0.0)
    p.add_argument("--grace", type=int, default=0)
    p.add_argument("--hook-rc", type=int, default=0)
    p.add_argument("--local", action="store_true", help="no Slurm: requeue by exit code")
    p.add_argument("--forward", action="store_true")
    p.add_argument("--started-at", type=float, default=0.0)
    p.add_argument("--trial-dir", type=Path)
    a = p.parse_args(argv)
    ref, run = ref_from_env(env), run_number(env)
    facts = RunFacts(kind=a.kind, rc=a.rc, signal=a.signal, signal_at=a.signal_at,
                     in_place=not a.local, grace_s=a.grace, hook_rc=a.hook_rc,
                     forward=a.forward, run=run,
                     rehearsed_limit=(a.trial_dir is not None and bool(a.signal)
                                      and rehearsed_limit(a.trial_dir, ref, run)),
                     hung=a.trial_dir is not None and hung_marked(a.trial_dir, ref, run),
                     acked=(acked_in_run(a.trial_dir, run, a.started_at)
                            if a.trial_dir is not None and a.kind is RunKind.SCRIPT else ""))
    job = ask_scontrol(ref) if needs_job_facts(facts) else None
    d = decide(facts, job)
    if a.trial_dir is not None and a.kind is not RunKind.WORKER:
        append_exit_record(a.trial_dir, exit_record(d.reason, a.rc, run, ref, a.signal,
                                                    time.time(), nodes=run_nodes(env)))
    return _shell(reason=d.reason.value, requeue=int(d.requeue), exit_code=d.exit_code,
                  job_state=job.state if job is not None else "", JOB_REF=ref)


def start(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """``JOB_REF`` and ``done_already``: ``dethpc.launch.run_start``'s answer (job scripts
    call that light module; this one stays for the scripts rendered before it)."""
    try:
        return run_start(argv, env)
    except ValueError as exc:
        argparse.ArgumentParser(prog="python -m dethpc.launch.run_end start").error(str(exc))
        raise  # error() exits


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["start"]:
        print(start(args[1:], os.environ))
    else:
        print(end(args, os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
