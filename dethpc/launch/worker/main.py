"""``python -m dethpc.launch.worker``: one pool worker's loop.

Claims a work item (``dethpc.common.worker_queue``), runs the trial as the job script
would (same environment, working directory, entrypoint, stop file, exit codes
80/81, one ``exits.jsonl`` record per run, output appended to the trial's
``slurm-<job>.out``), heartbeats its lease while the trial runs, records the
result, and takes the next item. A preemption signal (the pool's, or TERM) is
forwarded to the trial's process group; when the trial has exited the lease is
handed back (the trial resumes from its checkpoint on any worker) and the worker
exits with ``LOCAL_REQUEUE_EXIT`` (85). A lease taken away (expired) kills the
trial at once: another worker owns it now. With ``pool/drain`` present and
nothing to claim, the worker exits 0; with ``pool/retire/<its job ref>`` present
it exits 0 after its current run (the pool shrank). ``pool/kill/<item>`` kills the
trial of the item it holds (a cancel), recorded ``cancelled``. From its start to its
exit the worker keeps ``pool/alive/<its job ref>`` (``Presence``: created first, after
the signal handlers, so that a preemption during the preload still exits 85 and removes
it; its mtime renewed every ``--heartbeat-s``, idle or busy, removed on the way out): while
every worker's file agrees with Slurm's last answer the daemon asks Slurm about the
pool less often (``dethpc.control.daemon.poll``). A preload entry
``module:function`` (``torch.cuda:init``) is called in a spare, the next trial's process
forked ahead of it (``forkserver.Spares``): one is ready before the first claim and
another is forked as each trial starts, so that call overlaps the running trial.

The worker does not outlive the process that started it (the job's batch shell): at
its start it asks for SIGTERM when that parent ends (``dethpc.common.parent_death``:
prctl's PDEATHSIG, Linux), and every ``--poll-s`` it checks that its parent is still
the one it started under (the parent ended before the request, or no prctl) and then
raises SIGTERM itself. Either way that TERM takes the path of any other: the trial
is preempted, its lease handed back once it has exited, the worker exits 85. A batch
shell that ends normally has waited for the worker; Slurm's proctrack/cgroup would
kill an orphan anyway, proctrack/linuxproc need not (seen: an orphaned worker claimed
and forked on for minutes after its job ended).

Owns: the loop, the mapping of a trial's exit code to an exit record.
Must not: touch the store, submit jobs, or pick the next trial.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from dethpc.common import parent_death
from dethpc.common import worker_queue as queue
from dethpc.common.exitcodes import (
    LOCAL_REQUEUE_EXIT,
    ExitReason,
    exit_record,
)
from dethpc.common.jobenv import ENV_LATEST_CHECKPOINT, ENV_PREEMPT_SIGNAL, ENV_RUN_ID
from dethpc.common.jobref import ref_from_env
from dethpc.common.jsonlines import append_record
from dethpc.common.paths import TrialPaths
from dethpc.common.slots import agent_id
from dethpc.launch import detenv, run_end
from dethpc.launch.determined_alias import alias_env
from dethpc.launch.worker import forkserver


@dataclass
class Flags:
    """What the worker's signal handlers saw (handlers only set these)."""

    preempt: str = ""
    forwarded_to: int = 0
    seen: list[str] = field(default_factory=list)
    #: True until the worker serves (its preload, before the first claim): a signal then
    #: ends the start at once (``StoppedEarly``), holding nothing
    starting: bool = True


class StoppedEarly(BaseException):
    """A preemption signal (or TERM) came while the worker was still starting (a
    BaseException, as KeyboardInterrupt: a preloaded library's ``except Exception``
    does not swallow it)."""


def default_worker_id() -> str:
    return queue.worker_id(ref_from_env(os.environ), os.getpid(), socket.gethostname())


def exit_reason(code: int, signal: str) -> ExitReason:
    """A pool run's exit code (as a shell reports it) and the signal forwarded to it ("":
    none) -> its exit record's reason: the one rule of every trial's run
    (``dethpc.launch.run_end.exit_reason``)."""
    return run_end.exit_reason(run_end.RunFacts(kind=run_end.RunKind.TRIAL, rc=code,
                                                signal=signal))


