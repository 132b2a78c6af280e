"""The fault schedule every system of the peers-at-scale benchmark suffers, and its injector
(issue 48, item 4).

Owns: ``FaultPlan`` (how many faults of each kind, how long each lasts, the window of the
run they fall in, the least gap between two injections), ``fault_schedule`` -- a pure
function ``(seed, nodes, horizon_s, plan) -> [FaultEvent]`` in wall seconds from the
first sbatch, identical for every system: 2 node crashes each revived 120 s later, 3
preemptions of 2 nodes each held 180 s, one kill -9 of the system's login-side process,
one slurmctld restart; a node is never hit twice at once (a crashed node is not
preempted, two preemptions that overlap take different nodes), so that Slurm has no
reason to refuse an injection -- and ``FaultInjector``, which carries a schedule out on
the scale cluster from a thread: crashes and revivals through
``dethpc.devcluster.nodes`` (every process of the node SIGKILLed, then DOWN: a power
loss), preemptions as ``high``-partition jobs of ``dethpc-faults`` (no QoS limits) that
take every GPU of the node (``-w node --exclusive``), the slurmctld restart through
``dethpc.devcluster.faults.ClusterFaults``, the login kill through the system runner's
own ``kill_login`` (only it knows its process). A preemption first reserves its nodes
for ``dethpc-faults`` (``scontrol create reservation ... Flags=IGNORE_JOBS``, the hold
plus a margin) and submits into that reservation: the jobs running there are still
preempted through Slurm's preemption (requeued, PREEMPTED in sacct), but no new low job
starts on the nodes while the preemptors wait (2 of the first full run's 3 "refused":
g15's preemptor never started while backfill started array tasks there every ~13 s).
The reservation is deleted when the hold ends and at ``stop()``. Each event's outcome is
recorded (due and actual time, what was done, ``refused`` when Slurm refused it or it
did not take effect, ``cut_short`` when the cell ended while a preemption waited for its
jobs to start: not Slurm's refusal, counted apart; a preemptor that did not start
records why: ``diagnostics``, every job on its nodes and its own pending reason), with
its exposure: an ``squeue`` snapshot of every user's jobs just before it, and which of them
were on the nodes it hit.
Must not: decide anything from the system under test's progress (the schedule is wall
time from the first sbatch, the same for all), or run Slurm queries as the system's user.
"""

from __future__ import annotations

import enum
import math
import random
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dethpc.devcluster.profiles import FAULT_USER


class FaultKind(enum.Enum):
    CRASH = "node_crash"               # every process of the node killed, node DOWN
    REVIVE = "node_revive"             # its slurmd back, node RESUMEd
    PREEMPT = "preempt"                # high jobs take the nodes for ``hold_s``
    KILL_LOGIN = "kill_login"          # kill -9 of the system's login-side process
    CTLD_RESTART = "slurmctld_restart"  # slurmctld stopped and started again


@dataclass(frozen=True)
class FaultEvent:
    at_s: float
    kind: FaultKind
    nodes: tuple[str, ...] = ()
    #: how long the fault lasts (a crash until its revival, a preemption's hold)
    hold_s: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "kind": self.kind.value, "nodes": list(self.nodes),
                "hold_s": self.hold_s}


@dataclass(frozen=True)
class FaultPlan:
    crashes: int = 2
    crash_down_s: float = 120.0
    preemptions: int = 3
    preempt_nodes: int = 2
    preempt_hold_s: float = 180.0
    login_kills: int = 1
    ctld_restarts: int = 1
    #: the injections' starts fall in [start, end] x horizon
    window: tuple[float, float] = (0.05, 0.6)
    #: the least seconds between two injections (revivals included): one fault's
    #: effect is its own, and slurmctld is not restarted under a crash's bookkeeping
    min_gap_s: float = 15.0

    def __post_init__(self) -> None:
        counts = (self.crashes, self.preemptions, self.login_kills, self.ctld_restarts)
        if min(counts) < 0 or self.preempt_nodes < 1:
            raise ValueError("fault counts must be >= 0 and preempt_nodes >= 1")
        if not 0 <= self.window[0] < self.window[1] <= 1:
            raise ValueError(f"window: {self.window} must satisfy 0 <= start < end <= 1")
        if self.crash_down_s <= 0 or self.preempt_hold_s <= 0 or self.min_gap_s < 0:
            raise ValueError("crash_down_s and preempt_hold_s must be > 0, min_gap_s >= 0")

    @property
    def injections(self) -> int:
        return self.crashes + self.preemptions + self.login_kills + self.ctld_restarts


