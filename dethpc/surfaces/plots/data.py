"""What ``dethpc experiment plot`` draws, gathered from the store as plain dataclasses.

Owns: reading one experiment's trials, their validation metrics (the searcher's metric)
and the searcher's rungs (its stored snapshot restored into a fresh searcher, as
``experiment describe`` does), and the pure choices made on them: which trials are the
best (``top_trials``), one point per step of a curve (``dedupe_steps``), where each trial
left a rung (``rung_outcome``) and how each hyperparameter is laid out (``axis_kind``).
Must not: import matplotlib, or change state (``dethpc.surfaces.plots.draw`` draws).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlmodel import select

from dethpc.common.errors import NotFoundError
from dethpc.common.jsonlines import metric_value
from dethpc.common.kinds import MetricKind
from dethpc.config.model import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HParam,
    HParamTree,
    IntHP,
    LogHP,
)
from dethpc.searchers.base import TrialStatus
from dethpc.store import Store
from dethpc.store.models import Experiment, Metric, SearcherState, Trial
from dethpc.surfaces.layout import flat_hparams

#: how many of the best trials are highlighted and labelled
TOP = 5


class Outcome(StrEnum):
    """What became of a trial recorded at a rung."""

    #: went on past this rung (stopping variant: beat the cut-off; promotion: promoted)
    PROMOTED = "promoted"
    #: stopped here by the searcher (or never promoted once the search ended)
    STOPPED = "stopped"
    #: recorded here, no decision yet (promotion variant: waiting for a promotion)
    WAITING = "waiting"
    #: left the rung without a metric, or errored
    EXITED = "exited"
    #: recorded at the bracket's last rung: trained to its full length
    TOP = "top"


class AxisKind(StrEnum):
    """How a hyperparameter is laid out against the metric."""

    LINEAR = "linear"
    LOG = "log"
    CATEGORICAL = "categorical"


@dataclass(frozen=True)
class Curve:
    """One trial's validation metric by step (one value per step, steps increasing)."""

    trial_id: int
    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class TrialPoint:
    """One trial: its state, best validation metric and flattened hyperparameters."""

    trial_id: int
    request_id: int
    state: str
    best: float | None
    hparams: Mapping[str, Any]


@dataclass(frozen=True)
class RungPoint:
    trial_id: int | None       # None: a request id with no trial row (not created yet)
    metric: float | None       # None: left the rung without a metric
    outcome: Outcome


@dataclass(frozen=True)
class Rung:
    index: int
    length: int
    keep: int
    cutoff: float | None       # the metric a trial had to beat to go on; None: none yet
    points: tuple[RungPoint, ...]


@dataclass(frozen=True)
class Bracket:
    index: int
    rungs: tuple[Rung, ...]


@dataclass(frozen=True)
class HParamAxis:
    name: str                  # dotted for nested hyperparameters
    kind: AxisKind
    categories: tuple[str, ...] = ()   # CATEGORICAL: the order of the categories


@dataclass(frozen=True)
class PlotData:
    experiment_id: int
    name: str
    searcher: str
    metric: str
    smaller_is_better: bool
    unit: str                  # the x axis of the curves and rungs: batches, epochs, ...
    trials: tuple[TrialPoint, ...]
    curves: tuple[Curve, ...]
    brackets: tuple[Bracket, ...]
    axes: tuple[HParamAxis, ...]
    top: tuple[int, ...]       # trial ids of the best trials, best first


# ------------------------------------------------------------------- pure choices
def top_trials(points: Iterable[TrialPoint], smaller_is_better: bool,
               n: int = TOP) -> tuple[int, ...]:
    """The ids of the ``n`` trials with the best ``best`` metric, best first (ties: the
    lower trial id first); trials without a metric are never among them."""
    scored = [p for p in points if p.best is not None]
    scored.sort(key=lambda p: ((p.best if smaller_is_better else -p.best)  # type: ignore[operator]
                               , p.trial_id))
    return tuple(p.trial_id for p in scored[:n])


