"""Warm starts: a trial runs as a forked child of a worker that imported the heavy
modules once.

The worker imports the modules the pool config names (``preload``, e.g. ``torch``)
once; each trial is then ``os.fork()``-ed: the child starts its own session
(``setsid``: the worker signals the trial's whole process group), restores default
signal handlers, takes the trial's environment and working directory, redirects its
output to the trial's log, and runs the entrypoint in-process with ``runpy`` as
``python script.py ...`` or ``python -m module ...`` would. The trial is still its
own process (its own memory, exit code, crash); only the import cost is shared.
Any other entrypoint (a launcher, a shell script, a container) is ``exec``-ed in the
child: a fresh process, no warm start.

What must not happen before a fork (CUDA: a context does not survive it) can still be
paid before the trial arrives: a preload entry ``module:function`` (e.g.
``torch.cuda:init``) is called in a **spare**, the next trial's process forked ahead of
time (``prepare``), which runs it and then waits for its trial on a pipe (``hand``); the
worker forks the next spare as soon as a trial starts, so that initialisation overlaps
the running trial instead of delaying the next one. ``Spares`` keeps at most one.

A forked child (a trial, a spare) dies with the worker: it asks for SIGTERM when the
worker ends (``dethpc.common.parent_death``), so a worker SIGKILLed (its node's OOM
killer, a job end that reached it alone) leaves no trial training on unwatched and no
spare waiting forever in its call. TERM is what Slurm sends at a job's end: a trial on
``dethpc.core`` takes it as a preemption (checkpoint, then exit); its lease, no longer
heartbeated, expires and the trial resumes elsewhere from that checkpoint. A child whose
worker died before the request leaves at once, having run nothing.

Owns: ``preload``, ``python_entry`` (what can run warm), ``spawn`` (fork and run), the
spare (``prepare``, ``hand``, ``Spares``).
Must not: decide which trial runs, or touch the pool directory.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NoReturn

from dethpc.common import parent_death
from dethpc.common.jobenv import ENV_DETERMINED_ALIAS


class EntryKind(StrEnum):
    SCRIPT = "script"    # python path/to/script.py args...
    MODULE = "module"    # python -m package.module args...
    EXEC = "exec"        # anything else: a fresh process


@dataclass(frozen=True)
class Entry:
    kind: EntryKind
    target: str              # the script path or module name ("" for EXEC)
    args: tuple[str, ...]    # sys.argv[1:] of the trial


#: what a trial that uses a preloaded module imports at its first use of it, preloaded
#: with it. ``torch._dynamo``: every ``torch.optim`` optimizer imports it at its
#: construction (``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and
#: ``load_state_dict`` are wrapped in ``torch._disable_dynamo``, whose wrapper imports
#: ``torch._dynamo`` at its first call; ``step`` imports it too), whatever the trial does
#: and whatever ``TORCH_COMPILE_DISABLE`` says: 1.1-2.7 s of each trial's start on this
#: 2-core host (issue 47 item 3, bench/trial_start). Imported once here, a forked trial
#: finds it in ``sys.modules``: the very module it would import, so its results are the
#: same. (It starts no thread: a fork after it is safe.)
COMPANIONS: dict[str, tuple[str, ...]] = {"torch": ("torch._dynamo",)}
#: dethpc's own job side, which every trial that reports through dethpc imports
#: (stdlib-only, light, torch imported lazily): preloaded whenever anything is
JOB_SIDE = ("dethpc.core", "dethpc.pytorch")


def split_preload(entries: Sequence[str]) -> tuple[list[str], list[str]]:
    """A preload list -> (modules the worker imports, ``module:function`` calls a spare
    makes); a call's module is imported by the worker too (before the fork)."""
    modules: list[str] = []
    calls: list[str] = []
    for entry in entries:
        module, sep, _ = entry.partition(":")
        if sep:
            calls.append(entry)
        if module not in modules:
            modules.append(module)
    return modules, calls


def preload_list(modules: Sequence[str]) -> list[str]:
    """``modules`` with each one's ``COMPANIONS`` after it and ``JOB_SIDE`` at the end
    (none when ``modules`` is empty), each once."""
    names: list[str] = []
    for name in [*modules, *(JOB_SIDE if modules else ())]:
        for one in (name, *COMPANIONS.get(name, ())):
            if one not in names:
                names.append(one)
    return names