NO_FAULTS = FaultPlan(crashes=0, preemptions=0, login_kills=0, ctld_restarts=0)


def _times(rng: random.Random, n: int, lo: float, hi: float, gap: float,
           taken: list[float]) -> list[float]:
    """``n`` times in [lo, hi], each at least ``gap`` from the others and from ``taken``
    (drawn in order; a draw that fails 10,000 times means the window is too small)."""
    out: list[float] = []
    for _ in range(n):
        for _try in range(10_000):
            t = round(rng.uniform(lo, hi), 1)
            if all(abs(t - u) >= gap for u in (*taken, *out)):
                out.append(t)
                break
        else:
            raise ValueError(f"cannot place {n} faults {gap:.0f} s apart in "
                             f"[{lo:.0f}, {hi:.0f}] s: lengthen the horizon")
    return out


def _busy(events: list[FaultEvent], at: float, hold: float) -> set[str]:
    """Nodes under a crash or a preemption at any instant of [at, at + hold]."""
    busy: set[str] = set()
    for e in events:
        if e.kind in (FaultKind.CRASH, FaultKind.PREEMPT) \
                and e.at_s <= at + hold and at <= e.at_s + e.hold_s:
            busy.update(e.nodes)
    return busy


def fault_schedule(seed: int, nodes: Sequence[str], horizon_s: float,
                   plan: FaultPlan | None = None) -> list[FaultEvent]:
    """The faults of ``seed`` on ``nodes`` in seconds after the first sbatch, by time
    (see the module doc): the same for every system given the same arguments."""
    plan = plan or FaultPlan()
    if plan.injections == 0:
        return []
    if len(set(nodes)) != len(nodes) or not nodes:
        raise ValueError(f"nodes: {list(nodes)} must be distinct and not empty")
    rng = random.Random(f"peers_scale-faults-{seed}")
    lo, hi = plan.window[0] * horizon_s, plan.window[1] * horizon_s
    taken: list[float] = []
    events: list[FaultEvent] = []
    crash_t: list[float] = []
    for _ in range(plan.crashes):
        # the revivals are injections too: keep everything else clear of them
        for _try in range(10_000):
            t = _times(rng, 1, lo, hi, plan.min_gap_s, taken)[0]
            if all(abs(t + plan.crash_down_s - u) >= plan.min_gap_s for u in taken):
                break
        else:
            raise ValueError(f"cannot place {plan.crashes} crashes and their revivals "
                             f"{plan.min_gap_s:.0f} s apart: lengthen the horizon")
        crash_t.append(t)
        taken += [t, t + plan.crash_down_s]
    for t in crash_t:
        free = [n for n in nodes if n not in _busy(events, t, plan.crash_down_s)]
        if not free:
            raise ValueError(f"no node free to crash at {t} s: {len(nodes)} nodes")
        events.append(FaultEvent(t, FaultKind.CRASH, (rng.choice(free),), plan.crash_down_s))
    pre_t = _times(rng, plan.preemptions, lo, hi, plan.min_gap_s, taken)
    taken += pre_t
    for t in pre_t:
        free = [n for n in nodes if n not in _busy(events, t, plan.preempt_hold_s)]
        if len(free) < plan.preempt_nodes:
            raise ValueError(f"only {len(free)} nodes free to preempt at {t} s")
        events.append(FaultEvent(t, FaultKind.PREEMPT,
                                 tuple(sorted(rng.sample(free, plan.preempt_nodes),
                                              key=list(nodes).index)),
                                 plan.preempt_hold_s))
    kill_t = _times(rng, plan.login_kills, lo, hi, plan.min_gap_s, taken)
    taken += kill_t
    events += [FaultEvent(t, FaultKind.KILL_LOGIN) for t in kill_t]
    ctld_t = _times(rng, plan.ctld_restarts, lo, hi, plan.min_gap_s, taken)
    events += [FaultEvent(t, FaultKind.CTLD_RESTART) for t in ctld_t]
    events += [FaultEvent(round(e.at_s + e.hold_s, 1), FaultKind.REVIVE, e.nodes)
               for e in events if e.kind is FaultKind.CRASH]
    return sorted(events, key=lambda e: (e.at_s, e.kind.value))