def dedupe_steps(rows: Iterable[tuple[int, float, float]]) -> tuple[tuple[int, ...],
                                                                     tuple[float, ...]]:
    """``(steps, time, value)`` rows as one value per step, steps increasing; a step
    reported twice (a requeued run validating again) keeps the later report."""
    latest: dict[int, tuple[float, float]] = {}
    for steps, time, value in rows:
        if steps not in latest or time >= latest[steps][0]:
            latest[steps] = (time, value)
    ordered = sorted(latest)
    return tuple(ordered), tuple(latest[s][1] for s in ordered)


def rung_outcome(rung: int, num_rungs: int, reached: int, status: TrialStatus,
                 metric: float | None, variant: str) -> Outcome:
    """What became of a trial recorded at ``rung`` of a bracket of ``num_rungs`` rungs,
    given the highest rung it reached and the searcher's status of it (``TrialRecord``)
    and the ASHA variant."""
    if metric is None:
        return Outcome.EXITED
    if rung == num_rungs - 1:
        return Outcome.TOP
    if rung < reached or status == TrialStatus.PROMOTED:
        return Outcome.PROMOTED
    if status == TrialStatus.STOPPED:
        return Outcome.STOPPED
    if status == TrialStatus.ERRORED:
        return Outcome.EXITED
    if status == TrialStatus.COMPLETED:  # a trial that completed below the top rung
        return Outcome.STOPPED if variant == "promotion" else Outcome.PROMOTED
    # active: the stopping variant let it through the cut (it trains on); the promotion
    # variant has it wait at the rung for a promotion
    return Outcome.WAITING if variant == "promotion" else Outcome.PROMOTED


