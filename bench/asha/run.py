"""ASHA (stopping and promotion variants) vs random search on replayed real learning curves.

Owns: a discrete-event simulation of K workers driving the *real* dethpc
searchers (``make_searcher``) over learning curves recorded by ``curves.py``
(``curves.json``: torch MLPs on digits; ``curves_cancer.json``: transformers on
breast cancer; ``curves_cnn.json``: CNNs on digits), each replayed at its measured
durations: training from length a to b costs the recorded ``train_seconds[b] -
train_seconds[a]``, each validation costs the recorded ``val_seconds``. A ``Stop``
frees the worker at the moment of the validation that caused it. Two execution modes (``--exec``):

* ``per-job``: every ``Create`` and every ``Continue`` (a promotion) is a new job:
  it pays ``queue_wait_s + job_start_s`` (a ``Continue`` also ``restore_s``);
* ``pool``: K workers start together at t=0 and each pays ``queue_wait_s +
  job_start_s`` once (the preload of torch is inside ``job_start_s``); then every
  item pays ``warm_start_s`` (a fork) and a ``Continue`` also ``restore_s``.

A job start is CPU work (python and ``import torch``). ``start_cores`` says how many
cores the starts of fresh jobs share: ``inf`` (the default, a real cluster: each job
on its own cores) charges every start ``job_start_s``; a finite number shares them
(processor sharing): ``n`` starts in progress each advance at ``min(1, cores / n)``
seconds of start per second, so K workers starting together on ``c < K`` cores are up
after ``job_start_s * K / c``. The dev cluster's 4 nodes share this machine's cores;
``costs.py --burst`` measures what that gives (``e2e.py`` uses it). ``submit_s``
delays everything (a daemon's boot and first tick before its first ``sbatch``);
``release_s`` is the time from a run's last validation until the searcher hears of its
exit (the trial's exit and the daemon seeing it); in per-job mode the slot is held until
then (the next job is submitted by the daemon), in pool mode the worker takes its next
queued item at once (a worker claims from the queue itself; with no item queued it
waits for the searcher's next decision, which comes after the release).

The costs default to the measured ones in ``bench/results/asha_pool_costs.json``
(``costs.py``). Worker utilisation = time workers hold an item / (K x the time the
searcher has work: from the workers' start to the last item handed out). Writes
``bench/results/asha.json``.
Must not: be imported by dethpc; use wall-clock time (the clock is simulated).

The searchers pick curves through a hyperparameter ``curve: int [0, N-1]``, so
with the same seed random search and ASHA draw the same curves in the same
order: the comparison is on identical candidate sets.

Run: ``python bench/asha/run.py`` (see ``--help`` and bench/asha/README.md).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dethpc.config.model import AshaVariant, HParamTree, IntHP, Length, SearcherConfig, Unit
from dethpc.searchers.base import Action, Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

HERE = Path(__file__).resolve().parent
#: the recorded curve sets (``curves.py --set NAME``) by name
CURVE_SETS = {"digits": HERE / "curves.json", "cancer": HERE / "curves_cancer.json",
              "cnn": HERE / "curves_cnn.json",
              # the same 128 CNNs trained 4x as long (8192 batches), recorded 2026-11-28
              "cnn-long": HERE / "curves_cnn_long.json"}


@dataclass
class Curve:
    lengths: list[int]
    loss: list[float]
    train_s: list[float]
    val_s: float

    def at(self, length: int) -> tuple[float, float]:
        """(validation loss, cumulative training seconds) after ``length`` units."""
        if length <= 0:
            return float("nan"), 0.0
        i = min(range(len(self.lengths)), key=lambda k: abs(self.lengths[k] - length))
        return self.loss[i], self.train_s[i]


COSTS = HERE.parent / "results" / "asha_pool_costs.json"
MODES = ("per-job", "pool")


@dataclass(frozen=True)
class Costs:
    """Seconds charged per start; see the module docstring for who pays what."""

    job_start_s: float
    warm_start_s: float = 0.0
    restore_s: float = 0.0
    queue_wait_s: float = 0.0
    #: cores the starts of fresh jobs share (processor sharing); inf: one job, own cores
    start_cores: float = math.inf
    #: from the search's start to the first submission (a daemon's boot and first tick)
    submit_s: float = 0.0
    #: from a run's last validation (or the one that stopped it) until its slot is free
    #: and the searcher knows it exited: the trial's exit, the job's end, the daemon
    #: seeing it
    release_s: float = 0.0


#: internal event kinds (in the ``length`` slot of an event; lengths are >= 1)
_START_DONE = -1          # the earliest start in progress may have finished (gen: epoch)
_QUEUED = -2              # a job's queue wait is over, its start begins (gen: generation)
_RELEASED = -3            # a run that ended has freed its slot (gen: generation)


def measured_costs(path: Path = COSTS, mode: str | None = None) -> Costs:
    """The simulation's defaults: the start costs measured by ``costs.py`` and, for an
    execution ``mode``, the daemon's latencies its real runs showed (``e2e.py``:
    ``submit_s``, ``release_s``; 0 where no such run was recorded)."""
    d = json.loads(path.read_text())["sim_defaults"]
    submit_s = release_s = 0.0
    e2e = path.parent / f"asha_pool_e2e_{mode}.json"
    if mode is not None and e2e.is_file():
        measured = json.loads(e2e.read_text())["costs"]
        submit_s = float(measured.get("submit_s", 0.0))
        release_s = float(measured.get("release_s", 0.0))
    return Costs(job_start_s=d["job_start_s"], warm_start_s=d["warm_start_s"],
                 restore_s=d["restore_s"], submit_s=submit_s, release_s=release_s)


@dataclass
class Sim:
    searcher: Searcher
    curves: list[Curve]
    workers: int
    costs: Costs
    period: int
    mode: str = "per-job"
    now: float = 0.0
    seq: int = 0
    events: list[tuple[float, int, int, int, int, bool]] = field(default_factory=list)
    queue: list[Create | Continue] = field(default_factory=list)
    #: rid -> the order of its Create: a pool hands out the oldest trial's item first
    #: (``dethpc.common.worker_queue.pending``), so a promotion goes ahead of newer trials
    created: dict[int, int] = field(default_factory=dict)
    busy: int = 0
    since: dict[int, float] = field(default_factory=dict)     # rid -> item handed out at
    generation: dict[int, int] = field(default_factory=dict)   # rid -> current job number
    curve_of: dict[int, int] = field(default_factory=dict)
    trained: dict[int, int] = field(default_factory=dict)
    best: float = float("inf")
    trajectory: list[tuple[float, float]] = field(default_factory=list)
    units: int = 0
    jobs: int = 0
    end: float = 0.0
    held_s: float = 0.0                      # item-seconds workers held
    ready: float = 0.0                       # when the workers (or slots) can start work
    last_dispatch: float = 0.0
    held: list[tuple[float, float]] = field(default_factory=list)
    # processor sharing of fresh-job starts (per-job mode, finite ``start_cores``)
    starting: dict[int, float] = field(default_factory=dict)   # rid -> start s left
    launches: dict[int, tuple[Create | Continue, float]] = field(default_factory=dict)
    ps_at: float = 0.0
    ps_epoch: int = 0
    ending: dict[int, str] = field(default_factory=dict)      # rid -> how its run ended

    def run(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.costs.start_cores > 0:
            raise ValueError(f"start_cores: {self.costs.start_cores!r} must be > 0")
        self.now = self.ready = self.ps_at = self.costs.submit_s
        if self.mode == "pool":
            # the K workers start together: on fewer cores than workers they share them
            share = max(1.0, self.workers / self.costs.start_cores)
            self.ready += self.costs.queue_wait_s + self.costs.job_start_s * share
            self.now = self.ready            # nothing happens before a worker is up
        self._take(self.searcher.initial())
        self._dispatch()
        while self.events:
            time, _, rid, gen, length, last = heapq.heappop(self.events)
            if length == _START_DONE:
                if gen == self.ps_epoch:
                    self.now = time
                    self._starts_done()
                continue
            if self.generation.get(rid) != gen:
                continue                                  # job was stopped earlier
            self.now = time
            if length == _QUEUED:
                self._begin_start(rid)
                continue
            if length == _RELEASED:
                self._release(rid)
                self._dispatch()
                continue
            self._validation(rid, length, last)
            self._dispatch()

    def _validation(self, rid: int, length: int, last: bool) -> None:
        self.units += length - self.trained[rid]
        self.trained[rid] = length
        loss, _ = self.curves[self.curve_of[rid]].at(length)
        if loss < self.best:
            self.best = loss
            self.trajectory.append((self.now, loss))
        out = self.searcher.on_validation(rid, loss, length)
        self._take([a for a in out if not isinstance(a, Stop)])
        if Stop(rid) in out:
            self._finish(rid, "stopped")
        elif last:
            self._finish(rid, "completed")

    def _finish(self, rid: int, reason: str) -> None:
        self.generation[rid] = gen = self.generation.get(rid, 0) + 1   # drop pending events
        self.ending[rid] = reason
        if self.mode == "pool":
            # a pool worker takes its next queued item itself at once; only the searcher
            # hears of the exit after the daemon's release latency
            self._free_worker(rid)
        if self.costs.release_s > 0:
            self.seq += 1
            heapq.heappush(self.events, (self.now + self.costs.release_s, self.seq, rid, gen,
                                         _RELEASED, False))
        else:
            self._release(rid)

    def _free_worker(self, rid: int) -> None:
        self.busy -= 1
        self.held.append((self.since.pop(rid), self.now))

    def _release(self, rid: int) -> None:
        if self.mode != "pool":
            self._free_worker(rid)      # per-job: the next job waits for the daemon
        self.end = self.now
        self._take(self.searcher.on_exited(rid, self.ending.pop(rid)))

    def _take(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, (Create, Continue)):
                self.created.setdefault(a.request_id, len(self.created))
                self.queue.append(a)
            elif isinstance(a, Shutdown):
                self.end = self.now

    def _dispatch(self) -> None:
        """Hand queued items to free workers: per-job in the order the searcher asked
        (the daemon submits them so), in a pool the oldest trial's item first (what a
        worker's ``claim`` takes: items sort by trial id, which follows the Creates)."""
        while self.queue and self.busy < self.workers:
            i = 0
            if self.mode == "pool":
                i = min(range(len(self.queue)),
                        key=lambda j: self.created[self.queue[j].request_id])
            self._start(self.queue.pop(i))

    def _start(self, action: Create | Continue) -> None:
        rid = action.request_id
        if isinstance(action, Create):
            self.curve_of[rid] = int(action.hparams["curve"])
            self.trained[rid] = 0
        self.busy += 1
        self.jobs += 1
        self.since[rid] = self.now
        self.last_dispatch = self.now
        gen = self.generation.setdefault(rid, 0)
        c = self.costs
        restore = c.restore_s if self.trained[rid] > 0 else 0.0
        if self.mode == "pool":
            self._schedule_run(rid, action, self.now + c.warm_start_s + restore)
        elif math.isinf(c.start_cores):
            self._schedule_run(rid, action,
                               self.now + c.queue_wait_s + c.job_start_s + restore)
        else:                                     # the start shares the cores
            self.launches[rid] = (action, restore)
            if c.queue_wait_s > 0:
                self.seq += 1
                heapq.heappush(self.events, (self.now + c.queue_wait_s, self.seq, rid, gen,
                                             _QUEUED, False))
            else:
                self._begin_start(rid)

    def _ps_advance(self) -> None:
        """Bring every start in progress to ``now`` (each at ``min(1, cores / n)``)."""
        if self.starting:
            rate = min(1.0, self.costs.start_cores / len(self.starting))
            done = (self.now - self.ps_at) * rate
            for r in self.starting:
                self.starting[r] -= done
        self.ps_at = self.now

    def _ps_schedule(self) -> None:
        """One event at the earliest finish of the starts in progress (older ones void)."""
        self.ps_epoch += 1
        if self.starting:
            rate = min(1.0, self.costs.start_cores / len(self.starting))
            left = max(0.0, min(self.starting.values()))
            self.seq += 1
            heapq.heappush(self.events, (self.now + left / rate, self.seq, -1,
                                         self.ps_epoch, _START_DONE, False))

    def _begin_start(self, rid: int) -> None:
        self._ps_advance()
        self.starting[rid] = self.costs.job_start_s
        self._ps_schedule()

    def _starts_done(self) -> None:
        self._ps_advance()
        for rid in [r for r, left in self.starting.items() if left <= 1e-9]:
            del self.starting[rid]
            action, restore = self.launches.pop(rid)
            self._schedule_run(rid, action, self.now + restore)
        self._ps_schedule()

    def _schedule_run(self, rid: int, action: Create | Continue, t0: float) -> None:
        """The run's validations, its user code starting at ``t0``."""
        gen = self.generation[rid]
        curve = self.curves[self.curve_of[rid]]
        start = self.trained[rid]
        points = {v for v in action.validate_at if start < v <= action.length}
        if self.period:
            periodic = range(self.period, action.length + 1, self.period)
            points |= {v for v in periodic if v > start}
        points.add(action.length)
        _, base_s = curve.at(start)
        for n, length in enumerate(sorted(points), start=1):
            _, train_s = curve.at(length)
            when = t0 + (train_s - base_s) + n * curve.val_s
            self.seq += 1
            heapq.heappush(self.events, (when, self.seq, rid, gen, length,
                                         length == action.length))


    def utilisation(self) -> float | None:
        """Item-seconds held / (K x [workers up, last item handed out])."""
        lo, hi = self.ready, self.last_dispatch
        if hi <= lo:
            return None
        held = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in self.held)
        return held / (self.workers * (hi - lo))


