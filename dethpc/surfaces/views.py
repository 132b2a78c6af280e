"""Read-only views of the store for the CLI (describe, list, logs), as plain dicts.

Owns: turning rows into the dicts that ``--json`` prints and the tables show, from
either source of rows: the ORM (``Store``: every database) or the standard library's
``sqlite3`` (``dethpc.store.reader.Reader``: a SQLite store at head, for the commands
that only look, issue 47). Both give rows with the models' attribute names and types,
and the same functions (``list_rows``, ``describe_rows``) build the dicts from them.
Must not: change state, or import the ORM at module level (the ``Reader`` path must not
pay for it; tests/unit/surfaces/test_cli_fastread.py checks).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dethpc.backends.base import JobState
from dethpc.backends.slurm_holds import hold_of
from dethpc.common.errors import NotFoundError
from dethpc.common.kinds import MetricKind
from dethpc.store.states import CheckpointState, ExperimentState

if TYPE_CHECKING:
    from dethpc.config.model import ExperimentConfig
    from dethpc.control.bad_nodes import BadNode
    from dethpc.store import Store
    from dethpc.store.models import Checkpoint, Event, Experiment, Job, Trial
    from dethpc.store.reader import Reader


def shown_progress(e: Experiment) -> float:
    """The searcher's progress; a COMPLETED experiment is done whatever its searcher said
    (a ``dethpc sbatch`` job's, whose searcher only counts, read 0% once finished)."""
    return 1.0 if e.state == ExperimentState.COMPLETED else round(e.progress, 3)


def experiment_dict(e: Experiment) -> dict[str, Any]:
    return {"id": e.id, "name": e.name, "state": e.state, "description": e.description,
            "labels": list(e.labels), "owner": e.owner, "backend": e.backend,
            "kind": e.kind.value,
            "progress": shown_progress(e), "run_dir": e.run_dir,
            "created_at": e.created_at, "ended_at": e.ended_at, "message": e.message}


def trial_dict(t: Trial) -> dict[str, Any]:
    return {"id": t.id, "experiment_id": t.experiment_id, "request_id": t.request_id,
            "state": t.state, "hparams": t.hparams,
            "steps_completed": t.steps_completed, "target_length": t.target_length,
            "best_validation": t.best_validation, "latest_validation": t.latest_validation,
            "latest_checkpoint": t.latest_checkpoint, "restarts": t.restarts,
            "runs": t.runs, "exit_reason": t.exit_reason,
            "early_exit": t.early_exit or None, "metadata": dict(t.meta or {})}


def checkpoint_dict(c: Checkpoint) -> dict[str, Any]:
    return {"uuid": c.uuid, "experiment_id": c.experiment_id, "trial_id": c.trial_id,
            "steps_completed": c.steps_completed, "state": c.state, "path": c.path,
            "validation_metric": c.validation_metric, "created_at": c.created_at,
            "metadata": c.meta}


def event_dict(e: Event) -> dict[str, Any]:
    """An event; ``data`` only on those that carry more than their message (an alert's
    level, title and description)."""
    d: dict[str, Any] = {"time": e.time, "kind": e.kind, "message": e.message}
    if e.data is not None:
        d["data"] = dict(e.data)
    return d


def daemon_running(store: Store, owner: str) -> bool:
    """Whether ``owner``'s daemon runs: on this host (its lock, or its supervisor starting
    it: ``service.starting_or_running``) or on another login node (a live lease in
    ``store``). A view that finds none says so (the CLI's note, the dashboard's banner)."""
    from dethpc.control import service
    from dethpc.control.lease import Lease

    return service.starting_or_running() or Lease(store, owner).current() is not None


def list_experiments(store: Store, include_ended: bool = True,
                     owner: str | None = None) -> list[dict[str, Any]]:
    """Experiments by id; only ``owner``'s when given (None: everyone's)."""
    from sqlmodel import select

    from dethpc.store.models import Experiment

    with store.session() as s:
        rows = s.exec(select(Experiment).order_by(Experiment.id))  # type: ignore[arg-type]
        return list_rows(rows, include_ended, owner)


def read_experiments(reader: Reader, include_ended: bool = True,
                     owner: str | None = None) -> list[dict[str, Any]]:
    """``list_experiments`` from a ``Reader``."""
    return list_rows(reader.experiments(), include_ended, owner)


def list_rows(rows: Iterable[Experiment], include_ended: bool,
              owner: str | None) -> list[dict[str, Any]]:
    """``list_experiments``' dicts of ``rows`` (by id)."""
    return [experiment_dict(e) for e in rows
            if (include_ended or e.ended_at is None) and (owner is None or e.owner == owner)]


def describe_experiment(store: Store, exp_id: int) -> dict[str, Any]:
    from sqlmodel import select

    from dethpc.config.stored import parse_stored
    from dethpc.control.bad_nodes import excluded
    from dethpc.store.models import Checkpoint, Experiment, Job, SearcherState, Trial

    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(f"experiment {exp_id} does not exist")
        trials = list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)
                             .order_by(Trial.id)))  # type: ignore[arg-type]
        ckpts = list(s.exec(select(Checkpoint).where(Checkpoint.experiment_id == exp_id)))
        ss = s.get(SearcherState, exp_id)
        live = list(s.exec(select(Job).where(
            Job.experiment_id == exp_id, Job.live == True)  # noqa: E712
            .order_by(Job.id)))  # type: ignore[arg-type]
        cfg = parse_stored(exp.config_yaml)
        bad = excluded(s, exp_id, cfg.slurm.bad_nodes, time.time())
    return describe_rows(exp, trials, ckpts, ss.snapshot if ss is not None else None,
                         live, cfg, bad)


