"""What the dashboard shows, read from the store as JSON-ready dicts.

Owns: which experiments a viewer sees (``visible_owner``: the user's own, every user's
for a dethpc admin, as ``experiment list --all`` decides), one page of an experiment's
trials with the summary, curves, rungs, checkpoints and events around it, a trial's detail
with the tail of its log. Every query is bounded by the page (a 10,000-trial experiment
reads 100 trials' rows, its state counts and its best trial, never every trial), so a
viewer polling every 2 s costs the daemon little (bench/dashboard).
Reuses ``dethpc.surfaces.views`` for the row dicts and a trial's detail.
Must not: change state; import the web library (the CLI imports this without it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func
from sqlmodel import col, select

from dethpc.common.errors import DethpcError, NotFoundError
from dethpc.common.kinds import MetricKind
from dethpc.common.paths import ExperimentPaths
from dethpc.store import Store
from dethpc.store.access import DatabaseRole, Scope
from dethpc.store.models import (
    Checkpoint,
    CheckpointState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    Metric,
    SearcherState,
    Trial,
)
from dethpc.surfaces import views

#: trials per page unless the viewer asks otherwise; and the most a page may hold
PER_PAGE = 100
MAX_PER_PAGE = 500
#: the experiment's most recent events and checkpoints shown with a page
RECENT_EVENTS = 50
RECENT_CHECKPOINTS = 20
#: a log's tail: at most this many bytes read from its end, then these many lines
LOG_TAIL_BYTES = 64 * 1024
LOG_TAIL_LINES = 200


def visible_owner(role: DatabaseRole, user: str) -> str | None:
    """Whose experiments a viewer connected as ``role`` sees: a dethpc admin on a shared
    database every user's (None), anyone else their own (``experiment list``'s default;
    on a shared database row-level security shows no other rows anyway)."""
    return None if role.scope is Scope.ALL_ROWS else user


@dataclass(frozen=True)
class Page:
    """Which trials of an experiment to show (1-based page)."""

    number: int = 1
    size: int = PER_PAGE

    @classmethod
    def parse(cls, page: str | None, per_page: str | None) -> Page:
        """From query parameters; a clear error naming the parameter otherwise."""
        number = _int_param("page", page, 1, 1, 10**9)
        size = _int_param("per_page", per_page, PER_PAGE, 1, MAX_PER_PAGE)
        return cls(number, size)


def _int_param(name: str, raw: str | None, default: int, lo: int, hi: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise DethpcError(f"{name}={raw!r} is not allowed: an integer from {lo} to {hi}")
    return value


def _visible(exp: Experiment | None, exp_id: int, owner: str | None) -> Experiment:
    if exp is None or (owner is not None and exp.owner != owner):
        raise NotFoundError(f"experiment {exp_id} does not exist")
    return exp


def experiments(store: Store, owner: str | None) -> list[dict[str, Any]]:
    """The viewer's experiments, newest first, each with its trials counted by state."""
    rows = views.list_experiments(store, owner=owner)
    with store.session() as s:
        counts = s.exec(select(Trial.experiment_id, Trial.state, func.count())
                        .group_by(Trial.experiment_id, Trial.state))  # type: ignore[arg-type]
        by_exp: dict[int, dict[str, int]] = {}
        for exp_id, state, n in counts:
            by_exp.setdefault(exp_id, {})[str(state)] = int(n)
    for r in rows:
        r["trials"] = by_exp.get(r["id"], {})
    return rows[::-1]


def untracked(store: Store, user: str, rows: list[dict[str, Any]]) -> int:
    """How many of the listed experiments need a daemon while none of ``user``'s runs
    (0 when one does): the list says so in a banner."""
    open_ = sum(ExperimentState(r["state"]).needs_daemon for r in rows)
    return open_ if open_ and not views.daemon_running(store, user) else 0


def _config(exp: Experiment) -> Any:
    """The experiment's validated config (``parse_stored`` remembers it by its text)."""
    from dethpc.config.stored import parse_stored

    return parse_stored(exp.config_yaml)