# ------------------------------------------------------------------ the injector
SQUEUE_FORMAT = "%i|%u|%T|%N|%P|%j"


def parse_squeue(text: str) -> list[dict[str, str]]:
    """Rows of ``squeue -h -o SQUEUE_FORMAT``."""
    keys = ("job", "user", "state", "nodes", "partition", "name")
    return [dict(zip(keys, ln.split("|", 5), strict=False)) for ln in text.splitlines()
            if ln.count("|") >= 5]


def exposed(rows: list[dict[str, str]], nodes: Sequence[str],
            expand: Callable[[str], list[str]]) -> list[dict[str, str]]:
    """The running rows of ``rows`` that hold any of ``nodes`` (hostlists expanded)."""
    hit = set(nodes)
    return [r for r in rows if r["state"] == "RUNNING" and hit & set(expand(r["nodes"]))]


def as_user(user: str, argv: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *argv]


def as_fault_user(argv: list[str]) -> list[str]:
    return as_user(FAULT_USER, argv)


#: a preemption's reservation lasts its start wait, its preemptor's limit and this margin
RESV_MARGIN_S = 60.0
RESV_PREFIX = "peers-scale-preempt"


def reservation_name(t0: float, ev: FaultEvent) -> str:
    """One name per cell and event (a cell's t0 in whole seconds, the event's due time)."""
    return f"{RESV_PREFIX}-{int(t0)}-{int(round(ev.at_s * 10))}"


def preemptor_minutes(hold_s: float) -> int:
    """A preemptor's time limit: its hold, rounded down to minutes, plus 2."""
    return int(hold_s // 60) + 2


def reservation_argv(name: str, nodes: Sequence[str], hold_s: float,
                     start_timeout_s: float) -> list[str]:
    """``scontrol create reservation`` of ``nodes`` for the fault user, from now for the
    start wait + the preemptor's whole time limit + ``RESV_MARGIN_S`` (whole minutes,
    rounded up), so that it outlasts the preemptor (22.05 starts a job whose limit ends
    past its reservation's end anyway: measured, a 5 min job in a 1 min one).
    IGNORE_JOBS: the nodes are busy (that is the point); the jobs on them are preempted,
    not waited for. Run as root (an operator's command)."""
    minutes = preemptor_minutes(hold_s) + math.ceil((start_timeout_s + RESV_MARGIN_S) / 60)
    return ["scontrol", "create", "reservation", f"ReservationName={name}",
            f"Nodes={','.join(nodes)}", f"Users={FAULT_USER}", "StartTime=now",
            f"Duration={minutes}", "Flags=IGNORE_JOBS"]


def preemptor_argv(node: str, hold_s: float, reservation: str | None) -> list[str]:
    """The high job that takes every GPU of ``node`` for ``hold_s`` (as the fault user)."""
    return ["sbatch", "--parsable", "-p", "high", "-w", node, "--exclusive",
            *([f"--reservation={reservation}"] if reservation else []),
            "-t", str(preemptor_minutes(hold_s)), "-o", "/dev/null", "-J", "peers-scale-preemptor",
            "--wrap", f"sleep {hold_s:g}"]


class Verdict(enum.Enum):
    STARTED = "started"
    CUT_SHORT = "cut_short"    # the cell ended while the preemptors waited: not Slurm's
    REFUSED = "refused"        # sbatch refused one, or one did not start in time


def preempt_verdict(asked: int, submitted: int, running: int, stopped: bool) -> Verdict:
    """A preemption of ``asked`` nodes: ``submitted`` preemptors accepted by sbatch,
    ``running`` of them RUNNING when the wait ended, ``stopped`` if it ended because the
    cell did. An sbatch refusal is a refusal whenever the cell ended."""
    if submitted < asked:
        return Verdict.REFUSED
    if running >= submitted:
        return Verdict.STARTED
    return Verdict.CUT_SHORT if stopped else Verdict.REFUSED


#: the fields of ``scontrol show job -o`` a preemptor's diagnostics keep
JOB_FIELDS = ("JobId", "ArrayJobId", "ArrayTaskId", "UserId", "Partition", "JobState",
              "Reason", "StartTime", "PreemptTime", "Restarts", "NodeList", "ReqNodeList",
              "Reservation")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z:/]+)=(\S*)")


