"""The run-directory layout: the only module that knows where files live.

Owns: ``ExperimentPaths`` and ``TrialPaths`` (the file contract between the
daemon and the jobs, see docs/architecture.md) and ``dethpc_home()``.
Must not: read or write any file itself, except creating directories on request.

Layout::

    <runs_root>/<experiment-id>/
      config.yaml  context/  arrays/<batch>.sbatch
      trials/<trial-id>/
        hparams.json  target.json  job.sbatch (not for a pool trial)  slurm-%A_%a.out
        metrics.jsonl  checkpoints/<uuid>/  exits.jsonl  stop  heartbeat  ranks/<rank>.json
        trial-metadata.json  tensorboard/
        checkpoints/.tmp-<uuid>/      (being written)  checkpoints/.deleted-<uuid>/  (being deleted)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.jobenv import ENV_HOME, ENV_SPOOL

#: a checkpoint being deleted (``CheckpointContext.delete``): neither listed nor resumed
#: from; the daemon removes what is left of it
CHECKPOINT_DELETED_PREFIX = ".deleted-"


def deleted_checkpoint(checkpoint: Path) -> Path:
    """Where checkpoint directory ``checkpoint`` (``.../checkpoints/<uuid>``) goes while it
    is being deleted: ``.../checkpoints/.deleted-<uuid>``."""
    return checkpoint.parent / f"{CHECKPOINT_DELETED_PREFIX}{checkpoint.name}"


def dethpc_home() -> Path:
    """``$DETHPC_HOME`` or ``~/.dethpc``: the default home of the database and runs."""
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".dethpc").expanduser()


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dethpc`` (``~/.cache/dethpc``): what a user's commands keep to
    answer faster next time (saved ``--help``, the cluster config's facts, compiled job
    templates); anything there may be deleted at any time."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dethpc"


def make_private_dir(path: Path) -> Path:
    """``path`` and missing parents; the directory itself, when this call creates it, is
    the owner's only (0700: a database or a home holds hyperparameters and paths)."""
    path = Path(path).expanduser()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
            os.chmod(path, 0o700)
        except FileExistsError:
            pass
    return path


#: the trial files the daemon ingests by offset (``IngestOffset.file`` names them)
METRICS_FILE = "metrics.jsonl"
EXITS_FILE = "exits.jsonl"


@dataclass(frozen=True)
class TrialPaths:
    """The files of one trial under its experiment's run directory."""

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
        return self.root / METRICS_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint(self, uuid: str) -> Path:
        return self.checkpoints / uuid

    @property
    def exit_log(self) -> Path:
        """Append-only history of exit records, one JSON object per line."""
        return self.root / EXITS_FILE

    @property
    def stop(self) -> Path:
        return self.root / "stop"

    @property
    def searched(self) -> Path:
        """Written by the daemon once the searcher has taken the trial's validations up to
        the length in it (and any stop it decided on them is in ``stop``): the number,
        replaced atomically. A trial at a rung waits for it (``dethpc.core``'s
        ``PreemptContext.await_verdict``) instead of training on while its stop travels."""
        return self.root / "searched"

    @property
    def run_metadata(self) -> Path:
        """The trial's metadata (Determined's ``TrainContext.set_metadata``): one JSON
        object, replaced whole (atomically) by rank 0 at each call."""
        return self.root / "trial-metadata.json"

    @property
    def tensorboard(self) -> Path:
        """The trial's own TensorBoard files (``TrainContext.get_tensorboard_path()``)."""
        return self.root / "tensorboard"

    @property
    def signal_file(self) -> Path:
        """Written by a wrapped script's job shell (``dethpc sbatch``) when the preemption
        or time-limit signal arrives: one JSON object ``{"signal", "run", "time"}``;
        ``dethpc should-stop`` answers yes while its ``run`` is the current run."""
        return self.root / "signal.json"

    @property
    def stop_acks(self) -> Path:
        """Appended by ``dethpc should-stop`` each time it answers yes:
        ``{"run", "why": "signal|stop|pause", "time"}`` per line. The job shell reads it
        to tell a script that stopped on request from one that simply finished."""
        return self.root / "stop-acks.jsonl"

    @property
    def rehearsal(self) -> Path:
        """Written by ``dethpc trial preempt`` just before it sends the pool's early
        signal: ``{"what": "preemption|time_limit", "job", "run", "time"}``. The run's
        end (``dethpc.launch.run_end``) records a time-limit rehearsal of its own job
        and run as ``time_limit``."""
        return self.root / "rehearsal.json"

    @property
    def heartbeat(self) -> Path:
        """Touched by the in-job API while the training loop runs (``should_preempt``, at
        most every ``dethpc.core._preempt.HEARTBEAT_S``): with ``metrics.jsonl``'s
        growth, what the daemon's hang watchdog counts as progress."""
        return self.root / "heartbeat"

    @property
    def ranks(self) -> Path:
        """One file per rank of a multi-rank trial, ``<rank>.json``, replaced atomically
        by that rank (``dethpc.core._steps``): its recent step times, which the straggler
        view (``dethpc.control.stragglers``) compares."""
        return self.root / "ranks"

    def rank_times(self, rank: int) -> Path:
        return self.ranks / f"{rank}.json"

    @property
    def hung(self) -> Path:
        """Written by the daemon's hang watchdog before it asks the ranks for their
        stacks and ends the job: ``{"job", "run", "time", "idle_s", "max_idle_s"}``. The
        run's end (``dethpc.launch.run_end``) records that job's run as ``hung``."""
        return self.root / "hung.json"

    @property
    def outputs(self) -> Path:
        """The job output files of a wrapped script (the user's own ``--output`` and
        ``--error``, resolved by the job shell at each run start): one path per line."""
        return self.root / "outputs.txt"

    @property
    def user_script(self) -> Path:
        """The user's script as it was when submitted (sbatch copies it too)."""
        return self.root / "script"

    @property
    def registration(self) -> Path:
        """A detached job's registration (``dethpc.common.detached``): who, where, which job."""
        return self.root / "register.json"

    @property
    def adopted(self) -> Path:
        """Written by the daemon when it adopted a detached job: ``{"experiment", "trial"}``."""
        return self.root / "adopted.json"

    @property
    def startup_hook_env(self) -> Path:
        """Prefix of the files (``.<node id>``) where each node's ``startup-hook.sh``
        leaves the variables it exported; the job script exports node 0's."""
        return self.root / ".startup-hook-env"

    def logs(self) -> list[Path]:
        """Every job output file of this trial, oldest first: the trial directory's own
        and those a wrapped script wrote where its ``--output``/``--error`` said."""
        if not self.root.is_dir():
            return []
        found = set(self.root.glob("slurm-*.out"))
        if self.outputs.exists():
            found.update(Path(line) for line in self.outputs.read_text().splitlines()
                         if line.strip() and Path(line).is_file())
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def ensure(self) -> TrialPaths:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self