def time_to(trajectory: list[tuple[float, float]], target: float) -> float | None:
    for when, loss in trajectory:
        if loss <= target:
            return when
    return None


def simulate(config: SearcherConfig, curves: list[Curve], seed: int,
             args: argparse.Namespace, target: float) -> dict[str, Any]:
    tree: HParamTree = {"curve": IntHP(0, len(curves) - 1)}
    costs = Costs(job_start_s=args.job_start_s, warm_start_s=args.warm_start_s,
                  restore_s=args.restore_s, queue_wait_s=args.queue_wait_s,
                  start_cores=getattr(args, "start_cores", math.inf),
                  submit_s=getattr(args, "submit_s", 0.0),
                  release_s=getattr(args, "release_s", 0.0))
    sim = Sim(make_searcher(config, tree, seed), curves, args.workers, costs,
              args.validation_period, mode=args.exec)
    sim.run()
    reached = time_to(sim.trajectory, target)
    return {"time_to_target_s": reached,
            "time_to_target_after_ready_s": None if reached is None else reached - sim.ready,
            "total_time_s": sim.end,
            "first_validation_s": sim.trajectory[0][0] if sim.trajectory else None,
            "best_loss": sim.best, "units_trained": sim.units, "jobs_started": sim.jobs,
            "trials": len(sim.curve_of), "utilisation": sim.utilisation()}


