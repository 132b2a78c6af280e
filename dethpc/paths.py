"""The run-directory layout: the only module that knows where files live.

Owns: ``ExperimentPaths`` and ``TrialPaths`` (the file contract between the
daemon and the jobs, see docs/architecture.md) and ``dethpc_home()``.
Must not: read or write any file itself, except creating directories on request.

Layout::

    <runs_root>/<experiment-id>/
      config.yaml  context/  arrays/<batch>.sbatch
      trials/<trial-id>/
        hparams.json  target.json  job.sbatch  slurm-%A_%a.out
        metrics.jsonl  checkpoints/<uuid>/  exits.jsonl  stop
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def dethpc_home() -> Path:
    """``$DETHPC_HOME`` or ``~/.dethpc``: the default home of the database and runs."""
    return Path(os.environ.get("DETHPC_HOME") or Path.home() / ".dethpc").expanduser()


@dataclass(frozen=True)
class TrialPaths:
    root: Path

    @property
    def hparams(self) -> Path:
        return self.root / "hparams.json"

    @property
    def target(self) -> Path:
        """Searcher target written by the daemon: {"unit": ..., "length": ...}."""
        return self.root / "target.json"

    @property
    def job_script(self) -> Path:
        return self.root / "job.sbatch"

    @property
    def output_pattern(self) -> Path:
        """Slurm ``--output`` pattern (array job id, task id)."""
        return self.root / "slurm-%A_%a.out"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint(self, uuid: str) -> Path:
        return self.checkpoints / uuid

    @property
    def exit_log(self) -> Path:
        """Append-only history of exit records, one JSON object per line."""
        return self.root / "exits.jsonl"

    @property
    def stop(self) -> Path:
        return self.root / "stop"

    @property
    def startup_hook_env(self) -> Path:
        """Prefix of the files (``.<node id>``) where each node's ``startup-hook.sh``
        leaves the variables it exported; the job script exports node 0's."""
        return self.root / ".startup-hook-env"

    def logs(self) -> list[Path]:
        """Every job output file of this trial, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob("slurm-*.out"), key=lambda p: p.stat().st_mtime)

    def ensure(self) -> TrialPaths:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class ExperimentPaths:
    root: Path

    @classmethod
    def of(cls, runs_root: Path, experiment_id: int) -> ExperimentPaths:
        return cls(Path(runs_root) / str(experiment_id))

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def context(self) -> Path:
        return self.root / "context"

    @property
    def arrays(self) -> Path:
        return self.root / "arrays"

    def array_script(self, batch_id: int) -> Path:
        return self.arrays / f"batch-{batch_id}.sbatch"

    def trial(self, trial_id: int) -> TrialPaths:
        return TrialPaths(self.root / "trials" / str(trial_id))

    def ensure(self) -> ExperimentPaths:
        self.arrays.mkdir(parents=True, exist_ok=True)
        (self.root / "trials").mkdir(parents=True, exist_ok=True)
        return self