def _latest_checkpoint(trial_dir: Path, env: dict[str, str]) -> str:
    from dethpc.launch.jobapi._files import latest_checkpoint

    try:
        found = latest_checkpoint(trial_dir, env)
    except Exception:  # a broken checkpoint directory: the trial starts fresh, as in a job
        return ""
    return "" if found is None else str(found)


def trial_env(item: queue.WorkItem) -> dict[str, str]:
    """The worker's own environment (SLURM_*, PATH) with the item's contract on top."""
    env = dict(os.environ)
    env.update(item.env)
    env[ENV_RUN_ID] = str(item.attempt)
    for name in detenv.RUN:  # Determined's DET_* of this run, none left from another's
        env.pop(name, None)
    env.update(detenv.run_env(env))
    env.update(alias_env(env))
    latest = _latest_checkpoint(Path(item.trial_dir), env)
    if latest:
        env[ENV_LATEST_CHECKPOINT] = latest
    else:
        env.pop(ENV_LATEST_CHECKPOINT, None)
    return env


def _append_exit(trial_dir: Path, reason: ExitReason, code: int, item: queue.WorkItem,
                 ref: str, sig: str) -> None:
    """One exit record per run; its ``job`` is the item's ref (the daemon's Job row)
    when the daemon put the item, else the worker's own job."""
    rec = {**exit_record(reason, code, item.attempt, item.ref or ref, sig, time.time(),
                         nodes=[agent_id(os.environ)]),
           "worker_job": ref, "worker": True}
    append_record(TrialPaths(trial_dir).exit_log, rec)


class Presence:
    """The worker's ``pool/alive/<task>`` file: announced at once, renewed every
    ``heartbeat_s`` (``beat``, called from the worker's loops), removed by ``leave``."""

    def __init__(self, paths: queue.WorkerPoolPaths, task: str, heartbeat_s: float) -> None:
        self.paths, self.task, self.heartbeat_s = paths, task, heartbeat_s
        self._next = 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.heartbeat_s
            queue.announce(self.paths, self.task)

    def leave(self) -> None:
        queue.leave(self.paths, self.task)


@dataclass(frozen=True)
class Settings:
    paths: queue.WorkerPoolPaths
    worker: str
    heartbeat_s: float
    poll_s: float
    max_idle_s: float     # exit after this long with nothing to claim (0: never)
    task: str = ""        # the array task index (``retire/<task>``); "" outside an array
    #: the preload's ``module:function`` calls, made in a spare forked ahead of each trial
    spare_calls: tuple[str, ...] = ()
    #: the pid that started the worker (its job's batch shell); 0: not watched
    parent: int = 0
    #: its ``pool/alive`` file (None: not kept, as outside a job)
    presence: Presence | None = None

    def beat(self) -> None:
        if self.presence is not None:
            self.presence.beat()


def check_parent(s: Settings, flags: Flags) -> None:
    """The worker's parent is gone and no signal said so (it ended before the worker
    asked for PDEATHSIG, or not Linux): raise SIGTERM here, once, so that the handlers
    stop the worker as if the job's end had reached it."""
    if not flags.preempt and parent_death.parent_gone(s.parent):
        signal.raise_signal(signal.SIGTERM)   # the handler has run when this returns


