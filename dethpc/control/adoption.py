"""Adopting jobs dethpc did not submit: the daemon side of detached registration.

Owns: ``Adopter.scan()`` — one listdir of ``<spool>/detached`` per tick; each new
registration (``register.json``, written by ``dethpc.common.detached``) of a job this daemon's
user owns becomes an experiment of kind DETACHED (one per job, or per array job with a
trial per task) with a trial, a batch and a job row, so the reconciler polls it by its
ref, ingests its metrics and checkpoints and ends it like any experiment. The trial's
directory in the run dir is a symlink to the spool directory; ``adopted.json`` marks
the registration done. ``parse_registration`` and ``detached_config`` are pure.
Must not: call a backend, submit or cancel anything, write into a spool directory other
than ``adopted.json``, or touch a registration another user owns (judged by the owner of
the file, which a job cannot forge, not by the name it wrote).

Idempotency: the experiment is found again by its batch name ``detached:<job>``, the
trial by its job ref, so a daemon killed between the commit and ``adopted.json`` adopts
nothing twice: the next scan finds the rows and finishes the link and the marker.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlmodel import Session, select

from dethpc.backends.base import JobState
from dethpc.common.errors import DethpcError
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.common.markers import replace_text
from dethpc.common.paths import ExperimentPaths, TrialPaths, make_run_dir, spool_dir
from dethpc.store import Store
from dethpc.store.models import (
    Batch,
    BatchState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    SearcherState,
    Trial,
    TrialState,
)

log = logging.getLogger(__name__)

#: the searcher metric of an adopted experiment when the job did not set $DETHPC_METRIC
DEFAULT_METRIC = "loss"
#: the batch name prefix that marks (and finds again) a detached job's experiment
MARKER = "detached:"


@dataclass(frozen=True)
class Registration:
    """A detached job as its ``register.json`` describes it."""

    ref: str                    # "<array job>_<task>" or "<job>"
    job_id: str
    array_job_id: str | None
    array_task_id: int | None
    name: str
    user: str
    metric: str
    submit_dir: str = ""
    cluster: str = ""

    @property
    def group(self) -> str:
        """The Slurm job one experiment stands for: the array job, or the job itself."""
        return self.array_job_id if self.array_task_id is not None and self.array_job_id \
            else self.ref

    @property
    def marker(self) -> str:
        return MARKER + self.group

    @property
    def index(self) -> int:
        return self.array_task_id if self.array_task_id is not None else 0


def parse_registration(data: Any, where: str) -> Registration:
    """A ``register.json`` object; ``DethpcError`` naming the field when it is malformed."""
    if not isinstance(data, dict):
        raise DethpcError(f"{where}: a registration must be a JSON object")
    ref, job = str(data.get("job_ref") or ""), str(data.get("job_id") or "")
    if not ref or not job:
        raise DethpcError(f"{where}: job_ref and job_id are required, got "
                          f"job_ref={ref!r} job_id={job!r}")
    task = data.get("array_task_id")
    if task is not None and (isinstance(task, bool) or not isinstance(task, int) or task < 0):
        raise DethpcError(f"{where}: array_task_id must be a whole number >= 0, got {task!r}")
    return Registration(ref=ref, job_id=job, array_job_id=data.get("array_job_id") or None,
                        array_task_id=task, name=str(data.get("job_name") or f"slurm-{ref}"),
                        user=str(data.get("user") or ""),
                        metric=str(data.get("metric") or DEFAULT_METRIC),
                        submit_dir=str(data.get("submit_dir") or ""),
                        cluster=str(data.get("cluster") or ""))


def detached_config(reg: Registration) -> str:
    """The experiment config of an adopted job: valid, minimal, honest about what it is
    (``single`` searcher, no length: the script decides; ``max_restarts: 0``)."""
    where = f" from {reg.submit_dir}" if reg.submit_dir else ""
    cfg = {
        "name": reg.name,
        "description": f"Slurm job {reg.group} submitted outside dethpc{where}; "
                       "registered itself (detached)",
        "entrypoint": f"# not run by dethpc: Slurm job {reg.group}",
        "max_restarts": 0,
        "searcher": {"name": "single", "metric": reg.metric, "smaller_is_better": True},
    }
    return yaml.safe_dump(cfg, sort_keys=False)


class Adopter:
    """Adopts this user's detached registrations; one per daemon. Remembers (in memory
    only, a hint lost harmlessly on restart) the entries it need not look at again."""

    def __init__(self, store: Store, runs_root: Path, backend: str,
                 spool: Path | None = None, runs_mode: str = "private") -> None:
        self.store, self.runs_root, self.backend = store, Path(runs_root).expanduser(), backend
        self.runs_mode = runs_mode
        self.spool = spool
        self.uid = os.getuid()
        self.done: set[str] = set()

    @property
    def root(self) -> Path:
        return (self.spool if self.spool is not None else spool_dir()) / "detached"

    def scan(self) -> int:
        """Adopt every new registration; returns how many were adopted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        adopted = 0
        for name in sorted(set(names) - self.done):
            if name.startswith("."):
                continue
            tp = TrialPaths(self.root / name)
            if tp.adopted.exists():
                self.done.add(name)
                continue
            try:
                st = tp.registration.stat()
            except FileNotFoundError:
                continue   # still being written: next tick
            if st.st_uid != self.uid or tp.root.stat().st_uid != self.uid:
                self.done.add(name)   # another user's job: their daemon adopts it
                continue
            try:
                reg = parse_registration(json.loads(tp.registration.read_text()),
                                         str(tp.registration))
                self.adopt(reg, tp.root)
                adopted += 1
            except (DethpcError, ValueError, OSError) as exc:
                log.warning("detached job %s not adopted: %s", name, exc)
                self.done.add(name)
        return adopted

    def adopt(self, reg: Registration, spool_trial: Path) -> None:
        with self.store.session() as s:
            exp, trial_id = self.record(s, reg)
            run_dir = Path(exp.run_dir)
        link = ExperimentPaths(run_dir).trial(trial_id).root
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(spool_trial.resolve(), target_is_directory=True)
        marker = TrialPaths(spool_trial).adopted
        replace_text(marker, json.dumps({"experiment": exp.id, "trial": trial_id}) + "\n")
        self.done.add(spool_trial.name)
        log.info("adopted detached job %s as experiment %s trial %s", reg.ref, exp.id,
                 trial_id)

    def record(self, s: Session, reg: Registration) -> tuple[Experiment, int]:
        """The rows of ``reg`` (found again, or created); returns its experiment and trial id."""
        batch = s.exec(select(Batch).where(Batch.name == reg.marker)).first()
        if batch is None:
            exp, batch = self.new_experiment(s, reg)
        else:
            found = s.get(Experiment, batch.experiment_id)
            assert found is not None
            exp = found
            job = s.exec(select(Job).where(Job.batch_id == batch.id,
                                           Job.ref == reg.ref)).first()
            if job is not None:
                return exp, job.trial_id
        assert exp.id is not None and batch.id is not None
        canceled = exp.state in (ExperimentState.CANCELED, ExperimentState.STOPPING_CANCELED,
                                 ExperimentState.STOPPING_KILLED)
        trial = Trial(experiment_id=exp.id, request_id=reg.index, needs_job=False,
                      state=TrialState.CANCELED if canceled else TrialState.QUEUED)
        s.add(trial)
        s.flush()
        assert trial.id is not None
        s.add(Job(experiment_id=exp.id, trial_id=trial.id, batch_id=batch.id,
                  array_index=reg.index, ref=reg.ref, state=JobState.PENDING,
                  live=not canceled))
        batch.size += 1
        s.add(batch)
        if exp.state in (ExperimentState.COMPLETED, ExperimentState.ERROR):
            exp.state, exp.ended_at, exp.message = ExperimentState.ACTIVE, None, ""
            s.add(exp)   # another task of its array registered after the others ended
        s.add(Event(experiment_id=exp.id, trial_id=trial.id, kind=EventKind.ADOPTED,
                    message=f"Slurm job {reg.ref} (not submitted by dethpc) registered "
                            f"itself; tracked as trial {trial.id}"))
        return exp, trial.id

    def new_experiment(self, s: Session, reg: Registration) -> tuple[Experiment, Batch]:
        exp = Experiment(name=reg.name, config_yaml=detached_config(reg), run_dir="",
                         owner=reg.user, backend=self.backend, kind=ExperimentKind.DETACHED,
                         description=f"Slurm job {reg.group} (detached)")
        s.add(exp)
        s.flush()
        assert exp.id is not None
        paths = ExperimentPaths.of(self.runs_root, exp.id)
        self.runs_root.mkdir(parents=True, exist_ok=True)
        if not paths.root.exists():
            make_run_dir(paths.root, self.runs_mode)
        paths.ensure()
        paths.config.write_text(exp.config_yaml)
        exp.run_dir = str(paths.root)
        s.add(exp)
        s.add(SearcherState(experiment_id=exp.id, initialized=True, shutdown=True))
        batch = Batch(experiment_id=exp.id, name=reg.marker, state=BatchState.SUBMITTED,
                      array_job_id=reg.group, size=0)
        s.add(batch)
        s.flush()
        return exp, batch