def flat_spec(tree: HParamTree, prefix: str = "") -> dict[str, HParam]:
    """The config's hyperparameter tree as dotted names (as ``flat_hparams``)."""
    out: dict[str, HParam] = {}
    for key, node in tree.items():
        if isinstance(node, dict):
            out.update(flat_spec(node, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = node
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def axis_kind(spec: HParam | None, values: Sequence[Any]) -> AxisKind | None:
    """How to lay out a hyperparameter with these values: None when there is nothing to
    show (a constant, or a single value). A ``log`` hyperparameter gets a log axis,
    ``int``/``double`` a linear one, ``categorical`` categories; one the config does not
    declare (a detached job's) is numeric when every value is a number, else categorical."""
    distinct = {repr(v) for v in values}
    if isinstance(spec, ConstHP) or len(distinct) < 2:
        return None
    numeric = all(_number(v) for v in values)
    if isinstance(spec, LogHP):
        return AxisKind.LOG if numeric and all(v > 0 for v in values) else AxisKind.LINEAR
    if isinstance(spec, IntHP | DoubleHP):
        return AxisKind.LINEAR if numeric else AxisKind.CATEGORICAL
    if isinstance(spec, CategoricalHP):
        return AxisKind.CATEGORICAL
    return AxisKind.LINEAR if numeric else AxisKind.CATEGORICAL


def category_label(value: Any) -> str:
    """A category's label: the value as it reads in YAML-ish text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def hparam_axes(spec: Mapping[str, HParam], trials: Sequence[TrialPoint]) -> tuple[HParamAxis,
                                                                                   ...]:
    """One axis per hyperparameter that varies among the trials with a metric, in the
    config's order (then any undeclared names in the order first seen)."""
    scored = [t for t in trials if t.best is not None]
    names = list(spec) + [k for t in scored for k in t.hparams if k not in spec]
    axes: list[HParamAxis] = []
    for name in dict.fromkeys(names):
        values = [t.hparams[name] for t in scored if name in t.hparams]
        kind = axis_kind(spec.get(name), values)
        if kind is None:
            continue
        cats: tuple[str, ...] = ()
        if kind is AxisKind.CATEGORICAL:
            declared = spec.get(name)
            order = ([category_label(v) for v in declared.vals]
                     if isinstance(declared, CategoricalHP) else [])
            seen = [category_label(v) for v in values]
            cats = tuple(dict.fromkeys([c for c in order if c in seen] + seen))
        axes.append(HParamAxis(name, kind, cats))
    return tuple(axes)


# -------------------------------------------------------------------- the store
def gather(store: Store, exp_id: int) -> PlotData:
    """Everything the plot of experiment ``exp_id`` shows; ``NotFoundError`` when it does
    not exist (or is not the caller's, on a shared database)."""
    from dethpc.config.stored import parse_stored

    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(
                f"experiment {exp_id} does not exist (see `dethpc experiment list`)")
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)
                             .order_by(Trial.id)))  # type: ignore[arg-type]
        rows = list(s.exec(
            select(Metric.trial_id, Metric.steps, Metric.time, Metric.metrics)
            .join(Trial, Trial.id == Metric.trial_id)  # type: ignore[arg-type]
            .where(Trial.experiment_id == exp_id, Metric.kind == MetricKind.VALIDATION)
            .order_by(Metric.trial_id, Metric.id)))  # type: ignore[arg-type]
        ss = s.get(SearcherState, exp_id)
        snapshot = dict(ss.snapshot) if ss is not None and ss.snapshot else {}
    cfg = parse_stored(exp.config_yaml)
    sc = cfg.searcher
    metric = sc.metric
    by_trial: dict[int, list[tuple[int, float, float]]] = {}
    for trial_id, steps, time, values in rows:
        value = metric_value(dict(values or {}), metric)
        if value is not None:
            by_trial.setdefault(trial_id, []).append((int(steps), float(time), value))
    curves = tuple(Curve(tid, *dedupe_steps(r)) for tid, r in sorted(by_trial.items()))
    points = tuple(TrialPoint(trial_id=t.id or 0, request_id=t.request_id,
                              state=str(t.state.value), best=t.best_validation,
                              hparams=flat_hparams(t.hparams))
                   for t in trials)
    unit = sc.max_length.unit.value if sc.max_length is not None else "steps"
    return PlotData(
        experiment_id=exp_id, name=exp.name, searcher=sc.name, metric=metric,
        smaller_is_better=sc.smaller_is_better, unit=unit, trials=points, curves=curves,
        brackets=_brackets(cfg, snapshot, {t.request_id: t.id or 0 for t in trials}),
        axes=hparam_axes(flat_spec(cfg.hyperparameters), points),
        top=top_trials(points, sc.smaller_is_better))


def _brackets(cfg: Any, snapshot: dict[str, Any],
              trial_of: Mapping[int, int]) -> tuple[Bracket, ...]:
    """The searcher's rungs with each trial's outcome; () for a searcher without rungs,
    before its first snapshot, or when the snapshot does not restore into the searcher
    the stored config makes."""
    from dethpc.searchers.factory import make_searcher

    if not snapshot:
        return ()
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
    try:
        searcher.restore(snapshot)
    except (ValueError, KeyError, TypeError):
        return ()      # a snapshot of another searcher or bracket plan: no rungs to draw
    records = {r.request_id: r for r in searcher.trials()}
    variant = str(snapshot.get("variant", ""))
    out: list[Bracket] = []
    for b in searcher.rungs():
        rungs = b.get("rungs", [])
        made = []
        for r, rung in enumerate(rungs):
            pts = []
            for m in rung.get("metrics", []):
                rid = int(m["request_id"])
                rec = records.get(rid)
                outcome = rung_outcome(r, len(rungs), rec.rung if rec else r,
                                       rec.status if rec else TrialStatus.ACTIVE, m.get("metric"),
                                       variant)
                pts.append(RungPoint(trial_of.get(rid), m.get("metric"), outcome))
            made.append(Rung(r, int(rung.get("length", 0)), int(rung.get("keep", 0)),
                             rung.get("cutoff"), tuple(pts)))
        out.append(Bracket(int(b.get("bracket", len(out))), tuple(made)))
    return tuple(out)
