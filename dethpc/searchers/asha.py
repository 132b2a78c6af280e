"""Adaptive ASHA: Determined's ``adaptive_asha`` searcher in two variants.

Owns: the bracket plan (how many brackets, rungs, trials and concurrency each
gets -- Determined's ``adaptive_asha.go`` formulas, as small pure functions),
the rung rules (Determined's ``asha_stopping.go`` stop rule; the ASHA paper's
promotion rule), each bracket's bookkeeping (``Bracket``: its rungs, queue and
running trials, snapshot form, next promotion), the rung view ``Searcher.rungs``
shows (``rung_keep``, ``describe_bracket``), ``AshaSearcher``, the state machine
that applies the rules, and
its ``SPEC``: the keys it owns (``mode``, ``divisor``, ``max_rungs``,
``bracket_rungs``, ``variant``; the mode and variant enums live in
``dethpc.config.model``).
Must not: do I/O, read the clock or use the global RNG; know about Slurm,
jobs or checkpoints (a ``Stop`` or ``Continue`` is only a request to the daemon).

Metrics are kept internally as "smaller is better" values (negated when
``smaller_is_better`` is false) so one ordering serves both directions. A trial
that exits early before reporting at its rung is recorded there with the worst
possible value (``EXITED``, Determined's ``math.MaxFloat64``); one that exited
``invalid_hp`` (``det.InvalidHP``) leaves every rung and is replaced by a new trial
in its bracket (Determined's ``trialExitedEarly``). The formulas and
every deviation from Determined are written up in ``docs/searchers.md``.
"""

from __future__ import annotations

import bisect
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from dethpc.common.errors import ConfigError, FieldError
from dethpc.common.exitcodes import TrialExit
from dethpc.config.model import AshaMode, AshaVariant, HParamTree, SearcherConfig
from dethpc.config.searcher_registry import SearcherSpec, enum_option, int_list_option, int_option
from dethpc.searchers import sampling
from dethpc.searchers.base import (
    Action,
    Continue,
    Create,
    Searcher,
    Shutdown,
    Stop,
    TrialRecord,
    TrialStatus,
    check_reason,
    exit_status,
    record_from_json,
    record_to_json,
    target_length,
)

#: the value recorded for a trial that left a rung without a metric (worst possible)
EXITED = sys.float_info.max


# ================================================================== bracket plan
def floor_log(x: int, base: int) -> int:
    """Largest k with ``base**k <= x`` (exact integer version of ``int(log(x)/log(base))``)."""
    k = 0
    while base ** (k + 1) <= x:
        k += 1
    return k


def clamp_max_rungs(max_rungs: int, max_length: int, max_trials: int, divisor: int) -> int:
    """Determined: ``min(max_rungs, int(log_d(max_length)) + 1, int(log_d(max_trials)) + 1)``."""
    return min(max_rungs, floor_log(max_length, divisor) + 1, floor_log(max_trials, divisor) + 1)


def mode_brackets(mode: AshaMode | str, max_rungs: int) -> list[int]:
    """Rungs per bracket for a mode: aggressive ``[R]``; standard ``(R-1)//2+1 .. R``;
    conservative ``1 .. R``."""
    match _member(AshaMode, mode):
        case AshaMode.AGGRESSIVE:
            return [max_rungs]
        case AshaMode.STANDARD:
            return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
        case AshaMode.CONSERVATIVE:
            return list(range(1, max_rungs + 1))
    raise ValueError(f"unknown adaptive mode {mode!r}; allowed: {_allowed(AshaMode)}")


def _member(enum: type[AshaMode] | type[AshaVariant], value: str) -> AshaMode | AshaVariant | None:
    """``enum(value)``, or None for a value outside it (a config built in code)."""
    try:
        return enum(value)
    except ValueError:
        return None


def _allowed(enum: type[AshaMode] | type[AshaVariant]) -> str:
    return ", ".join(member.value for member in enum)


def bracket_max_trials(max_trials: int, divisor: int, brackets: list[int]) -> list[int]:
    """Determined ``getBracketMaxTrials``: weight ``d**(n-1)/n`` per bracket,
    ``max(int(w/W*T), 1)`` trials each, the remainder to the first bracket."""
    weights = [divisor ** (n - 1) / n for n in brackets]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent(max_concurrent: int, divisor: int, trials: list[int]) -> list[int]:
    """Determined ``getBracketMaxConcurrentTrials``: ``max(C, B)`` split evenly, the
    remainder one each to the first brackets; ``C == 0``: ``max(trials[-1], d)`` each."""
    count = len(trials)
    if max_concurrent == 0:
        return [max(trials[-1], divisor)] * count
    c = max(max_concurrent, count)
    base, rem = divmod(c, count)
    return [base + (1 if i < rem else 0) for i in range(count)]