def read_describe(reader: Reader, exp_id: int) -> dict[str, Any]:
    """``describe_experiment`` from a ``Reader``."""
    from dethpc.config.stored import parse_stored
    from dethpc.control.bad_nodes import judge, node_runs

    exp = reader.experiment(exp_id)
    if exp is None:
        raise NotFoundError(f"experiment {exp_id} does not exist")
    cfg = parse_stored(exp.config_yaml)
    policy = cfg.slurm.bad_nodes
    bad = (judge(node_runs(reader.ended_jobs_on_nodes(exp_id)), policy, time.time())
           if policy.failures > 0 else [])
    ss = reader.searcher_state(exp_id)
    return describe_rows(exp, reader.trials_of(exp_id), reader.checkpoints_of(exp_id),
                         ss.snapshot if ss is not None else None, reader.live_jobs(exp_id),
                         cfg, bad)


def describe_rows(exp: Experiment, trials: Sequence[Trial], checkpoints: Iterable[Checkpoint],
                  snapshot: dict[str, Any] | None, live_jobs: Iterable[Job],
                  cfg: ExperimentConfig, bad: Sequence[BadNode]) -> dict[str, Any]:
    """``describe_experiment``'s dict: the experiment, its trials (by id), its checkpoints,
    its searcher's snapshot, its live jobs (by id), its parsed config and its bad nodes."""
    ckpts = {c.uuid: c for c in checkpoints}
    live = {j.trial_id: j for j in live_jobs}
    sib = cfg.searcher.smaller_is_better
    out = experiment_dict(exp)
    out["excluded_nodes"] = [
        {"node": b.node, "failures": len(b.evidence), "last_at": b.last_at,
         "evidence": [{"trial_id": r.trial_id, "job": r.job, "at": r.at}
                      for r in b.evidence]} for b in bad]
    out["searcher"] = {"name": cfg.searcher.name, "metric": cfg.searcher.metric,
                       "smaller_is_better": sib}
    out["trials"] = []
    for t in trials:
        d = trial_dict(t)
        d["pending_reason"] = pending_reason(t, live.get(t.id or 0))
        d["hold"] = hold_note(t, live.get(t.id or 0))
        d["straggler"] = straggler_of(exp.run_dir, t.id or 0, cfg.slurm.stragglers.behind_pct)
        best = [c for c in ckpts.values()
                if c.trial_id == t.id and c.state == CheckpointState.COMPLETED]
        scored = [c for c in best if c.validation_metric is not None]
        if scored:
            pick = min(scored, key=lambda c: c.validation_metric if sib  # type: ignore[arg-type,return-value]
                       else -c.validation_metric)  # type: ignore[operator]
            d["best_checkpoint"] = pick.uuid
        elif best:
            d["best_checkpoint"] = max(best, key=lambda c: c.steps_completed).uuid
        else:
            d["best_checkpoint"] = None
        out["trials"].append(d)
    scored_trials = [d for d in out["trials"] if d["best_validation"] is not None]
    out["best_trial"] = (min(scored_trials, key=lambda d: d["best_validation"] if sib
                             else -d["best_validation"]) if scored_trials else None)
    out["rungs"], searcher_trials = [], {}
    if snapshot:
        from dethpc.searchers.factory import make_searcher

        searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
        searcher.restore(snapshot)
        out["rungs"] = searcher.rungs()
        searcher_trials = {r.request_id: r for r in searcher.trials()}
    for d in out["trials"]:
        rec = searcher_trials.get(d["request_id"])
        d["rung"] = rec.rung if rec else None
        d["searcher_status"] = rec.status if rec else None
    return out