def spool_dir() -> Path:
    """``$DETHPC_SPOOL`` or ``<dethpc home>/spool``: where jobs dethpc did not submit
    register themselves (``detached/<job ref>/``), on storage the daemon also sees."""
    return Path(os.environ.get(ENV_SPOOL) or dethpc_home() / "spool").expanduser()


def detached_dir(job_ref: str) -> Path:
    """The trial directory of a detached job, ``<spool>/detached/<job ref>``; the daemon
    links ``<run dir>/trials/<trial id>`` to it when it adopts the job."""
    return spool_dir() / "detached" / job_ref


#: the mode of an experiment's run directory by the cluster config's ``runs_mode``
RUN_DIR_MODES = {"private": 0o700, "group": 0o2770}


def make_run_dir(path: Path, runs_mode: str = "private") -> Path:
    """Create an experiment's (or its staging) directory with the site's mode, whatever
    the user's umask: under a shared runs_root, others never read it by default."""
    mode = RUN_DIR_MODES[runs_mode]
    path.mkdir(mode=mode)
    os.chmod(path, mode)
    return path


@dataclass(frozen=True)
class ExperimentPaths:
    """The files of one experiment's run directory."""

    root: Path

    @classmethod
    def of(cls, runs_root: Path, experiment_id: int) -> ExperimentPaths:
        return cls(Path(runs_root) / str(experiment_id))

    @classmethod
    def new(cls, runs_root: Path, experiment_id: int) -> ExperimentPaths:
        """The run directory of a just-recorded experiment; it must not exist yet."""
        paths = cls.of(runs_root, experiment_id)
        if paths.root.exists():
            from dethpc.common.errors import DethpcError

            raise DethpcError(f"run directory {paths.root} already exists; the runs root "
                              "and the database disagree (was the database replaced?)")
        return paths

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def context(self) -> Path:
        return self.root / "context"

    @property
    def arrays(self) -> Path:
        return self.root / "arrays"

    @property
    def submission(self) -> Path:
        """A search over a script (``dethpc sbatch --search``): the user's sbatch options
        and submit directory (``dethpc.jobs.script_jobs.SearchSubmission``)."""
        return self.context / "submission.json"

    @property
    def script(self) -> Path:
        """A search's copy of the user's script, run by every trial."""
        return self.context / "script"

    @property
    def submit_env(self) -> Path:
        """A search's submitting environment (``dethpc.launch.submitenv``)."""
        return self.context / "submit-env"

    def array_script(self, batch_id: int) -> Path:
        return self.arrays / f"batch-{batch_id}.sbatch"

    @property
    def bin(self) -> Path:
        """``dethpc`` shim put first on a wrapped script's PATH (nothing else is there,
        so the user's ``python`` is never shadowed)."""
        return self.root / "bin"

    @property
    def trials(self) -> Path:
        """One directory per trial, named by its id."""
        return self.root / "trials"

    def trial(self, trial_id: int) -> TrialPaths:
        return TrialPaths(self.trials / str(trial_id))

    def trial_ids(self) -> list[int]:
        """The trials that have a directory now, in id order."""
        if not self.trials.is_dir():
            return []
        return sorted(int(d.name) for d in self.trials.iterdir() if d.name.isdigit())

    @property
    def verdict_script(self) -> Path:
        """The script Slurm judges at submit (``sbatch --test-only``), before any trial."""
        return self.root / "job.sbatch"

    def ensure(self) -> ExperimentPaths:
        self.arrays.mkdir(parents=True, exist_ok=True)
        self.trials.mkdir(parents=True, exist_ok=True)
        return self


def shared_checkpoint_dir(storage: Path, experiment_id: int, trial_id: int) -> Path:
    """A trial's checkpoints under a ``checkpoint_storage.path`` outside the run directory
    (a site's shared checkpoint file system)."""
    return Path(storage) / f"exp-{experiment_id}" / f"trial-{trial_id}"