def rung_lengths(num_rungs: int, divisor: int, max_length: int) -> list[int]:
    """Determined ``makeRungs``: rung i needs ``max(int(L / d**(n-1-i)), 1)`` units."""
    return [max(max_length // divisor ** (num_rungs - 1 - i), 1) for i in range(num_rungs)]


@dataclass(frozen=True)
class BracketPlan:
    num_rungs: int
    max_trials: int
    max_concurrent: int
    lengths: tuple[int, ...]


def _bad(path: str, message: str) -> ConfigError:
    return ConfigError([FieldError(path, message)], source="experiment config")


def validate(config: SearcherConfig) -> None:
    """Raise ``ConfigError`` naming the field for any value ASHA cannot run with."""
    target_length(config)
    if config.max_trials < 1:
        raise _bad("searcher.max_trials", "must be >= 1")
    if config.divisor < 2:
        raise _bad("searcher.divisor", "must be >= 2")
    if config.max_rungs < 1:
        raise _bad("searcher.max_rungs", "must be >= 1")
    if config.max_concurrent_trials < 0:
        raise _bad("searcher.max_concurrent_trials", "must be >= 0 (0 = automatic)")
    if any(n < 1 for n in config.bracket_rungs):
        raise _bad("searcher.bracket_rungs", "every entry must be >= 1")
    if _member(AshaMode, config.mode) is None:
        raise _bad("searcher.mode", f"allowed: {_allowed(AshaMode)}")
    if _member(AshaVariant, config.variant) is None:
        raise _bad("searcher.variant", f"allowed: {_allowed(AshaVariant)}")


def plan_brackets(config: SearcherConfig) -> list[BracketPlan]:
    """The brackets of an ``adaptive_asha`` config, most rungs (most early stopping) first."""
    validate(config)
    length = target_length(config)
    rungs = list(config.bracket_rungs)
    if not rungs:
        top = clamp_max_rungs(config.max_rungs, length, config.max_trials, config.divisor)
        rungs = mode_brackets(config.mode, top)
    rungs.sort(reverse=True)
    trials = bracket_max_trials(config.max_trials, config.divisor, rungs)
    conc = bracket_max_concurrent(config.max_concurrent_trials, config.divisor, trials)
    return [BracketPlan(n, t, c, tuple(rung_lengths(n, config.divisor, length)))
            for n, t, c in zip(rungs, trials, conc, strict=True)]


def initial_concurrency(plan: BracketPlan, divisor: int) -> int:
    """Trials a bracket keeps alive (Determined ``initialTrials``)."""
    if plan.max_concurrent > 0:
        return min(plan.max_concurrent, plan.max_trials)
    return max(1, min(divisor ** (plan.num_rungs - 1), plan.max_trials))


# ===================================================================== rung rules
Entry = tuple[float, int]   # (value, request_id); smaller value is better


def insert_metric(rung: list[Entry], request_id: int, value: float) -> int:
    """Insert keeping ``rung`` sorted; a new value goes before equal ones (Determined's
    ``sort.Search(... >= metric)``). Returns the insert index (its rank, 0 = best)."""
    index = bisect.bisect_left([v for v, _ in rung], value)
    rung.insert(index, (value, request_id))
    return index


def keep_count(recorded: int, divisor: int) -> int:
    """Stopping rule: the best ``max(int(n / d), 1)`` of ``n`` recorded trials continue."""
    return max(int(recorded / divisor), 1)


def promotable(rung: list[Entry], promoted: set[int], divisor: int) -> list[int]:
    """Promotion rule (ASHA paper): unpromoted trials among the top ``int(n / d)``."""
    top = rung[: int(len(rung) / divisor)]
    return [rid for value, rid in top if rid not in promoted and value != EXITED]


# ================================================================ bracket state
@dataclass
class Bracket:
    plan: BracketPlan
    concurrency: int
    rungs: list[list[Entry]]
    promoted: list[set[int]]
    trial_rung: dict[int, int] = field(default_factory=dict)   # rung being trained toward
    reported: set[int] = field(default_factory=set)            # reported at trial_rung
    running: set[int] = field(default_factory=set)
    queue: list[int] = field(default_factory=list)              # promoted, not yet continued
    created: int = 0

    @classmethod
    def new(cls, plan: BracketPlan, divisor: int) -> Bracket:
        return cls(plan, initial_concurrency(plan, divisor),
                   [[] for _ in range(plan.num_rungs)], [set() for _ in range(plan.num_rungs)])

    def to_json(self) -> dict[str, Any]:
        return {"rungs": [[[v, r] for v, r in rung] for rung in self.rungs],
                "promoted": [sorted(p) for p in self.promoted],
                "trial_rung": sorted([k, v] for k, v in self.trial_rung.items()),
                "reported": sorted(self.reported), "running": sorted(self.running),
                "queue": list(self.queue), "created": self.created}

    def load(self, d: dict[str, Any]) -> None:
        self.rungs = [[(float(v), int(r)) for v, r in rung] for rung in d["rungs"]]
        self.promoted = [{int(x) for x in p} for p in d["promoted"]]
        self.trial_rung = {int(k): int(v) for k, v in d["trial_rung"]}
        self.reported = {int(x) for x in d["reported"]}
        self.running = {int(x) for x in d["running"]}
        self.queue = [int(x) for x in d["queue"]]
        self.created = int(d["created"])

    def done(self) -> bool:
        return self.created >= self.plan.max_trials and not self.running

    def next_promotion(self) -> int | None:
        """The queued trial with the highest rung whose job has exited (ties: first queued)."""
        ready = [rid for rid in self.queue if rid not in self.running]
        if not ready:
            return None
        return max(ready, key=lambda rid: (self.trial_rung[rid], -self.queue.index(rid)))

    def resume(self, rid: int) -> Continue:
        """Take queued ``rid`` one rung up: it trains on to that rung's length."""
        self.queue.remove(rid)
        r = self.trial_rung[rid] + 1
        self.trial_rung[rid] = r
        self.reported.discard(rid)
        self.running.add(rid)
        length = self.plan.lengths[r]
        return Continue(request_id=rid, length=length, validate_at=(length,))


# ================================================================== rung view
def rung_keep(recorded: int, divisor: int, variant: AshaVariant) -> int:
    """How many of a rung's ``recorded`` trials go on: the stopping rule's
    ``keep_count`` (0 for an empty rung); promotion: the top ``int(n / d)``."""
    if variant is AshaVariant.PROMOTION:
        return int(recorded / divisor)
    return keep_count(recorded, divisor) if recorded else 0


def describe_bracket(index: int, b: Bracket, divisor: int, variant: AshaVariant,
                     smaller_is_better: bool) -> dict[str, Any]:
    """One bracket as ``Searcher.rungs`` shows it: per rung its length, the metrics
    recorded there (user's sign; ``None`` for a trial that exited without one), how
    many go on and the cutoff value."""
    sign = 1.0 if smaller_is_better else -1.0
    rungs = []
    for r, rung in enumerate(b.rungs):
        keep = rung_keep(len(rung), divisor, variant)
        cutoff = rung[keep - 1][0] if 0 < keep <= len(rung) else None
        rungs.append({
            "length": b.plan.lengths[r],
            "metrics": [{"request_id": rid, "metric": None if v == EXITED else sign * v}
                        for v, rid in rung],
            "keep": keep,
            "cutoff": None if cutoff is None or cutoff == EXITED else sign * cutoff,
        })
    return {"bracket": index, "num_rungs": b.plan.num_rungs,
            "max_trials": b.plan.max_trials, "max_concurrent_trials": b.concurrency,
            "created": b.created, "rungs": rungs}


# ===================================================================== searcher
class AshaSearcher(Searcher):
    """Determined ``adaptive_asha``; ``config.variant`` picks stopping or promotion."""

    name = "adaptive_asha"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        self.config = config
        self.tree = hparams
        self.plans = plan_brackets(config)
        self.variant = AshaVariant(config.variant)
        self.divisor = config.divisor
        self.brackets = [Bracket.new(p, self.divisor) for p in self.plans]
        self.rng = random.Random(seed)
        self.next_id = 1
        self.owner: dict[int, int] = {}
        self.records: dict[int, TrialRecord] = {}
        self.shutdown_sent = False

    # ------------------------------------------------------------- protocol
    def initial(self) -> list[Action]:
        actions: list[Action] = []
        for index in range(len(self.brackets)):
            actions += self._fill(index)
        return actions + self._maybe_shutdown()

    def on_validation(self, request_id: int, metric: float, length: int) -> list[Action]:
        if request_id not in self.owner:
            return []
        self.records[request_id].metrics[int(length)] = float(metric)
        value = float(metric) if self.config.smaller_is_better else -float(metric)
        index = self.owner[request_id]
        if self.variant is AshaVariant.STOPPING:
            return self._stop_rule(index, request_id, value, int(length))
        self._report(index, request_id, value, int(length))
        return self._fill(index)

    def on_exited(self, request_id: int, reason: str) -> list[Action]:
        why = check_reason(reason)
        index = self.owner.get(request_id)
        if index is None or request_id not in self.brackets[index].running:
            return []
        self.brackets[index].running.discard(request_id)
        if why is TrialExit.INVALID_HP:
            self._drop(index, request_id)
        elif self.variant is AshaVariant.STOPPING:
            self._stopping_exit(index, request_id, why)
        else:
            self._promotion_exit(index, request_id, why)
        return self._fill(index) + self._maybe_shutdown()

    def progress(self) -> float:
        total = sum(p.max_trials for p in self.plans)
        closed = sum(b.created - len(b.running) for b in self.brackets)
        return 1.0 if self.shutdown_sent else min(1.0, closed / total)

    def trials(self) -> list[TrialRecord]:
        return [self.records[k] for k in sorted(self.records)]

    def rungs(self) -> list[dict[str, Any]]:
        return [describe_bracket(i, b, self.divisor, self.variant, self.config.smaller_is_better)
                for i, b in enumerate(self.brackets)]

    # ------------------------------------------------------------- stopping
    def _stop_rule(self, index: int, rid: int, value: float, length: int) -> list[Action]:
        """Determined ``stopRun``: walk up the rungs this report qualifies for."""
        b, rec = self.brackets[index], self.records[rid]
        if rec.status is not TrialStatus.ACTIVE:
            return []          # a stopped trial still reporting during its grace period
        r = b.trial_rung.get(rid, 0)
        while r < b.plan.num_rungs and length >= b.plan.lengths[r]:
            rank = insert_metric(b.rungs[r], rid, value)
            rec.rung = r
            b.trial_rung[rid] = r + 1
            if r == b.plan.num_rungs - 1:
                return []      # top rung: the trial completes on its own
            if rank >= keep_count(len(b.rungs[r]), self.divisor):
                rec.status = TrialStatus.STOPPED
                return [Stop(rid)]
            r += 1
        return []

    def _stopping_exit(self, index: int, rid: int, reason: TrialExit) -> None:
        b, rec = self.brackets[index], self.records[rid]
        if rec.status is not TrialStatus.ACTIVE:
            return
        r = b.trial_rung.get(rid, 0)
        if reason is not TrialExit.COMPLETED and r < b.plan.num_rungs:
            insert_metric(b.rungs[r], rid, EXITED)      # Determined trialExitedEarly
            b.trial_rung[rid] = r + 1
        rec.status = exit_status(reason)

    # ------------------------------------------------------------ promotion
    def _report(self, index: int, rid: int, value: float, length: int) -> None:
        b = self.brackets[index]
        r = b.trial_rung.get(rid, 0)
        if rid in b.reported or r >= b.plan.num_rungs or length < b.plan.lengths[r]:
            return
        b.reported.add(rid)
        self._record(index, rid, r, value)

    def _record(self, index: int, rid: int, r: int, value: float) -> None:
        """Put ``rid`` in rung ``r`` and queue whatever that makes promotable."""
        b = self.brackets[index]
        insert_metric(b.rungs[r], rid, value)
        self.records[rid].rung = r
        if r == b.plan.num_rungs - 1:
            return
        for pid in promotable(b.rungs[r], b.promoted[r], self.divisor):
            b.promoted[r].add(pid)
            if self.records[pid].status in (TrialStatus.ERRORED, TrialStatus.STOPPED):
                b.trial_rung[pid] = r + 1           # cannot resume: worst result one rung up
                self._record(index, pid, r + 1, EXITED)
            else:
                b.queue.append(pid)
                self.records[pid].status = TrialStatus.PROMOTED

    def _promotion_exit(self, index: int, rid: int, reason: TrialExit) -> None:
        b, rec = self.brackets[index], self.records[rid]
        r = b.trial_rung.get(rid, 0)
        if reason is TrialExit.COMPLETED and rid in b.reported:
            if r == b.plan.num_rungs - 1:
                rec.status = TrialStatus.COMPLETED
            return                                  # waits at its rung for a promotion
        if rid not in b.reported:                   # left without a metric: worst at its rung
            b.reported.add(rid)
            self._record(index, rid, r, EXITED)
        elif rid in b.queue:                        # promoted but gone: Determined records the
            b.queue.remove(rid)                     # worst result one rung up
            b.trial_rung[rid] = r + 1
            self._record(index, rid, r + 1, EXITED)
        rec.status = exit_status(reason)

    # ------------------------------------------------------------ invalid hp
    def _drop(self, index: int, rid: int) -> None:
        """Determined ``trialExitedEarly`` with ``InvalidHP``: the trial's metrics leave
        every rung, it no longer counts as created (a new trial with fresh hparams
        takes its place in the bracket, ``_fill``) and it cannot be promoted."""
        b = self.brackets[index]
        b.rungs = [[(v, r) for v, r in rung if r != rid] for rung in b.rungs]
        for promoted in b.promoted:
            promoted.discard(rid)
        b.queue = [r for r in b.queue if r != rid]
        b.reported.discard(rid)
        b.created -= 1
        self.records[rid].status = exit_status(TrialExit.INVALID_HP)

    # --------------------------------------------------------------- common
    def top_up(self) -> list[Action]:
        if not self.records:
            return []
        return [a for index in range(len(self.brackets)) for a in self._fill(index)]

    def _fill(self, index: int) -> list[Action]:
        b = self.brackets[index]
        actions: list[Action] = []
        while len(b.running) < b.concurrency:
            pid = b.next_promotion() if self.variant is AshaVariant.PROMOTION else None
            if pid is not None:
                actions.append(b.resume(pid))
            elif b.created < b.plan.max_trials:
                actions.append(self._create(index))
            else:
                break
        return actions

    def _create(self, index: int) -> Create:
        b = self.brackets[index]
        rid = self.next_id
        self.next_id += 1
        hp = sampling.sample(self.tree, self.rng)
        b.created += 1
        b.running.add(rid)
        b.trial_rung[rid] = 0
        self.owner[rid] = index
        self.records[rid] = TrialRecord(request_id=rid, hparams=hp, bracket=index)
        if self.variant is AshaVariant.STOPPING:
            return Create(rid, hp, b.plan.lengths[-1], validate_at=b.plan.lengths)
        return Create(rid, hp, b.plan.lengths[0], validate_at=(b.plan.lengths[0],))

    def _maybe_shutdown(self) -> list[Action]:
        if self.shutdown_sent or not all(b.done() for b in self.brackets):
            return []
        self.shutdown_sent = True
        for rec in self.records.values():
            if rec.status in (TrialStatus.ACTIVE, TrialStatus.PROMOTED):
                rec.status = TrialStatus.STOPPED    # waited at a rung, never promoted
        return [Shutdown()]

    # -------------------------------------------------------------- snapshot
    def snapshot(self) -> dict[str, Any]:
        return {
            "searcher": self.name, "variant": self.variant.value,
            "rng": sampling.rng_to_json(self.rng),
            "next_id": self.next_id,
            "owner": sorted([k, v] for k, v in self.owner.items()),
            "records": [record_to_json(self.records[k]) for k in sorted(self.records)],
            "brackets": [b.to_json() for b in self.brackets],
            "shutdown_sent": self.shutdown_sent,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("searcher") != self.name or snapshot.get("variant") != self.variant:
            raise ValueError("snapshot is not of this adaptive_asha variant")
        if len(snapshot["brackets"]) != len(self.brackets):
            raise ValueError("snapshot has a different bracket plan; was the config changed?")
        self.rng = sampling.rng_from_json(snapshot["rng"])
        self.next_id = int(snapshot["next_id"])
        self.owner = {int(k): int(v) for k, v in snapshot["owner"]}
        recs = [record_from_json(d) for d in snapshot["records"]]
        self.records = {r.request_id: r for r in recs}
        for b, d in zip(self.brackets, snapshot["brackets"], strict=True):
            b.load(d)
        self.shutdown_sent = bool(snapshot["shutdown_sent"])


_DEFAULTS = SearcherConfig(name=AshaSearcher.name, metric="")
SPEC = SearcherSpec(
    name=AshaSearcher.name,
    factory=AshaSearcher,
    options=(
        enum_option("mode", AshaMode, _DEFAULTS.mode),
        int_option("divisor", _DEFAULTS.divisor, minimum=2),
        int_option("max_rungs", _DEFAULTS.max_rungs, minimum=1),
        int_list_option("bracket_rungs", minimum=1),
        enum_option("variant", AshaVariant, _DEFAULTS.variant),
    ),
)
