"""What the peers-at-scale benchmark measures, and how (issue 48, item 6).

Owns the pure parts -- each table-tested in tests/unit/bench/test_peers_scale_metrics.py:

* ``target_loss``: the target, a fixed quantile (1%) of the recorded curves' final losses,
  computed from the curves alone, before any run (``TARGET_FILE`` stores it);
* ``gpu_hours``: GPU-hours allocated, from ``sacct -D -X`` (every run of a requeued job is
  a row of its own, so a requeued job's earlier runs count), per user;
* ``sdiag_users`` and ``RpcCounter``: slurmctld's RPC counts per user from ``sdiag``,
  sampled; a count that goes down means slurmctld restarted (its statistics start at 0)
  and the new count is all new RPCs, so the total over a restart is right to within the
  RPCs between the last sample and the restart; the peak per second is the largest
  increase between two samples over their interval;
* ``LoginCpu``: the login-side CPU seconds of the system under test: every process of the
  system's user outside a Slurm job (no ``SLURM_JOB_ID``), each root read with its live
  tree (its user+system+reaped children's, plus each live descendant's: a long-lived
  child such as dethpc's daemon under its supervisor counts while it runs), the largest
  reading of each root kept; the benchmark's own processes (driver, injector,
  sampler) run as other users and so are never in it; commands the runner runs and waits
  for are measured by their ``wait4`` rusage instead and left out of the sampling;
* ``time_to_target`` and ``regret_at``: from the work logs' validations, in seconds after
  the first sbatch; ``cell_summary``: a cell's figures over its seeds, an unreached seed
  counted at the timeout (never dropped), reached k/n beside;
* ``trial_fates``: the one rule for *lost*, *unfinished* and *decided* trials (the work
  log plus the system's own final per-trial record, ``Verdict``), and ``fate_figures``:
  a run's trials and GPU-hours lost/unfinished from it; ``thrown_figures``: a run's
  GPU-hours its cut runs threw away (``worklog.count_thrown``), done again or not.

The thin side (``sample_procs``, ``read_sdiag``, ``read_sacct``) runs the commands and
reads ``/proc``. Must not: submit, cancel or change anything.
"""

from __future__ import annotations

import enum
import json
import os
import re
import statistics
import subprocess
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peers_scale.emulator import ReplayCurve
from bench.peers_scale.worklog import EndReason, Thrown, TrialWork

TARGET_FILE = Path(__file__).resolve().parent / "target.json"
TARGET_QUANTILE = 0.01


# ------------------------------------------------------------------ the target
def target_loss(curves: Sequence[ReplayCurve], quantile: float = TARGET_QUANTILE) -> float:
    """The ``quantile`` of the curves' final losses (the lower index: the target is one
    some curve reaches), as bench/peers' ``cnn.target_loss``."""
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile: {quantile} must be in [0, 1]")
    if not curves:
        raise ValueError("no curves")
    finals = sorted(c.loss[-1] for c in curves)
    return finals[int(quantile * (len(finals) - 1))]


def best_loss(curves: Sequence[ReplayCurve]) -> float:
    """The best loss any validation can show (regret's zero)."""
    return min(min(c.loss) for c in curves)


def stored_target(path: Path = TARGET_FILE) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


# ------------------------------------------------------------------ GPU-hours
SACCT_FIELDS = ("JobIDRaw", "JobID", "User", "State", "Start", "ElapsedRaw", "AllocTRES")
_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")


def alloc_gpus(tres: str) -> int:
    m = _GPU.search(tres)
    return int(m.group(1)) if m else 0


def parse_sacct(text: str) -> list[dict[str, str]]:
    """Rows of ``sacct -n -P -X -D -o SACCT_FIELDS``."""
    return [dict(zip(SACCT_FIELDS, ln.split("|"), strict=False)) for ln in text.splitlines()
            if ln.count("|") == len(SACCT_FIELDS) - 1]


def gpu_hours(rows: Iterable[Mapping[str, str]]) -> dict[str, float]:
    """GPU-hours allocated per user: every row (every run) GPUs x elapsed."""
    out: dict[str, float] = {}
    for r in rows:
        elapsed = int(r["ElapsedRaw"]) if r["ElapsedRaw"].isdigit() else 0
        hours = alloc_gpus(r["AllocTRES"]) * elapsed / 3600.0
        out[r["User"]] = out.get(r["User"], 0.0) + hours
    return out


# ------------------------------------------------------------------ RPCs
_USER_LINE = re.compile(r"^\s*(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)")