def experiment_page(store: Store, exp_id: int, owner: str | None,
                    page: Page = Page()) -> dict[str, Any]:
    """One page of an experiment: the experiment, trials counted by state, its best
    trial, the page's trials (pending reason, best checkpoint, validation curve of the
    searcher's metric), ASHA's rungs, recent checkpoints and events."""
    with store.session() as s:
        exp = _visible(s.get(Experiment, exp_id), exp_id, owner)
        cfg = _config(exp)
        metric, sib = cfg.searcher.metric, cfg.searcher.smaller_is_better
        counts = {str(state): int(n) for state, n in s.exec(
            select(Trial.state, func.count()).where(Trial.experiment_id == exp_id)
            .group_by(Trial.state))}  # type: ignore[arg-type]
        best_col = col(Trial.best_validation)
        best = s.exec(select(Trial).where(Trial.experiment_id == exp_id,
                                          best_col.is_not(None))
                      .order_by(best_col.asc() if sib else best_col.desc())
                      .limit(1)).first()
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)
                             .order_by(col(Trial.id))
                             .offset((page.number - 1) * page.size).limit(page.size)))
        ids = [t.id for t in trials]
        live = {j.trial_id: j for j in s.exec(select(Job).where(
            col(Job.trial_id).in_(ids), Job.live == True)  # noqa: E712
            .order_by(col(Job.id)))}
        ckpts: dict[int, list[tuple[str, int, float | None]]] = {}
        for uuid, tid, steps, value in s.exec(
                select(Checkpoint.uuid, Checkpoint.trial_id, Checkpoint.steps_completed,
                       Checkpoint.validation_metric)
                .where(col(Checkpoint.trial_id).in_(ids),
                       Checkpoint.state == CheckpointState.COMPLETED)):
            ckpts.setdefault(tid, []).append((uuid, steps, value))
        curves: dict[int, list[list[float]]] = {}
        for tid, steps, values in s.exec(select(Metric.trial_id, Metric.steps, Metric.metrics)
                                         .where(col(Metric.trial_id).in_(ids),
                                                Metric.kind == MetricKind.VALIDATION)
                                         .order_by(col(Metric.trial_id), col(Metric.steps))):
            v = values.get(metric) if isinstance(values, dict) else None
            if isinstance(v, int | float):
                curves.setdefault(tid, []).append([steps, float(v)])
        n_ckpt = s.exec(select(func.count()).select_from(Checkpoint).where(
            Checkpoint.experiment_id == exp_id,
            Checkpoint.state == CheckpointState.COMPLETED)).one()
        recent_ckpts = [views.checkpoint_dict(c) for c in s.exec(
            select(Checkpoint).where(Checkpoint.experiment_id == exp_id,
                                     Checkpoint.state == CheckpointState.COMPLETED)
            .order_by(col(Checkpoint.created_at).desc()).limit(RECENT_CHECKPOINTS))]
        events = [{"time": e.time, "trial_id": e.trial_id, "kind": e.kind,
                   "message": e.message}
                  for e in s.exec(select(Event).where(Event.experiment_id == exp_id)
                                  .order_by(col(Event.id).desc()).limit(RECENT_EVENTS))]
        snapshot = None
        if _has_rungs(exp, cfg):   # a random search's snapshot is large and has none
            ss = s.get(SearcherState, exp_id)
            snapshot = dict(ss.snapshot) if ss is not None and ss.snapshot else None
    total = sum(counts.values())
    out = views.experiment_dict(exp)
    out["searcher"] = {"name": cfg.searcher.name, "metric": metric, "smaller_is_better": sib}
    out["counts"] = counts
    out["best_trial"] = views.trial_dict(best) if best is not None else None
    out["page"] = {"number": page.number, "size": page.size, "total_trials": total,
                   "pages": max(1, -(-total // page.size))}
    rows = []
    for t in trials:
        d = views.trial_dict(t)
        d["pending_reason"] = views.pending_reason(t, live.get(t.id or 0))
        d["best_checkpoint"] = _best_checkpoint(ckpts.get(t.id or 0, []), sib)
        d["curve"] = curves.get(t.id or 0, [])
        d["straggler"] = views.straggler_of(exp.run_dir, t.id or 0,
                                            cfg.slurm.stragglers.behind_pct)
        rows.append(d)
    out["trials"] = rows
    out["rungs"] = _rungs(cfg, snapshot)
    out["checkpoints"] = {"total": int(n_ckpt), "recent": recent_ckpts}
    out["events"] = events
    return out


def _best_checkpoint(ckpts: list[tuple[str, int, float | None]], sib: bool) -> str | None:
    """As ``experiment describe`` picks it among (uuid, steps, metric): the best scored
    one, else the latest."""
    scored = [(u, v) for u, _, v in ckpts if v is not None]
    if scored:
        return min(scored, key=lambda c: c[1] * (1 if sib else -1))[0]
    return max(ckpts, key=lambda c: c[1])[0] if ckpts else None


_rung_kinds: dict[tuple[int, float], bool] = {}


def _has_rungs(exp: Experiment, cfg: Any) -> bool:
    """The experiment's searcher has rungs (ASHA); cached like its config."""
    from dethpc.searchers.base import Searcher
    from dethpc.searchers.factory import make_searcher

    key = (exp.id or 0, exp.created_at)
    if key not in _rung_kinds:
        searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
        _rung_kinds[key] = type(searcher).rungs is not Searcher.rungs
    return _rung_kinds[key]


def _rungs(cfg: Any, snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    """ASHA's brackets and rungs (length, trials reached, kept, cut-off) from the
    searcher's stored snapshot; [] without one. Each rung's list of metrics is counted,
    not sent: at 10,000 trials it would be most of the response."""
    from dethpc.searchers.factory import make_searcher

    if not snapshot:
        return []
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
    try:
        searcher.restore(snapshot)
    except (KeyError, ValueError, TypeError, IndexError):
        return []   # a snapshot the config's searcher does not take (an edited config)
    out = []
    for b in searcher.rungs():
        rungs = [{"length": r["length"], "reached": len(r["metrics"]), "keep": r["keep"],
                  "cutoff": r["cutoff"]} for r in b["rungs"]]
        out.append({**{k: v for k, v in b.items() if k != "rungs"}, "rungs": rungs})
    return out


def trial_page(store: Store, trial_id: int, owner: str | None) -> dict[str, Any]:
    """A trial's detail (``trial describe``'s), its pending reason and its log's tail."""
    d = views.trial_detail(store, trial_id)
    with store.session() as s:
        try:
            exp = _visible(s.get(Experiment, d["experiment_id"]), d["experiment_id"], owner)
        except NotFoundError:   # another user's trial: as if it did not exist
            raise NotFoundError(f"trial {trial_id} does not exist") from None
        t = s.get(Trial, trial_id)
        job = s.exec(select(Job).where(Job.trial_id == trial_id, Job.live == True)  # noqa: E712
                     .order_by(col(Job.id).desc())).first()
    assert t is not None
    cfg = _config(exp)
    d["pending_reason"] = views.pending_reason(t, job)
    d["searcher"] = {"metric": cfg.searcher.metric,
                     "smaller_is_better": cfg.searcher.smaller_is_better}
    d["log_tail"] = log_tail(ExperimentPaths(Path(exp.run_dir)).trial(trial_id).logs())
    d["straggler"] = views.straggler_of(exp.run_dir, trial_id, cfg.slurm.stragglers.behind_pct)
    return d


def log_tail(paths: list[Path], max_bytes: int = LOG_TAIL_BYTES,
             lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a trial's output files taken together (oldest file
    first), reading at most ``max_bytes`` from their end: a long log costs the same."""
    chunks: list[bytes] = []
    left = max_bytes
    for p in reversed(paths):
        if left <= 0:
            break
        try:
            with open(p, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                n = min(size, left)
                f.seek(size - n)
                chunks.append(f.read(n))
                left -= n
        except OSError:
            continue
    text = b"".join(reversed(chunks)).decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
