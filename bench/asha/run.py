"""ASHA (stopping and promotion variants) vs random search on replayed real learning curves.

Owns: a discrete-event simulation of K workers driving the *real* dethpc
searchers (``make_searcher``) over learning curves recorded by ``curves.py``
(``curves.json``: torch MLPs on digits; ``curves_cancer.json``: transformers on
breast cancer), each replayed at its measured durations: training from length a
to b costs the recorded ``train_seconds[b] - train_seconds[a]``, each validation
costs the recorded ``val_seconds``. A ``Stop`` frees the worker at the moment of
the validation that caused it. Two execution modes (``--exec``):

* ``per-job``: every ``Create`` and every ``Continue`` (a promotion) is a new job:
  it pays ``queue_wait_s + job_start_s`` (a ``Continue`` also ``restore_s``);
* ``pool``: K workers start together at t=0 and each pays ``queue_wait_s +
  job_start_s`` once (the preload of torch is inside ``job_start_s``); then every
  item pays ``warm_start_s`` (a fork) and a ``Continue`` also ``restore_s``.

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
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dethpc.config.model import AshaVariant, HParamTree, IntHP, Length, SearcherConfig, Unit
from dethpc.searchers.base import Action, Continue, Create, Searcher, Shutdown, Stop
from dethpc.searchers.factory import make_searcher

HERE = Path(__file__).resolve().parent


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


def measured_costs(path: Path = COSTS) -> Costs:
    """The simulation's defaults: the costs measured by ``costs.py``."""
    d = json.loads(path.read_text())["sim_defaults"]
    return Costs(job_start_s=d["job_start_s"], warm_start_s=d["warm_start_s"],
                 restore_s=d["restore_s"])


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

    def run(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode == "pool":
            self.ready = self.costs.queue_wait_s + self.costs.job_start_s
            self.now = self.ready            # nothing happens before a worker is up
        self._take(self.searcher.initial())
        self._dispatch()
        while self.events:
            time, _, rid, gen, length, last = heapq.heappop(self.events)
            if self.generation.get(rid) != gen:
                continue                                  # job was stopped earlier
            self.now = time
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
        self.generation[rid] = self.generation.get(rid, 0) + 1    # drop pending events
        self.busy -= 1
        self.held.append((self.since.pop(rid), self.now))
        self.end = self.now
        self._take(self.searcher.on_exited(rid, reason))

    def _take(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, (Create, Continue)):
                self.queue.append(a)
            elif isinstance(a, Shutdown):
                self.end = self.now

    def _dispatch(self) -> None:
        while self.queue and self.busy < self.workers:
            self._start(self.queue.pop(0))

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
        curve = self.curves[self.curve_of[rid]]
        start = self.trained[rid]
        c = self.costs
        cost = c.restore_s if start > 0 else 0.0
        cost += c.warm_start_s if self.mode == "pool" else c.queue_wait_s + c.job_start_s
        points = {v for v in action.validate_at if start < v <= action.length}
        if self.period:
            periodic = range(self.period, action.length + 1, self.period)
            points |= {v for v in periodic if v > start}
        points.add(action.length)
        t0 = self.now + cost
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
                  restore_s=args.restore_s, queue_wait_s=args.queue_wait_s)
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


def load(path: Path) -> tuple[dict[str, Any], list[Curve]]:
    raw = json.loads(path.read_text())
    curves = [Curve(c["lengths"], c["val_loss"], c["train_seconds"], c["val_seconds"])
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
    ap.add_argument("--validation-period", type=int, default=None,
                    help="every searcher's trials also validate every N units (0: only "
                         "at the searcher's validate_at; default: max_length / 16); "
                         "best-so-far is tracked on these")
    ap.add_argument("--target-quantile", type=float, default=0.10,
                    help="target loss = this quantile of the final losses of all curves")
    ap.add_argument("--mode", default="standard")
    ap.add_argument("--divisor", type=int, default=4)
    ap.add_argument("--max-rungs", type=int, default=5)
    args = ap.parse_args()

    meta, curves = load(args.curves)
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