def sdiag_users(text: str) -> dict[str, int]:
    """``sdiag``'s "Remote Procedure Call statistics by user": ``{user: count}``."""
    out: dict[str, int] = {}
    section = False
    for line in text.splitlines():
        if "statistics by user" in line:
            section = True
        elif section and (m := _USER_LINE.match(line)):
            out[m.group(1)] = int(m.group(3))
        elif section and "Pending RPC" in line:
            break
    return out


_TYPE_LINE = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def sdiag_types(text: str) -> dict[str, int]:
    """``sdiag``'s "Remote Procedure Call statistics by message type": ``{type: count}``
    (every user's)."""
    out: dict[str, int] = {}
    section = False
    for line in text.splitlines():
        if "statistics by message type" in line:
            section = True
        elif section and "statistics by user" in line:
            break
        elif section and (m := _TYPE_LINE.match(line)):
            out[m.group(1)] = int(m.group(2))
    return out


@dataclass
class RpcCounter:
    """Per-user RPC totals from successive ``sdiag`` samples (see the module doc)."""

    totals: dict[str, int] = field(default_factory=dict)
    peak_per_s: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    _last: dict[str, int] | None = None
    _last_t: float = 0.0

    def add(self, t: float, counts: Mapping[str, int]) -> None:
        if self._last is None:
            self._last, self._last_t = dict(counts), t
            return
        reset = any(counts.get(u, 0) < n for u, n in self._last.items())
        if reset:
            self.restarts += 1
        dt = max(t - self._last_t, 1e-9)
        for user, n in counts.items():
            delta = n if reset else n - self._last.get(user, 0)
            self.totals[user] = self.totals.get(user, 0) + delta
            if not reset:   # a restart's interval holds RPCs of two slurmctlds: no rate
                self.peak_per_s[user] = max(self.peak_per_s.get(user, 0.0), delta / dt)
        self._last, self._last_t = dict(counts), t


# ------------------------------------------------------------------ login CPU
@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    uid: int
    in_job: bool
    #: user + system + waited-for children's, seconds
    cpu_s: float


def parse_stat(text: str, ticks: int) -> tuple[int, float]:
    """``(ppid, utime + stime + cutime + cstime in seconds)`` of a /proc/<pid>/stat."""
    rest = text.rpartition(")")[2].split()
    return int(rest[1]), sum(int(f) for f in rest[11:15]) / ticks


@dataclass
class LoginCpu:
    """The login-side CPU of ``uid``'s processes (see the module doc); ``exclude``: pids
    (and their descendants) measured some other way.

    Each root (a counted process with no counted ancestor) is read with its whole live
    tree: its own reading (which holds the children it reaped) plus each live
    descendant's. A long-lived child is counted while it runs: dethpc's daemon is the
    child of its supervisor and is reaped only when it ends, so counting the root alone
    (before stop 59) left a daemon that was never killed out (0.03-0.05 s for a plain
    cell's whole dethpc login side). A process counted in a tree that becomes a root
    of its own (its parent died and it was reparented) counts from then on less what
    its tree had already given."""

    uid: int
    exclude: set[int] = field(default_factory=set)
    #: root pid -> the largest reading of its tree (less ``offset``)
    last: dict[int, float] = field(default_factory=dict)
    #: pid -> its subtree's last reading while it was counted inside another's tree
    inner: dict[int, float] = field(default_factory=dict)
    #: root pid -> what it had given to another's tree before it became a root
    offset: dict[int, float] = field(default_factory=dict)

    def add(self, procs: Mapping[int, Proc]) -> None:
        mine = {p.pid: p for p in procs.values() if p.uid == self.uid and not p.in_job
                and not self._under(p, procs, self.exclude)}
        kids: dict[int, list[int]] = {}
        roots = []
        for p in mine.values():
            above = self._counted_ancestor(p, procs, mine)
            if above is None:
                roots.append(p.pid)
            else:
                kids.setdefault(above, []).append(p.pid)

        def tree(pid: int) -> float:
            total = mine[pid].cpu_s + sum(tree(k) for k in kids.get(pid, []))
            if pid not in roots:
                self.inner[pid] = total
            return total

        for r in roots:
            total = tree(r)
            if r not in self.last and r in self.inner:
                self.offset[r] = self.inner.pop(r)
            self.last[r] = max(self.last.get(r, 0.0), total - self.offset.get(r, 0.0))

    @staticmethod
    def _counted_ancestor(p: Proc, procs: Mapping[int, Proc],
                          mine: Mapping[int, Proc]) -> int | None:
        """The nearest ancestor of ``p`` in ``mine`` (None: it has none, a root)."""
        seen = {p.pid}
        cur = p
        while cur.ppid not in mine:
            if cur.ppid not in procs or cur.ppid in seen:
                return None
            seen.add(cur.ppid)
            cur = procs[cur.ppid]
        return cur.ppid

    @staticmethod
    def _under(p: Proc, procs: Mapping[int, Proc], pids: set[int]) -> bool:
        seen: set[int] = set()
        cur = p
        while cur.pid not in seen:
            seen.add(cur.pid)
            if cur.pid in pids:
                return True
            if cur.ppid not in procs:
                return cur.ppid in pids
            cur = procs[cur.ppid]
        return False

    @property
    def seconds(self) -> float:
        return sum(self.last.values())


