"""The pool directory of one experiment and its lease protocol: the file protocol between
the daemon (which enqueues, expires and withdraws) and the pool's workers (which claim,
heartbeat and finish), in the bottom layer that both import.

Layout under ``<run_dir>/pool/``::

    work/<item>.json            a trial to run to a length (written by the daemon side)
    leases/<worker>--<item>.json  claimed by a worker; its mtime is the heartbeat
    returning/<item>.json       a lease being handed back (expired or preempted)
    results/<item>.json         how the run ended (written by the worker)
    drain                       no new work will come: idle workers exit
    retire/<task>               worker <task> (its job ref) exits after its current run
    alive/<task>                worker <task> runs; its mtime is the worker's heartbeat
    kill/<item>                 the worker holding <item> kills its trial now

Every state change is one ``os.rename`` (atomic on a local or shared POSIX disk): two
workers renaming the same ``work/<item>.json`` cannot both succeed, so exactly one
claims it. A lease is expired by renaming it away (``returning/``) before it is
re-queued, so a worker that comes back late finds its lease gone on its next
heartbeat and stops its trial. Item names are ``t<trial>-s<seq>``: a promotion or a
continuation of trial T is a new item with a higher ``seq``.

Owns: ``WorkerPoolPaths``, ``WorkItem``, ``Lease``, ``RunResult`` and the functions that
move items between states (enqueue, claim, heartbeat, finish, give_back, expire,
withdraw, kill, known), the pool's size (``retire``, ``retired``) and its workers'
presence (``announce``, ``leave``, ``present``: what lets the daemon ask Slurm about
them less often).
Must not: start processes, read the store, or decide what to enqueue.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dethpc.common.markers import replace_text

LEASE_SEP = "--"


def worker_id(ref: str, pid: int, host: str) -> str:
    """A worker's name in its leases: ``j<job ref>.<pid>`` in a job, ``<host>.<pid>``
    outside one (``ref`` "0")."""
    return f"{host}.{pid}" if ref == "0" else f"j{ref}.{pid}"


def job_of_worker(worker: str) -> str | None:
    """The job ref in a worker's name (``worker_id``); None for a worker outside a job."""
    if not worker.startswith("j") or "." not in worker:
        return None
    return worker[1:].rsplit(".", 1)[0] or None


@dataclass(frozen=True)
class WorkerPoolPaths:
    """The files of one experiment's pool (``<run_dir>/pool``)."""

    root: Path

    @classmethod
    def of_run_dir(cls, run_dir: Path) -> WorkerPoolPaths:
        return cls(Path(run_dir) / "pool")

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def leases(self) -> Path:
        return self.root / "leases"

    @property
    def returning(self) -> Path:
        return self.root / "returning"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def drain(self) -> Path:
        return self.root / "drain"

    @property
    def kill(self) -> Path:
        return self.root / "kill"

    @property
    def retire(self) -> Path:
        """``retire/<task>``: the worker whose job ref is ``<task>`` exits after its
        current run (the pool shrinks: ``set-concurrency``)."""
        return self.root / "retire"

    @property
    def alive(self) -> Path:
        """``alive/<task>``: worker ``<task>`` (its job ref) is running; the file's
        mtime is renewed every heartbeat while it runs and the file goes when it exits."""
        return self.root / "alive"

    def create(self) -> WorkerPoolPaths:
        for d in (self.work, self.leases, self.returning, self.results, self.retire):
            d.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class WorkItem:
    """Run trial ``trial_id`` (its ``seq``-th item) with this command and environment.

    ``argv``/``env``/``cwd`` are exactly what the trial's job script would run (the
    job contract's environment); ``attempt`` grows each time the item is handed back
    (``DETHPC_RUN_ID`` of the run)."""

    trial_id: int
    seq: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    trial_dir: str
    attempt: int = 0
    #: the daemon's name for this item (``dethpc.control.worker_pool_view.item_ref``): the
    #: ``job`` of its runs' exit records; "" outside a daemon (the worker's own job ref)
    ref: str = ""

    @property
    def name(self) -> str:
        return item_name(self.trial_id, self.seq)

    def to_json(self) -> str:
        # its fields as they are (``asdict`` deep-copied the environment first: a tenth
        # of a pool item's CPU on the daemon's side, issue 47 item 2); the same text
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WorkItem:
        raw = json.loads(text)
        return cls(trial_id=int(raw["trial_id"]), seq=int(raw["seq"]),
                   argv=[str(a) for a in raw["argv"]],
                   env={str(k): str(v) for k, v in raw["env"].items()},
                   cwd=str(raw["cwd"]), trial_dir=str(raw["trial_dir"]),
                   attempt=int(raw.get("attempt", 0)), ref=str(raw.get("ref", "")))