def parse_show_jobs(text: str) -> list[dict[str, str]]:
    """Each line of ``scontrol show job -o``: the ``JOB_FIELDS`` it has (a value is the
    token up to the next space; the ones kept have no spaces)."""
    out = []
    for line in text.splitlines():
        fields = {k: v for k, v in _FIELD.findall(line) if k in JOB_FIELDS}
        if "JobId" in fields:
            out.append(fields)
    return out


def preempt_diagnostics(jobs: list[dict[str, str]], nodes: Sequence[str],
                        preemptors: Sequence[str],
                        expand: Callable[[str], list[str]]) -> dict[str, Any]:
    """Why a preemptor did not start: every job on ``nodes`` (running or held there) and
    each preemptor's state and pending reason."""
    hit = set(nodes)

    def on(j: dict[str, str]) -> bool:
        spec = j.get("NodeList", "")
        return bool(spec and spec != "(null)" and hit & set(expand(spec)))

    return {"preemptors": [j for j in jobs if j["JobId"] in set(preemptors)],
            "jobs_on_nodes": [j for j in jobs if on(j) and j["JobId"] not in set(preemptors)]}


@dataclass
class FaultInjector:
    """Carries ``events`` out from a thread, from ``t0`` (the epoch of the first sbatch).
    ``cluster`` is the scale cluster's ``DevCluster``; ``kill_login`` kills the system's
    login-side process and says what it killed (None: the system has none, said so)."""

    events: list[FaultEvent]
    cluster: Any
    kill_login: Callable[[], str | None]
    env: dict[str, str]
    say: Callable[[str], None] = lambda _m: None
    #: how long a preemption's high jobs may take to start before it counts as refused
    start_timeout_s: float = 60.0
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    #: called just before slurmctld goes down (the RPC sampler's last look)
    before_ctld_restart: Callable[[], None] = lambda: None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.t0 = 0.0
        self.crashed: set[str] = set()
        #: live preemption reservations -> their preemptor jobs (released at hold end/stop)
        self.reservations: dict[str, list[str]] = {}
        self._releases: list[threading.Thread] = []

    def start(self, t0: float) -> FaultInjector:
        self.t0 = t0
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        """Stop injecting; revive what is still down; the outcomes by due time."""
        self._stop.set()
        self._thread.join(timeout=60)
        for w in self._workers:
            w.join(timeout=300)
        for w in list(self._releases):      # woken by the stop: each releases its own
            w.join(timeout=120)
        for name in sorted(self.reservations):  # anything a release left behind
            self._release(name)
        for node in sorted(self.crashed):
            self._do(FaultEvent(round(time.time() - self.t0, 1), FaultKind.REVIVE, (node,)))
        done = {(o["due_s"], o["kind"]) for o in self.outcomes}
        for ev in self.events:      # the search ended before these were due: said, not hidden
            if (ev.at_s, ev.kind.value) not in done:
                self.outcomes.append({**ev.as_json(), "due_s": ev.at_s, "refused": False,
                                      "skipped": "the search ended before it was due"})
        return sorted(self.outcomes, key=lambda o: o["due_s"])

    def _run(self) -> None:
        for ev in self.events:
            if self._stop.wait(max(0.0, self.t0 + ev.at_s - time.time())):
                return
            # each injection in its own thread: a revival's wait does not delay the next
            w = threading.Thread(target=self._do, args=(ev,), daemon=True)
            w.start()
            self._workers.append(w)

    def _squeue(self) -> str:
        return subprocess.run(as_fault_user(["squeue", "-h", "-a", "-o", SQUEUE_FORMAT]),
                              capture_output=True, text=True, env=self.env, check=False,
                              timeout=60).stdout

    def _do(self, ev: FaultEvent) -> None:
        from dethpc.common.hostlist import expand_hostlist
        started = time.time()
        rows = parse_squeue(self._squeue())
        out: dict[str, Any] = {**ev.as_json(), "due_s": ev.at_s,
                               "started_s": round(started - self.t0, 1), "refused": False,
                               "running_jobs": sum(r["state"] == "RUNNING" for r in rows),
                               "squeue": rows}
        if ev.nodes:
            out["exposed"] = exposed(rows, ev.nodes, expand_hostlist)
        try:
            out["what"] = getattr(self, "_" + ev.kind.value)(ev, out)
        except Exception as exc:  # noqa: BLE001 - recorded: an injection that failed
            out["refused"], out["what"] = True, f"failed: {type(exc).__name__}: {exc}"[:2000]
        out["took_s"] = round(time.time() - started, 1)
        self.say(f"fault {ev.kind.value} {list(ev.nodes)} at {out['started_s']} s: "
                 f"{out['what']}{' (REFUSED)' if out['refused'] else ''}"
                 f"{' (CUT SHORT)' if out.get('cut_short') else ''}")
        with self._lock:
            self.outcomes.append(out)

    # the injections: each returns what it did; raising, or setting refused, counts it
    def _node_crash(self, ev: FaultEvent, out: dict[str, Any]) -> str:
        from dethpc.devcluster import nodes
        crash = nodes.crash_node(self.cluster, ev.nodes[0], reason="peers_scale: node crash")
        self.crashed.add(ev.nodes[0])
        return f"{ev.nodes[0]} crashed: {len(crash.killed)} processes killed"

    def _node_revive(self, ev: FaultEvent, out: dict[str, Any]) -> str:
        from dethpc.devcluster import nodes
        nodes.revive_node(self.cluster, ev.nodes[0])
        self.crashed.discard(ev.nodes[0])
        return f"{ev.nodes[0]} back"

    def _preempt(self, ev: FaultEvent, out: dict[str, Any]) -> str:
        from dethpc.common.hostlist import expand_hostlist
        resv = reservation_name(self.t0, ev)
        res = subprocess.run(reservation_argv(resv, ev.nodes, ev.hold_s, self.start_timeout_s),
                             capture_output=True, text=True, env=self.env, check=False,
                             timeout=60)
        name: str | None = None
        if res.returncode == 0:
            name = out["reservation"] = resv
            with self._lock:
                self.reservations[resv] = []
        else:   # said, and preempted as before (no reservation): not a refusal by itself
            out["reservation_error"] = (res.stderr or res.stdout).strip()[:300]
        submitted = time.time()
        jobs = []
        for node in ev.nodes:
            res = subprocess.run(as_fault_user(preemptor_argv(node, ev.hold_s, name)),
                                 capture_output=True, text=True, env=self.env, check=False,
                                 timeout=60, cwd="/tmp")
            if res.returncode != 0:
                jobs.append(f"refused: {res.stderr.strip()[:300]}")
            else:
                jobs.append(res.stdout.strip().split(";")[0])
        out["preemptor_jobs"] = jobs
        ids = [j for j in jobs if j.isdigit()]
        if name is not None:
            with self._lock:
                self.reservations[name] = ids
        deadline = submitted + self.start_timeout_s
        running: set[str] = set()
        stopped = False
        while ids and len(running) < len(ids):
            res = subprocess.run(as_fault_user(["squeue", "-h", "-j", ",".join(ids), "-o",
                                                "%i %T"]), capture_output=True, text=True,
                                 env=self.env, check=False, timeout=60)
            running = {ln.split()[0] for ln in res.stdout.splitlines()
                       if ln.endswith(" RUNNING")}
            if len(running) >= len(ids) or time.time() >= deadline:
                break
            if self._stop.wait(0.5):
                stopped = True
                break
        waited = round(time.time() - submitted, 1)
        verdict = preempt_verdict(len(ev.nodes), len(ids), len(running), stopped)
        if verdict is Verdict.STARTED:
            out["started_after_s"] = waited
            what = f"high jobs {jobs} running on {list(ev.nodes)} for {ev.hold_s:g} s"
        else:   # read while the preemptors still wait, before any release cancels them
            out["diagnostics"] = self._diagnostics(ev.nodes, ids, expand_hostlist)
            if verdict is Verdict.CUT_SHORT:
                out["cut_short"] = True
                what = f"high jobs {jobs}: cut short {waited:g} s into the wait (the " \
                       f"cell ended), {sorted(running)} running by then"
            else:
                out["refused"] = True
                what = f"high jobs {jobs}: only {sorted(running)} started within " \
                       f"{self.start_timeout_s:.0f} s"
        if name is not None:
            self._releases.append(self._hold_then_release(name, ev.hold_s))
        return what

    def _diagnostics(self, nodes: Sequence[str], ids: list[str],
                     expand: Callable[[str], list[str]]) -> dict[str, Any]:
        res = subprocess.run(as_fault_user(["scontrol", "show", "job", "-o"]),
                             capture_output=True, text=True, env=self.env, check=False,
                             timeout=60)
        return preempt_diagnostics(parse_show_jobs(res.stdout), nodes, ids, expand)

    def _hold_then_release(self, name: str, hold_s: float) -> threading.Thread:
        """A thread that releases ``name`` when the hold ends (or at once at the stop)."""
        def wait_then_release() -> None:
            self._stop.wait(hold_s + 5.0)
            self._release(name)
        t = threading.Thread(target=wait_then_release, daemon=True)
        t.start()
        return t

    def _release(self, name: str) -> None:
        """End the reservation ``name``: its preemptors cancelled (done by now at a hold's
        end; still held or pending at a stop), then deleted, retried while Slurm says it is
        busy (a cancelled job is not finished at once). Its Duration ends it regardless."""
        with self._lock:
            ids = self.reservations.pop(name, None)
        if ids is None:
            return
        if ids:
            subprocess.run(as_fault_user(["scancel", *ids]), capture_output=True, text=True,
                           env=self.env, check=False, timeout=60)
        for _ in range(60):
            res = subprocess.run(["scontrol", "delete", f"ReservationName={name}"],
                                 capture_output=True, text=True, env=self.env, check=False,
                                 timeout=60)
            gone = "not found" in (res.stderr + res.stdout).lower() or \
                "invalid reservation" in (res.stderr + res.stdout).lower()
            if res.returncode == 0 or gone:
                return
            time.sleep(0.5)

    def _kill_login(self, ev: FaultEvent, out: dict[str, Any]) -> str:
        what = self.kill_login()
        out["login_process"] = what
        return what or "the system has no login-side process (nothing to kill)"

    def _slurmctld_restart(self, ev: FaultEvent, out: dict[str, Any]) -> str:
        from dethpc.devcluster.faults import ClusterFaults
        self.before_ctld_restart()
        timing = ClusterFaults(self.cluster, timeout=120.0).restart_slurmctld()
        return f"slurmctld restarted: stopped in {timing.stop_s:.1f} s, answering and " \
               f"nodes registered {timing.start_s:.1f} s later"


def refused_count(outcomes: list[dict[str, Any]]) -> int:
    return sum(bool(o.get("refused")) for o in outcomes)


def cut_short_count(outcomes: list[dict[str, Any]]) -> int:
    """Preemptions whose wait the cell's end cut short (not refusals: ``refused_count``)."""
    return sum(bool(o.get("cut_short")) for o in outcomes)