def run_one(s: Settings, lease: queue.Lease, flags: Flags,
            spares: forkserver.Spares | None = None) -> tuple[queue.RunResult | None, int]:
    """Run a claimed item to its end (in the spare when there is one); (its result or
    None when the lease was lost, the trial's exit code)."""
    item = lease.item
    trial_dir = Path(item.trial_dir)
    ref = ref_from_env(os.environ)
    # the node goes with each result: what the bad-node rule counts (never the worker id)
    extra = {"attempt": item.attempt, "job": ref, "node": agent_id(os.environ)}
    t0 = time.time()
    if not trial_dir.is_dir():     # nothing to run it in: an error, never a worker crash
        result = queue.RunResult(trial_id=item.trial_id, seq=item.seq,
                                 reason=str(ExitReason.ERROR), code=2, worker=s.worker,
                                 start_s=0.0, wall_s=0.0,
                                 extra={**extra,
                                        "error": f"trial directory {trial_dir} is missing"})
        queue.finish(s.paths, lease, result)
        return result, 2
    pid, started = (spares or forkserver.Spares(())).spawn(
        item.argv, trial_env(item), item.cwd, trial_dir / f"slurm-{ref}.out")
    flags.forwarded_to = pid
    if flags.preempt:      # the signal came between claim and fork
        _signal_group(pid, flags.preempt)
    next_beat = time.monotonic() + s.heartbeat_s
    code = -1
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if queue.killed(s.paths, item.name):     # cancelled: the trial ends now
            _signal_group(pid, "KILL")
            os.waitpid(pid, 0)
            flags.forwarded_to = 0
            _append_exit(trial_dir, ExitReason.CANCELLED, 137, item, ref, "KILL")
            result = queue.RunResult(trial_id=item.trial_id, seq=item.seq,
                                     reason=str(ExitReason.CANCELLED), code=137,
                                     worker=s.worker, start_s=started,
                                     wall_s=time.time() - t0,
                                     extra=extra)
            queue.finish(s.paths, lease, result)
            return result, 137
        check_parent(s, flags)
        s.beat()
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + s.heartbeat_s
            if not queue.heartbeat(lease):
                _signal_group(pid, "KILL")
                os.waitpid(pid, 0)
                flags.forwarded_to = 0
                _append_exit(trial_dir, ExitReason.CANCELLED, -9, item, ref, "")
                return None, -9
        time.sleep(s.poll_s)
    flags.forwarded_to = 0
    _signal_group(pid, "KILL")     # what the trial left behind ends with it, as with a job
    code = 128 - code if code < 0 else code    # killed by a signal: as a shell reports it
    reason = exit_reason(code, flags.preempt)
    _append_exit(trial_dir, reason, code, item, ref, flags.preempt)
    result = queue.RunResult(trial_id=item.trial_id, seq=item.seq, reason=str(reason),
                             code=code, worker=s.worker, start_s=started,
                             wall_s=time.time() - t0,
                             extra=extra)
    if reason is ExitReason.PREEMPTED:
        queue.give_back(s.paths, lease)
    else:
        queue.finish(s.paths, lease, result)
    return result, code


def _signal_group(pid: int, name: str) -> None:
    try:
        os.killpg(pid, signal.Signals[f"SIG{name}"])
    except (ProcessLookupError, PermissionError):
        pass


def install_handlers(flags: Flags, preempt_signal: str) -> None:
    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name.removeprefix("SIG")
        flags.preempt = flags.preempt or name
        flags.seen.append(name)
        if flags.starting:
            flags.starting = False    # once: a second signal while it leaves is recorded
            raise StoppedEarly(name)
        if flags.forwarded_to:
            fwd = preempt_signal if name == "TERM" else name
            _signal_group(flags.forwarded_to, fwd)

    for name in {preempt_signal, "TERM"}:
        signal.signal(signal.Signals[f"SIG{name}"], on_signal)


def serve(s: Settings, flags: Flags) -> int:
    """Claim and run items until drained or preempted; the worker's exit code. With
    ``spare_calls`` a spare is ready before the first claim and after each trial starts;
    it is dropped when the worker leaves."""
    spares = forkserver.Spares(s.spare_calls)
    spares.refill()
    try:
        return _serve(s, flags, spares)
    finally:
        spares.close()
        if parent_death.parent_gone(s.parent):
            print(f"dethpc worker {s.worker}: its parent (pid {s.parent}, the job's batch "
                  "shell) is gone: stopped as on SIGTERM", file=sys.stderr)


def _serve(s: Settings, flags: Flags, spares: forkserver.Spares) -> int:
    idle_since = time.monotonic()
    while True:
        check_parent(s, flags)
        s.beat()
        if flags.preempt:
            break
        if queue.retired(s.paths, s.task):
            return 0
        lease = queue.claim(s.paths, s.worker)
        if lease is None:
            if s.paths.drain.exists():
                return 0
            if s.max_idle_s and time.monotonic() - idle_since > s.max_idle_s:
                return 0
            time.sleep(s.poll_s)
            continue
        run_one(s, lease, flags, spares)
        idle_since = time.monotonic()
    return LOCAL_REQUEUE_EXIT


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dethpc.launch.worker",
                                description="run trials from an experiment's pool directory")
    p.add_argument("--run-dir", required=True, type=Path,
                   help="the experiment's run directory (its pool/ holds the work)")
    p.add_argument("--worker-id", default="", help="default: job ref or host.pid")
    p.add_argument("--preload", default="",
                   help="comma-separated modules imported once (e.g. torch); a "
                        "module:function entry (e.g. torch.cuda:init) is called in a spare "
                        "process forked ahead of each trial")
    p.add_argument("--heartbeat-s", type=float, default=5.0)
    p.add_argument("--poll-s", type=float, default=0.1)
    p.add_argument("--max-idle-s", type=float, default=0.0)
    p.add_argument("--task", default="",
                   help="this worker's name in pool/retire/ (default: its job ref, "
                        "<array>_<task>, when it runs as a job)")
    p.add_argument("--preempt-signal", default=os.environ.get(ENV_PREEMPT_SIGNAL, "USR2"))
    return p