def straggler_of(run_dir: str, trial_id: int, behind_pct: float) -> dict[str, Any] | None:
    """The rank that holds a multi-rank trial up in its latest run, by more than
    ``behind_pct`` percent (``dethpc.control.stragglers``), as a dict; else None."""
    from dethpc.common.paths import ExperimentPaths
    from dethpc.control.stragglers import find_straggler, read_rank_times

    ranks = ExperimentPaths(Path(run_dir)).trial(trial_id).ranks
    found = find_straggler(read_rank_times(ranks), behind_pct)
    return found.as_dict() if found is not None else None


def pending_reason(t: Trial, job: Job | None) -> str | None:
    """Why a trial that waits is waiting: its job's pending reason as Slurm gives it
    (``Priority``, ``Resources``, ``QOSMaxJobsPerUserLimit``, ...), or that dethpc has
    not submitted it yet (e.g. held back under the user's submit limit); None when the
    trial is not waiting for a job."""
    if t.state.is_terminal:
        return None
    if job is not None:
        return (job.reason or "pending") if job.state == JobState.PENDING else None
    return "not submitted yet" if t.needs_job else None


def hold_note(t: Trial, job: Job | None) -> str | None:
    """When the trial's job waits on a hold (an administrator's, the user's, or one
    Slurm placed after failed launches): who holds it and how it goes on; else None."""
    if t.state.is_terminal or job is None or job.state != JobState.PENDING:
        return None
    hold = hold_of(job.reason)
    return hold.explain(job.ref or "?") if hold else None


def trial_detail(store: Store, trial_id: int) -> dict[str, Any]:
    from sqlmodel import select

    from dethpc.store.models import Checkpoint, Event, Job, Metric, Trial

    with store.session() as s:
        t = s.get(Trial, trial_id)
        if t is None:
            raise NotFoundError(f"trial {trial_id} does not exist")
        d = trial_dict(t)
        d["validations"] = [
            {"steps": m.steps, "metrics": m.metrics}
            for m in s.exec(select(Metric).where(Metric.trial_id == trial_id,
                                                 Metric.kind == MetricKind.VALIDATION)
                            .order_by(Metric.steps))]  # type: ignore[arg-type]
        d["checkpoints"] = [checkpoint_dict(c) for c in s.exec(
            select(Checkpoint).where(Checkpoint.trial_id == trial_id)
            .order_by(Checkpoint.steps_completed))]  # type: ignore[arg-type]
        d["jobs"] = [{"ref": j.ref, "state": j.state, "restart_count": j.restart_count,
                      "exit_reason": j.exit_reason, "exit_code": j.exit_code, "nodes": j.nodes,
                      "reason": j.reason}
                     for j in s.exec(select(Job).where(Job.trial_id == trial_id))]
        d["events"] = [event_dict(e) for e in s.exec(select(Event).where(Event.trial_id == trial_id)
                                       .order_by(Event.id))]  # type: ignore[arg-type]
        return d


def checkpoints_of(store: Store, exp_id: int) -> list[dict[str, Any]]:
    from sqlmodel import select

    from dethpc.store.models import Checkpoint

    with store.session() as s:
        return [checkpoint_dict(c) for c in s.exec(
            select(Checkpoint).where(Checkpoint.experiment_id == exp_id)
            .order_by(Checkpoint.trial_id, Checkpoint.steps_completed))]  # type: ignore[arg-type]


def checkpoint_detail(store: Store, uuid: str) -> dict[str, Any]:
    from dethpc.store.models import Checkpoint

    with store.session() as s:
        c = s.get(Checkpoint, uuid)
        if c is None:
            raise NotFoundError(f"checkpoint {uuid} does not exist")
        return checkpoint_dict(c)


def events_of(store: Store, exp_id: int) -> list[dict[str, Any]]:
    """The experiment's events; ``NotFoundError`` for an experiment this user cannot see
    (none, or another user's in a shared database), rather than an empty log."""
    from sqlmodel import select

    from dethpc.store.models import Event, Experiment

    with store.session() as s:
        if s.get(Experiment, exp_id) is None:
            raise NotFoundError(f"experiment {exp_id} does not exist")
        return [{**event_dict(e), "trial_id": e.trial_id}
                for e in s.exec(select(Event).where(Event.experiment_id == exp_id)
                                .order_by(Event.id))]  # type: ignore[arg-type]