def load(path: Path, time_scale: float = 1.0) -> tuple[dict[str, Any], list[Curve]]:
    """The curves of ``path``; ``time_scale`` multiplies their recorded training and
    validation seconds (a sensitivity: the same losses as if every batch took that many
    times longer, e.g. a bigger model; 1.0 = as recorded)."""
    if not time_scale > 0:
        raise ValueError(f"time_scale: {time_scale!r} must be > 0")
    raw = json.loads(path.read_text())
    curves = [Curve(c["lengths"], c["val_loss"], [t * time_scale for t in c["train_seconds"]],
                    c["val_seconds"] * time_scale)
              for c in raw["curves"]]
    return raw["meta"], curves


def configs(args: argparse.Namespace, max_length: int) -> dict[str, SearcherConfig]:
    common: dict[str, Any] = {"metric": "validation_loss",
                              "max_length": Length(Unit.BATCHES, max_length),
                              "max_trials": args.trials,
                              "max_concurrent_trials": getattr(args, "concurrency", None)
                              or args.workers}
    asha: dict[str, Any] = {"mode": args.mode, "divisor": args.divisor,
                            "max_rungs": args.max_rungs}
    return {
        "random": SearcherConfig(name="random", **common),
        "asha_stopping": SearcherConfig(name="adaptive_asha", variant=AshaVariant("stopping"),
                                        **common, **asha),
        "asha_promotion": SearcherConfig(name="adaptive_asha", variant=AshaVariant("promotion"),
                                         **common, **asha),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.fmean(v) if v else None


def _min(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return min(v) if v else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("asha_stopping", "asha_promotion"):
        tt = [_ratio(r["random"]["time_to_target_s"], r[name]["time_to_target_s"])
              for r in runs]
        tot = [_ratio(r["random"]["total_time_s"], r[name]["total_time_s"]) for r in runs]
        late = [x for x in (_ratio(r["random"]["time_to_target_after_ready_s"],
                                   r[name]["time_to_target_after_ready_s"]) for r in runs)
                if x is not None]
        both = [x for x in tt if x is not None]
        rnd = [r["random"]["time_to_target_s"] for r in runs]
        mine = [r[name]["time_to_target_s"] for r in runs]
        pairs = [(a, b) for a, b in zip(rnd, mine, strict=True)
                 if a is not None and b is not None]
        out[name] = {
            "speedup_time_to_target_mean": statistics.fmean(both) if both else None,
            "speedup_time_to_target_median": statistics.median(both) if both else None,
            "speedup_time_to_target_of_means": (
                statistics.fmean(a for a, _ in pairs) / statistics.fmean(b for _, b in pairs)
                if pairs else None),
            "speedup_after_ready_mean": statistics.fmean(late) if late else None,
            "speedup_after_ready_median": statistics.median(late) if late else None,
            "runs_reaching_target": sum(1 for x in mine if x is not None),
            "random_runs_reaching_target": sum(1 for x in rnd if x is not None),
            "speedup_total_time_mean": statistics.fmean(x for x in tot if x is not None),
            "units_ratio_mean": statistics.fmean(
                r["random"]["units_trained"] / r[name]["units_trained"] for r in runs),
            "best_loss_mean": statistics.fmean(r[name]["best_loss"] for r in runs),
            "random_best_loss_mean": statistics.fmean(r["random"]["best_loss"] for r in runs),
            "utilisation_mean": _mean(r[name]["utilisation"] for r in runs),
            "utilisation_min": _min(r[name]["utilisation"] for r in runs),
            "random_utilisation_mean": _mean(r["random"]["utilisation"] for r in runs),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="ASHA vs random search on replayed curves")
    ap.add_argument("--curves", type=Path, default=HERE / "curves.json")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "asha.json")
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=None,
                    help="the searchers' max_concurrent_trials (default: --workers); more "
                         "than --workers keeps items waiting for a free worker")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    measured = measured_costs()
    ap.add_argument("--exec", choices=MODES, default="per-job",
                    help="per-job: every trial start and promotion is a new job; pool: K "
                         "long-lived workers, each pays the job start once")
    ap.add_argument("--job-start-s", type=float, default=measured.job_start_s,
                    help="sbatch to user code with torch imported (default: measured, "
                         f"{COSTS.name})")
    ap.add_argument("--warm-start-s", type=float, default=measured.warm_start_s,
                    help="a pool worker's per-item start (fork; default: measured)")
    ap.add_argument("--restore-s", type=float, default=measured.restore_s,
                    help="checkpoint restore paid by every Continue (default: measured)")
    ap.add_argument("--queue-wait-s", type=float, default=0.0,
                    help="queue wait paid by every new job (pool: once per worker)")
    ap.add_argument("--submit-s", type=float, default=None,
                    help="the daemon's first sbatch after the search starts (default: "
                         "measured by e2e.py in this --exec mode)")
    ap.add_argument("--release-s", type=float, default=None,
                    help="a run's exit path: last validation until its slot is free "
                         "(default: measured by e2e.py in this --exec mode)")
    ap.add_argument("--start-cores", type=float, default=math.inf,
                    help="cores the starts of fresh jobs share (default inf: each job its "
                         "own; the dev cluster's nodes share this machine's: costs.py "
                         "--burst measures it)")
    ap.add_argument("--validation-period", type=int, default=None,
                    help="every searcher's trials also validate every N units (0: only "
                         "at the searcher's validate_at; default: max_length / 16); "
                         "best-so-far is tracked on these")
    ap.add_argument("--target-quantile", type=float, default=0.10,
                    help="target loss = this quantile of the final losses of all curves")
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="multiply the curves' recorded seconds (a sensitivity: trials "
                         "that many times longer, the same losses)")
    ap.add_argument("--mode", default="standard")
    ap.add_argument("--divisor", type=int, default=4)
    ap.add_argument("--max-rungs", type=int, default=5)
    args = ap.parse_args()
    latencies = measured_costs(mode=args.exec)
    if args.submit_s is None:
        args.submit_s = latencies.submit_s
    if args.release_s is None:
        args.release_s = latencies.release_s

    meta, curves = load(args.curves, args.time_scale)
    if args.validation_period is None:
        args.validation_period = meta["max_length"] // 16
    finals = sorted(c.loss[-1] for c in curves)
    target = finals[int(args.target_quantile * (len(finals) - 1))]
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        row: dict[str, Any] = {"seed": seed}
        for name, config in configs(args, meta["max_length"]).items():
            row[name] = simulate(config, curves, seed, args, target)
        runs.append(row)
    result = {
        "what": "time until the best validation loss seen reaches the target, ASHA vs random "
                "search, same trials, same workers, real curves replayed at measured durations",
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "curves_meta": meta,
        "n_curves": len(curves),
        "target_loss": target,
        "mean_trial_seconds_full_length": statistics.fmean(c.train_s[-1] for c in curves),
        "summary": summarize(runs),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    print(f"target loss {target:.4f}; wrote {args.out}")


if __name__ == "__main__":
    main()