def sample_procs() -> dict[int, Proc]:
    """Every process of this machine (those that vanish while read are skipped)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            ppid, cpu = parse_stat(Path(f"/proc/{pid}/stat").read_text(), ticks)
            uid = os.stat(f"/proc/{pid}").st_uid
            env = Path(f"/proc/{pid}/environ").read_bytes() if uid != 0 else b""
        except (OSError, ValueError, IndexError):
            continue
        out[pid] = Proc(pid, ppid, uid, b"SLURM_JOB_ID=" in env, cpu)
    return out


def process_cpu(pid: int) -> float | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))[1]
    except (OSError, ValueError, IndexError):
        return None


def read_sdiag(env: Mapping[str, str]) -> dict[str, int]:
    return read_sdiag_full(env)[0]


def read_sdiag_full(env: Mapping[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """``sdiag``'s counts ``(by user, by message type)`` (the types: all users'); empty
    when it did not answer."""
    res = subprocess.run(["sdiag"], capture_output=True, text=True, env=dict(env),
                         check=False, timeout=30)
    if res.returncode != 0:
        return {}, {}
    return sdiag_users(res.stdout), sdiag_types(res.stdout)


def read_sacct(env: Mapping[str, str], since: str, user: str | None = None) -> list[dict[str, str]]:
    argv = ["sacct", "-n", "-P", "-X", "-D", "-S", since, "-o", ",".join(SACCT_FIELDS)]
    argv += ["-u", user] if user else ["-a"]
    res = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False,
                         timeout=60)
    return parse_sacct(res.stdout)


# ------------------------------------------------------------------ the search's figures
def validations(records: Iterable[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """``(wall, loss)`` of every validation of a work log, by time."""
    return sorted((float(r["wall"]), float(r["loss"])) for r in records
                  if r.get("event") == "validate")


def time_to_target(vals: Sequence[tuple[float, float]], target: float,
                   t0: float) -> float | None:
    """Seconds from ``t0`` to the first validation at or below ``target`` (None: never)."""
    for wall, loss in sorted(vals):
        if loss <= target:
            return wall - t0
    return None


def regret_at(vals: Sequence[tuple[float, float]], at_s: float, t0: float,
              best: float) -> float | None:
    """The best loss validated by ``t0 + at_s`` minus ``best`` (None: nothing yet)."""
    seen = [loss for wall, loss in vals if wall - t0 <= at_s]
    return min(seen) - best if seen else None


def regret_curve(vals: Sequence[tuple[float, float]], t0: float,
                 best: float) -> list[tuple[float, float]]:
    """``(seconds, regret)`` at every improvement of the best loss so far."""
    out: list[tuple[float, float]] = []
    for wall, loss in sorted(vals):
        if not out or loss - best < out[-1][1]:
            out.append((round(wall - t0, 2), loss - best))
    return out


def in_progress(records: Iterable[Mapping[str, Any]], ended: float,
                window_s: float) -> set[str]:
    """Trials still being worked on when the cell ended at ``ended``: no ``end`` record
    after their last start, and a record within ``window_s`` before ``ended`` (a step
    takes at most the slowest recorded step). At a timeout they are *unfinished*, not
    lost: the system had not failed them."""
    last: dict[str, tuple[float, bool]] = {}
    for r in records:
        trial, wall = str(r["trial"]), float(r["wall"])
        ended_run = r.get("event") == "end"
        if r.get("event") == "start" or trial not in last or wall >= last[trial][0]:
            last[trial] = (wall, ended_run)
    return {t for t, (wall, done) in last.items() if not done and wall >= ended - window_s}


class Fate(enum.Enum):
    """What became of one trial at the end of a cell (``trial_fates``)."""

    DECIDED = "decided"        # completed, stopped by the searcher, pruned
    UNFINISHED = "unfinished"  # running, waiting for a requeue/resume, in start-up
    LOST = "lost"              # the system will never run or decide it again unaided


class Verdict(enum.Enum):
    """A system's own final record of one trial (a runner's ``trial_verdicts``)."""

    DECIDED = "decided"    # dethpc COMPLETED/STOPPED, Optuna COMPLETE/PRUNED, Ray TERMINATED
    LIVE = "live"          # still the system's to run: queued, running, paused, retried
    GAVE_UP = "gave_up"    # failed for good: dethpc ERROR (max_restarts spent), Optuna FAIL
                           # with no retry, Ray ERROR


def trial_fates(work: Iterable[TrialWork], *, finished: bool, in_progress: Set[str],
                verdicts: Mapping[str, Verdict] | None = None) -> dict[str, Fate]:
    """Each logged trial's fate, by one rule (issue 48, item 6), first match wins:

    1. the log shows it decided (its last run ended completed/stopped): DECIDED;
    2. the system recorded it decided: DECIDED (a stop the searcher made counts though
       the process then died, e.g. in its checkpoint save; Optuna's PRUNED/COMPLETE);
    3. the system recorded that it gave up on it (dethpc ERROR: max_restarts spent;
       Optuna FAIL with no retry; Ray ERROR): LOST;
    4. the search had ended (``finished``) without deciding it: LOST -- nothing will run
       it again without a person (a restore, a new launch);
    5. the system holds it as still its own (LIVE: queued, running, waiting for a
       requeue or a retry): UNFINISHED;
    6. no verdict from the system (a runner that cannot say), at a cut: a trial still
       being worked on (``in_progress``), whose last run left to resume (``preempted``)
       or was killed (no ``end``: a requeue, a lease expiry or a retry runs it again) is
       UNFINISHED; one whose last run ended ``failed`` is LOST (no word from the system
       that it will retry it).
    """
    verdicts = verdicts or {}
    out: dict[str, Fate] = {}
    for t in work:
        v = verdicts.get(t.trial)
        if t.decided or v is Verdict.DECIDED:
            out[t.trial] = Fate.DECIDED
        elif v is Verdict.GAVE_UP or finished:
            out[t.trial] = Fate.LOST
        elif v is Verdict.LIVE or t.trial in in_progress \
                or t.last_end in (None, EndReason.PREEMPTED):
            out[t.trial] = Fate.UNFINISHED
        else:
            out[t.trial] = Fate.LOST
    return out


def parse_verdicts(facts: Mapping[str, Any]) -> dict[str, Verdict] | None:
    """The per-trial verdicts a runner put in its ``stop()`` facts (``"verdicts"``:
    ``{trial: "decided" | "live" | "gave_up"}``, keyed as the work log's trials); None
    when the runner gave none."""
    raw = facts.get("verdicts")
    if not isinstance(raw, Mapping):
        return None
    return {str(t): Verdict(v) for t, v in raw.items()}


def fate_figures(work: Sequence[TrialWork], fates: Mapping[str, Fate]) -> dict[str, Any]:
    """A run's ``trials_lost``/``trials_unfinished`` and the GPU-hours of steps not kept:
    ``gpu_hours_unfinished`` those of unfinished trials (they may yet be kept),
    ``gpu_hours_lost`` those of lost trials and the steps decided trials threw away.
    ``work`` should be counted with the system-decided trials as decided
    (``count_work(records, decided=...)``), so a trial killed after its stop keeps its
    last run's steps as useful."""
    def hours(fate: Fate) -> float:
        return round(sum(t.lost_s for t in work if fates.get(t.trial) is fate) / 3600, 5)

    by = {f: sum(fates.get(t.trial) is f for t in work) for f in Fate}
    return {"trials_lost": by[Fate.LOST], "trials_unfinished": by[Fate.UNFINISHED],
            "trials_decided_by_system": sum(t.decided_elsewhere for t in work),
            "gpu_hours_lost": round(hours(Fate.LOST) + hours(Fate.DECIDED), 5),
            "gpu_hours_unfinished": hours(Fate.UNFINISHED)}


def thrown_figures(thrown: Sequence[Thrown]) -> dict[str, Any]:
    """A run's work thrown away by cut runs (``worklog.count_thrown``): its GPU-hours
    (``gpu_hours_thrown``: whether done again or not, so a system that never resumed a
    killed trial shows it, where its ``gpu_hours_redone`` shows 0), the cut runs and of
    them those never run again."""
    return {"gpu_hours_thrown": round(sum(t.seconds for t in thrown) / 3600, 5),
            "runs_cut": sum(t.cut_runs for t in thrown),
            "runs_cut_never_resumed": sum(t.never_resumed for t in thrown)}


def _sum_or_none(runs: Sequence[Mapping[str, Any]], key: str, digits: int) -> float | None:
    """The sum of ``key`` over ``runs``; None when a run lacks it (written before it)."""
    xs: list[float] = []
    for r in runs:
        if r.get(key) is None:
            return None
        xs.append(float(r[key]))
    return round(sum(xs), digits)


def _quartiles(xs: Sequence[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (0.0, 0.0)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def cell_summary(runs: Sequence[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
    """A cell's figures over its seeds' runs (each a run's ``metrics``): medians and
    sums as the issue's item 8 names them; an unreached seed counts at ``timeout_s``."""
    if not runs:
        raise ValueError("a cell needs at least one run")
    ttt = [timeout_s if r["time_to_target_s"] is None else float(r["time_to_target_s"])
           for r in runs]
    lo, hi = _quartiles(ttt)

    def med(key: str) -> float | None:
        xs = [float(r[key]) for r in runs if r.get(key) is not None]
        return round(statistics.median(xs), 4) if xs else None

    return {"gpus": runs[0]["gpus"], "trials": runs[0]["trials"],
            "seeds": [r["seed"] for r in runs],
            "reached": f"{sum(r['time_to_target_s'] is not None for r in runs)}/{len(runs)}",
            "time_to_target_median_s": round(statistics.median(ttt), 1),
            "time_to_target_iqr_s": [round(lo, 1), round(hi, 1)],
            "timeout_s": timeout_s,
            "regret_at_fixed_median": med("regret_at_fixed"),
            "wall_until_decided_median_s": med("wall_s"),
            "trials_lost": sum(int(r["trials_lost"]) for r in runs),
            "trials_unfinished_at_timeout": sum(int(r.get("trials_unfinished", 0))
                                                for r in runs),
            "trials_decided_by_system": sum(int(r.get("trials_decided_by_system", 0))
                                            for r in runs),
            "gpu_hours_allocated": round(sum(float(r["gpu_hours_allocated"]) for r in runs), 4),
            "useful_pct_median": med("useful_pct"),
            "gpu_hours_redone": round(sum(float(r["gpu_hours_redone"]) for r in runs), 4),
            "gpu_hours_lost": round(sum(float(r["gpu_hours_lost"]) for r in runs), 4),
            "gpu_hours_unfinished": round(sum(float(r.get("gpu_hours_unfinished", 0.0))
                                              for r in runs), 4),
            "gpu_hours_executed": round(sum(float(r.get("gpu_hours_executed") or 0.0)
                                            for r in runs), 4),
            "gpu_hours_thrown": _sum_or_none(runs, "gpu_hours_thrown", 4),
            "runs_cut_never_resumed": None if (n := _sum_or_none(
                runs, "runs_cut_never_resumed", 0)) is None else int(n),
            "human_actions": sum(int(r["human_actions"]) for r in runs),
            "rpcs_median": med("rpcs"),
            "rpcs_per_trial": med("rpcs_per_trial"),
            "peak_rpcs_per_s": max(float(r["peak_rpcs_per_s"]) for r in runs),
            "login_cpu_s": med("login_cpu_s"),
            "slurmctld_cpu_s": med("slurmctld_cpu_s"),
            "faults_refused": sum(int(r.get("faults_refused", 0)) for r in runs),
            # preemptions whose wait the cell's end cut short: not refusals (faults.py)
            "faults_cut_short": sum(int(r.get("faults_cut_short", 0)) for r in runs),
            "faults_injected": sum(int(r.get("faults_injected", 0)) for r in runs),
            "faults_skipped": sum(int(r.get("faults_skipped", 0)) for r in runs)}


def fault_digest(runs: Sequence[Mapping[str, Any]], user: str) -> dict[str, list[dict[str, Any]]]:
    """Each fault event's outcome, per run (``<cell>-s<seed>``), without the squeue
    snapshots: kind, when, nodes, refused / cut short / skipped, what was done, a
    preemption's start and reservation (or why it did not start: ``diagnostics``), and
    how many of ``user``'s jobs ran on the hit nodes (``exposed``: the system's
    exposure)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        events = []
        for o in r.get("fault_outcomes") or []:
            e = {k: o[k] for k in ("kind", "at_s", "nodes", "refused", "cut_short",
                                   "skipped", "what", "took_s", "started_after_s",
                                   "reservation", "reservation_error", "diagnostics")
                 if k in o}
            e["system_jobs_exposed"] = sum(j.get("user") == user
                                           for j in o.get("exposed") or [])
            events.append(e)
        if events:
            out[f"{r['cell']}-s{r['metrics']['seed']}"] = events
    return out