@dataclass(frozen=True)
class Lease:
    """A worker's claim on one item: the file whose mtime is the heartbeat."""

    worker: str
    item: WorkItem
    path: Path


@dataclass(frozen=True)
class RunResult:
    """How one run of an item ended (``results/<item>.json``)."""

    trial_id: int
    seq: int
    reason: str          # dethpc.common.exitcodes.ExitReason value
    code: int
    worker: str
    start_s: float       # fork to the child running user code (the warm start)
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        raw = json.loads(text)
        return cls(**raw)


def item_name(trial_id: int, seq: int) -> str:
    return f"t{trial_id}-s{seq}"


def enqueue(paths: WorkerPoolPaths, item: WorkItem) -> Path:
    """Make ``item`` claimable (atomically: a worker never reads half a file)."""
    target = paths.work / f"{item.name}.json"
    replace_text(target, item.to_json())
    return target


def _sort_key(name: str) -> tuple[int, int]:
    stem = name.removesuffix(".json")
    try:
        t, s = stem.split("-")
        return int(t[1:]), int(s[1:])
    except ValueError:
        return (1 << 62, 0)


def pending(paths: WorkerPoolPaths) -> list[str]:
    """Item names waiting in ``work/`` (oldest trial first)."""
    try:
        names = [n for n in os.listdir(paths.work) if n.endswith(".json")
                 and not n.startswith(".")]
    except FileNotFoundError:
        return []
    return sorted(names, key=_sort_key)


def claim(paths: WorkerPoolPaths, worker: str) -> Lease | None:
    """Take the first item nobody else took; None when ``work/`` is empty.

    The item is touched first (its mtime becomes the lease's first heartbeat; a
    rename keeps the mtime), then renamed into ``leases/``: one rename wins."""
    for name in pending(paths):
        src = paths.work / name
        dst = paths.leases / f"{worker}{LEASE_SEP}{name}"
        try:
            os.utime(src)
            os.rename(src, dst)
        except FileNotFoundError:
            continue      # another worker was first
        return Lease(worker=worker, item=WorkItem.from_json(dst.read_text()), path=dst)
    return None


def heartbeat(lease: Lease) -> bool:
    """Renew the lease; False when it is gone (expired and handed back: stop the run)."""
    try:
        os.utime(lease.path)
    except FileNotFoundError:
        return False
    return True


def finish(paths: WorkerPoolPaths, lease: Lease, result: RunResult) -> None:
    """Record the result, then drop the lease (a crash in between leaves a result
    and a lease; ``expire`` drops such a lease instead of re-queueing it)."""
    write_result(paths, result)
    try:
        os.unlink(lease.path)
    except FileNotFoundError:
        pass


def write_result(paths: WorkerPoolPaths, result: RunResult) -> None:
    replace_text(paths.results / f"{item_name(result.trial_id, result.seq)}.json",
                  result.to_json())


def _requeue_from(paths: WorkerPoolPaths, held: Path, item_file: str) -> WorkItem | None:
    """``held`` was renamed out of ``leases/`` by us: put it back in ``work/``."""
    if (paths.results / item_file).exists() or (paths.results / "taken" / item_file).exists():
        held.unlink(missing_ok=True)
        return None
    item = WorkItem.from_json(held.read_text())
    again = replace(item, attempt=item.attempt + 1)
    enqueue(paths, again)
    held.unlink(missing_ok=True)
    return again


def give_back(paths: WorkerPoolPaths, lease: Lease) -> WorkItem | None:
    """Hand a lease back at once (the run was preempted: any worker resumes it from
    its checkpoint). None when it was already taken away."""
    held = paths.returning / f"{lease.item.name}.json"
    try:
        os.rename(lease.path, held)
    except FileNotFoundError:
        return None
    return _requeue_from(paths, held, f"{lease.item.name}.json")


def expire(paths: WorkerPoolPaths, timeout_s: float, now: float | None = None, *,
           gone: Collection[str] = (), missed_s: float | None = None) -> list[WorkItem]:
    """Hand back every lease whose heartbeat is older than ``timeout_s`` (its worker's
    node died, or it hangs); also finishes hand-backs a crash left in ``returning/``.
    ``gone``: job refs that a poll taken this tick saw no longer running (requeued,
    pending again, ended): a lease of a worker of one of them (``job_of_worker``) whose
    heartbeat is older than ``missed_s`` goes back at once, not at ``timeout_s`` (the
    worker's node crashed and Slurm requeued its job; a live worker renews its lease
    every heartbeat and hands it back itself when it leaves)."""
    now = time.time() if now is None else now
    back: list[WorkItem] = []
    try:
        leases = os.listdir(paths.leases)
    except FileNotFoundError:
        leases = []
    for name in leases:
        if LEASE_SEP not in name or name.startswith("."):
            continue
        path = paths.leases / name
        worker, item_file = name.split(LEASE_SEP, 1)
        try:
            age = now - path.stat().st_mtime
            orphaned = missed_s is not None and age > missed_s and job_of_worker(worker) in gone
            if age <= timeout_s and not orphaned:
                continue
            held = paths.returning / item_file
            os.rename(path, held)
        except FileNotFoundError:
            continue
        again = _requeue_from(paths, held, item_file)
        if again is not None:
            back.append(again)
    for name in os.listdir(paths.returning) if paths.returning.exists() else []:
        if name.endswith(".json") and not name.startswith("."):
            again = _requeue_from(paths, paths.returning / name, name)
            if again is not None:
                back.append(again)
    return back