def preload(modules: Sequence[str], *, warm: bool = True
            ) -> tuple[dict[str, float], dict[str, str]]:
    """Import ``modules`` into this process: (seconds each took, why each one that
    could not be imported failed). A missing module is no error: the trials that need
    it import it themselves (a site default of ``torch`` on a job without torch).
    ``warm`` (the default) adds ``preload_list``'s companions and dethpc's job side;
    ``warm=False`` imports ``modules`` alone (bench/trial_start's before)."""
    took: dict[str, float] = {}
    missing: dict[str, str] = {}
    for name in preload_list(modules) if warm else modules:
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing[name] = str(exc)
            continue
        took[name] = time.perf_counter() - t0
    return took, missing


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return word == sys.executable or base in ("python", "python3") or (
        base.startswith("python3.") and base[len("python3."):].isdigit())


def python_entry(argv: Sequence[str]) -> Entry:
    """What ``argv`` runs: a script or module this interpreter can run warm, or EXEC.

    Only ``python [-u] script.py ...`` and ``python [-u] -m mod ...`` run warm; other
    interpreter flags would change the interpreter itself, so they run fresh."""
    if not argv or not _is_python(argv[0]):
        return Entry(EntryKind.EXEC, "", tuple(argv))
    rest = list(argv[1:])
    while rest and rest[0] == "-u":
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-m":
        return Entry(EntryKind.MODULE, rest[1], tuple(rest[2:]))
    if rest and not rest[0].startswith("-"):
        return Entry(EntryKind.SCRIPT, rest[0], tuple(rest[1:]))
    return Entry(EntryKind.EXEC, "", tuple(argv))


#: signals the worker handles; the child gets the defaults back
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)


def _detach(worker: int) -> None:
    """A forked child's first act: its own session (the worker signals its group), the
    default signal handlers back, then SIGTERM asked for when ``worker`` (the pid that
    forked it) ends; when it has ended already, the child leaves without running
    anything (nobody would hear of the run)."""
    os.setsid()
    for sig in HANDLED:
        signal.signal(sig, signal.SIG_DFL)
    # after the handlers: an early TERM must not run the worker's inherited handler here
    if not parent_death.die_with_parent(signal.SIGTERM, worker):
        _leave(0)


def _child(argv: Sequence[str], env: Mapping[str, str], cwd: str, log: Path,
           started_fd: int, *, worker: int = 0, detached: bool = False) -> int:
    """In the forked child of ``worker``: become the trial, run it, return its exit code."""
    if not detached:
        _detach(worker)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # whatever the worker's sys.stdout was (a capture, a pipe): the trial writes to the log
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives with the child
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    entry = python_entry(argv)
    if entry.kind is EntryKind.EXEC:
        os.close(started_fd)
        os.execvpe(argv[0], list(argv), dict(env))  # noqa: S606 - the trial itself
    import runpy

    try:
        os.write(started_fd, b"1")
    except OSError:     # the worker stopped waiting for it (a spare's slow call): no matter
        pass
    os.close(started_fd)
    # a warm child read PYTHONPATH long ago: the job-side `determined` alias joins its path
    alias = env.get(ENV_DETERMINED_ALIAS)
    if alias and alias not in sys.path:
        sys.path.insert(1, alias)
    try:
        if entry.kind is EntryKind.MODULE:
            sys.argv = [entry.target, *entry.args]
            sys.path[0] = cwd
            runpy.run_module(entry.target, run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(entry.target)
            sys.argv = [entry.target, *entry.args]
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # the trial's own failure: printed like python would
        traceback.print_exc()
        return 1
    return 0


def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: str, log: Path) -> tuple[int, float]:
    """Fork a trial; (its pid, seconds from fork until its code started running)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    worker = os.getpid()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_fd)
        code = 1
        try:
            code = _child(argv, env, cwd, log, write_fd, worker=worker)
        except BaseException:  # before the trial ran (a bad cwd, an unwritable log)
            traceback.print_exc()
        finally:
            _leave(code)
    os.close(write_fd)
    os.read(read_fd, 1)   # the child's code is about to run (or it exec'ed / died)
    started = time.perf_counter() - t0
    os.close(read_fd)
    return pid, started


def _leave(code: int) -> NoReturn:  # pragma: no cover - runs in a forked child
    """End a forked child: its output flushed, ``code`` as its exit status (a negative
    one as 1), without the parent's atexit handlers or buffers (``os._exit``)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