def _check(args: argparse.Namespace) -> str:
    """'' when the arguments are usable, else a one-line error."""
    if not (args.run_dir / "pool").is_dir():
        return f"--run-dir: {args.run_dir}/pool is not a directory (no pool was set up)"
    if f"SIG{args.preempt_signal}" not in signal.Signals.__members__:
        return f"--preempt-signal: {args.preempt_signal!r} is not a signal name (e.g. USR2)"
    if args.heartbeat_s <= 0 or args.poll_s <= 0 or args.max_idle_s < 0:
        return "--heartbeat-s/--poll-s must be > 0 and --max-idle-s >= 0"
    if args.task and not args.task.replace("_", "").isdigit():
        return f"--task: {args.task!r} is not a job ref (<array>_<task>) or a task index"
    if args.worker_id and (queue.LEASE_SEP in args.worker_id or "/" in args.worker_id):
        return f"--worker-id: {args.worker_id!r} must not contain '{queue.LEASE_SEP}' or '/'"
    return ""


def main(argv: list[str] | None = None) -> int:
    # first: a TERM before the handlers below kills a worker that holds nothing and has
    # announced nothing yet; a parent gone before the request is caught by
    # ``check_parent``'s first poll
    parent = os.getppid()
    parent_death.set_death_signal(signal.SIGTERM)
    args = build_parser().parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"dethpc worker: {problem}", file=sys.stderr)
        return 2
    ref = ref_from_env(os.environ)
    task = args.task or ("" if ref == "0" else ref)
    paths = queue.WorkerPoolPaths.of_run_dir(args.run_dir)
    presence = Presence(paths, task, args.heartbeat_s)
    flags = Flags()
    try:
        # the handlers before the file: from the file's first write on, a preemption
        # ends the worker here (85) and the finally removes the file (a signal's
        # default action would leave it to go stale)
        install_handlers(flags, args.preempt_signal)
        # announced before the preload (seconds of imports): the daemon reads a worker
        # Slurm says runs and that has no file as one that may have ended
        presence.beat()
        return _main(args, task, paths, presence, parent, flags)
    except StoppedEarly as stop:
        print(f"dethpc worker: SIG{stop} while starting: left before its first claim",
              file=sys.stderr)
        return LOCAL_REQUEUE_EXIT
    finally:
        presence.leave()


def _main(args: argparse.Namespace, task: str, paths: queue.WorkerPoolPaths,
          presence: Presence, parent: int, flags: Flags) -> int:
    modules, calls = forkserver.split_preload(
        [m.strip() for m in args.preload.split(",") if m.strip()])
    took, missing = forkserver.preload(modules)
    for name, why in missing.items():   # the trials import it themselves: no warm start
        print(f"dethpc worker: --preload: cannot import {name!r} ({why}); trials import "
              "it themselves", file=sys.stderr)
    s = Settings(paths=paths,
                 worker=args.worker_id or default_worker_id(),
                 heartbeat_s=args.heartbeat_s, poll_s=args.poll_s, max_idle_s=args.max_idle_s,
                 task=task,
                 spare_calls=tuple(c for c in calls if c.partition(":")[0] not in missing),
                 parent=parent, presence=presence)
    if took:
        print(f"dethpc worker {s.worker}: preloaded "
              + ", ".join(f"{k} {v:.2f} s" for k, v in took.items()), file=sys.stderr)
    flags.starting = False     # from here a signal is handled by the loop (``serve``)
    if flags.preempt:          # one that a library swallowed during the preload
        return LOCAL_REQUEUE_EXIT
    return serve(s, flags)