def take_results(paths: WorkerPoolPaths) -> list[RunResult]:
    """Results not yet taken, removed as they are read (the daemon side stores them)."""
    out: list[RunResult] = []
    try:
        names = sorted(n for n in os.listdir(paths.results)
                       if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return out
    for name in names:
        path = paths.results / name
        try:
            out.append(RunResult.from_json(path.read_text()))
        except FileNotFoundError:
            continue
        done = paths.results / "taken"
        done.mkdir(exist_ok=True)
        os.replace(path, done / name)
    return out


def active_leases(paths: WorkerPoolPaths) -> list[str]:
    try:
        return sorted(n for n in os.listdir(paths.leases) if LEASE_SEP in n)
    except FileNotFoundError:
        return []


def withdraw(paths: WorkerPoolPaths, trial_id: int) -> list[str]:
    """Take trial ``trial_id``'s unclaimed items out of ``work/`` (a searcher stop of
    a trial no worker runs yet); the names taken. A claimed item is not touched: its
    trial reads the ``stop`` file as in a job."""
    taken = []
    for name in pending(paths):
        if name.startswith(f"t{trial_id}-s"):
            try:
                os.unlink(paths.work / name)
            except FileNotFoundError:
                continue      # claimed meanwhile
            taken.append(name.removesuffix(".json"))
    return taken


def retire(paths: WorkerPoolPaths, tasks: Iterable[str], keep: Iterable[str] = ()) -> None:
    """Workers ``tasks`` (their job refs, ``<array>_<task>``) exit after their current
    run; workers ``keep`` no longer do (the pool grew back while they still live)."""
    paths.retire.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        (paths.retire / task).touch()
    for task in keep:
        (paths.retire / task).unlink(missing_ok=True)


def retired(paths: WorkerPoolPaths, task: str) -> bool:
    return bool(task) and (paths.retire / task).exists()


def announce(paths: WorkerPoolPaths, task: str) -> None:
    """Worker ``task`` runs: create ``alive/<task>`` or renew its mtime (its heartbeat,
    idle or busy). Best effort: a worker that cannot write it is polled as before."""
    if not task:
        return
    try:
        paths.alive.mkdir(exist_ok=True)
        (paths.alive / task).touch()
    except OSError:
        pass


def leave(paths: WorkerPoolPaths, task: str) -> None:
    """Worker ``task`` exits: its ``alive/<task>`` goes (a worker killed without its
    ``finally`` leaves it to go stale)."""
    if task:
        try:
            (paths.alive / task).unlink(missing_ok=True)
        except OSError:
            pass


def present(paths: WorkerPoolPaths, fresh_s: float, now: float | None = None) -> set[str]:
    """The workers (tasks) whose ``alive`` file was renewed within ``fresh_s`` of
    ``now``: one listdir and a stat each."""
    now = time.time() if now is None else now
    out: set[str] = set()
    try:
        entries = list(os.scandir(paths.alive))
    except OSError:
        return out
    for e in entries:
        try:
            if now - e.stat().st_mtime <= fresh_s:
                out.add(e.name)
        except OSError:
            continue
    return out


def kill(paths: WorkerPoolPaths, name: str) -> None:
    """Ask whichever worker holds item ``name`` to kill its trial now (a cancel or a stop
    past its grace): the worker records the run ``cancelled``."""
    paths.kill.mkdir(parents=True, exist_ok=True)
    (paths.kill / name).touch()


def killed(paths: WorkerPoolPaths, name: str) -> bool:
    return (paths.kill / name).exists()


def known(paths: WorkerPoolPaths, name: str) -> bool:
    """Item ``name`` was put in the queue once (waiting, held, being handed back, or
    ended): putting it again would run it twice."""
    file = f"{name}.json"
    if any((d / file).exists() for d in (paths.work, paths.returning, paths.results,
                                          paths.results / "taken")):
        return True
    return any(n.endswith(f"{LEASE_SEP}{file}") for n in active_leases(paths))