def call(entry: str) -> None:
    """Call ``module:function`` (the module imported if it was not)."""
    module, _, func = entry.partition(":")
    getattr(importlib.import_module(module), func)()


@dataclass
class Spare:
    """The next trial's process, forked ahead: it ran its calls and waits for its trial."""

    pid: int
    send_fd: int       # the trial (JSON: argv, env, cwd, log) goes here
    started_fd: int    # b"1" comes back when the trial's code is about to run


def prepare(calls: Sequence[str]) -> Spare:
    """Fork a spare: it detaches, makes ``calls`` (a failing one is printed on the
    worker's output, and the trial then pays it itself), then waits for ``hand``; it
    exits 0 without running anything when the worker closes the pipe (or dies)."""
    sys.stdout.flush()
    sys.stderr.flush()
    cmd_r, cmd_w = os.pipe()
    st_r, st_w = os.pipe()
    worker = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the spare
        os.close(cmd_w)
        os.close(st_r)
        code = 1
        try:
            _detach(worker)
            for entry in calls:
                try:
                    call(entry)
                except Exception:  # the trial initialises it itself
                    traceback.print_exc()
            chunks = []
            while chunk := os.read(cmd_r, 65536):
                chunks.append(chunk)
            os.close(cmd_r)
            if not chunks:       # dropped: no trial came
                code = 0
            else:
                t = json.loads(b"".join(chunks))
                code = _child(t["argv"], t["env"], t["cwd"], Path(t["log"]), st_w,
                              detached=True)
        except BaseException:
            traceback.print_exc()
        finally:
            _leave(code)
    os.close(cmd_r)
    os.close(st_w)
    return Spare(pid=pid, send_fd=cmd_w, started_fd=st_r)


#: how long ``hand`` waits for the trial's code to start: a spare still in its call (CUDA
#: initialising, or hung there) must not keep the worker from its heartbeats and its
#: kill checks; the run then goes on like any trial's
HAND_WAIT_S = 1.0


def hand(spare: Spare, argv: Sequence[str], env: Mapping[str, str], cwd: str,
         log: Path) -> tuple[int, float] | None:
    """Give ``spare`` its trial: (its pid, seconds until the trial's code started, at
    most about ``HAND_WAIT_S``), as ``spawn``; None when the spare was gone (its pipe
    broken): then nothing ran."""
    t0 = time.perf_counter()
    data = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd,
                       "log": str(log)}).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(spare.send_fd, view):]
    except BrokenPipeError:
        os.close(spare.send_fd)
        os.close(spare.started_fd)
        _reap(spare.pid)
        return None
    os.close(spare.send_fd)
    ready, _, _ = select.select([spare.started_fd], [], [], HAND_WAIT_S)
    if ready:   # the trial's code is about to run (or it exec'ed / died)
        os.read(spare.started_fd, 1)
    os.close(spare.started_fd)
    return spare.pid, time.perf_counter() - t0


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class Spares:
    """At most one spare, for a worker whose preload has calls (none without)."""

    def __init__(self, calls: Sequence[str]) -> None:
        self.calls = tuple(calls)
        self.spare: Spare | None = None

    def refill(self) -> None:
        """Fork the next spare now, if there is none (and calls to make)."""
        if self.calls and self.spare is None:
            self.spare = prepare(self.calls)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
              log: Path) -> tuple[int, float]:
        """Run a trial in the spare when there is one, else in a fresh fork; then fork
        the next spare (its calls overlap this trial)."""
        spare, self.spare = self.spare, None
        got = None if spare is None else hand(spare, argv, env, cwd, log)
        if got is None:
            got = spawn(argv, env, cwd, log)
        self.refill()
        return got

    def close(self) -> None:
        """Drop the spare (it exits without running anything) and reap it."""
        spare, self.spare = self.spare, None
        if spare is None:
            return
        os.close(spare.send_fd)
        os.close(spare.started_fd)
        for kill in (os.killpg, os.kill):    # its calls may be long: no waiting for them
            try:
                kill(spare.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap(spare.pid)
