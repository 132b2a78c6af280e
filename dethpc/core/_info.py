"""What the job knows about itself: environment variables and run-directory files.

Owns: ``ClusterInfo``
(trial/experiment ids, run id, trial seed, directories, the experiment config, and
Determined's spellings: ``.trial`` -> ``TrialInfo``, ``.user_data``, ``.task_type``,
``.container_addrs``, ...) and the readers of ``hparams.json`` and the experiment's
``config.yaml``.
Must not: import torch, write any file, or know the checkpoint format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import (
    ENV_CHECKPOINT_DIR,
    ENV_CONTEXT_DIR,
    ENV_EXPERIMENT_CONFIG,
    ENV_EXPERIMENT_ID,
    ENV_HPARAMS_FILE,
    ENV_RUN_ID,
    ENV_TRIAL_DIR,
    ENV_TRIAL_ID,
    ENV_TRIAL_SEED,
)
from dethpc.common.paths import TrialPaths

#: Determined's ``det.LOG_FORMAT``, the same string: ``logging.basicConfig(format=...)``
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def _env_int(name: str, env: Mapping[str, str]) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise DethpcError(f"environment variable {name}={raw!r} is not an integer; "
                          "unset it or give a whole number") from exc


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """Read a JSON file that must hold an object; a clear error otherwise."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DethpcError(f"{what} {path} does not exist; the daemon writes it before "
                          "submitting the job") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise DethpcError(f"{what} {path} cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DethpcError(f"{what} {path} must hold a JSON object, found {type(data).__name__}")
    return data


def read_hparams(trial_dir: Path | None, env: Mapping[str, str]) -> dict[str, Any]:
    """``hparams.json`` of the trial; off-cluster ``$DETHPC_HPARAMS_FILE`` or ``{}``."""
    if trial_dir is not None:
        path = TrialPaths(trial_dir).hparams
        if path.exists() or not env.get(ENV_HPARAMS_FILE):
            return read_json_object(path, "hyperparameter file")
    override = env.get(ENV_HPARAMS_FILE)
    if override:
        return read_json_object(Path(override), "hyperparameter file ($DETHPC_HPARAMS_FILE)")
    return {}


def _read_experiment_config(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {}
    import yaml  # a dethpc dependency; imported lazily to keep init() cheap

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DethpcError(f"experiment config {path} cannot be read: {exc}") from exc
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class TrialInfo:
    """Determined's ``det.get_cluster_info().trial``: the trial that is running."""

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    #: the experiment config (private in Determined too: read ``hparams``/``user_data``)
    _config: dict[str, Any]
    #: 0 on the first run, +1 per requeue (Determined's ``_trial_run_id`` starts at 1)
    _trial_run_id: int
    #: the searcher unit's steps of the latest checkpoint is not known here: always 0
    _steps_completed: int = 0


@dataclass
class ClusterInfo:
    """Facts about this trial run. Off-cluster every id is ``None``.

    ``latest_checkpoint`` is looked up lazily (it verifies checksums) through the
    function the checkpoint context provides.
    """

    trial_dir: Path | None = None
    trial_id: int | None = None
    experiment_id: int | None = None
    #: ``DETHPC_RUN_ID`` (= ``SLURM_RESTART_COUNT``): 0 on the first run, +1 per requeue
    run_id: int = 0
    #: ``DETHPC_TRIAL_SEED`` (experiment_seed + trial id) when the daemon set it
    trial_seed: int | None = None
    context_dir: Path | None = None
    experiment_config_path: Path | None = None
    _env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _latest: Callable[[], str | None] | None = field(default=None, repr=False)
    _latest_cache: list[str | None] = field(default_factory=list, repr=False)
    _config_cache: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def restart_count(self) -> int:
        return self.run_id

    @property
    def on_cluster(self) -> bool:
        return self.trial_dir is not None

    @property
    def latest_checkpoint(self) -> str | None:
        """uuid of the newest complete checkpoint on disk at first access, or None."""
        if not self._latest_cache:
            self._latest_cache.append(self._latest() if self._latest else None)
        return self._latest_cache[0]

    @property
    def experiment_config(self) -> dict[str, Any]:
        """The raw experiment config (``config.yaml``), ``{}`` when there is none."""
        if not self._config_cache:
            self._config_cache.append(_read_experiment_config(self.experiment_config_path))
        return self._config_cache[0]

    # ---------------------------------------------------- Determined's spellings
    @property
    def task_type(self) -> str:
        """``"TRIAL"`` on the cluster (the only kind of task dethpc runs)."""
        return "TRIAL" if self.on_cluster else "LOCAL"

    @property
    def task_id(self) -> str:
        return f"{self.experiment_id}.{self.trial_id}"

    @property
    def allocation_id(self) -> str:
        """One per run of the trial: ``<experiment>.<trial>.<run>``."""
        return f"{self.task_id}.{self.run_id}"

    @property
    def trial(self) -> TrialInfo:
        """The running trial (``trial_id``, ``experiment_id``, ``trial_seed``, ``hparams``).

        In a trial directory without ids (``--local --test``) the ids are 0."""
        if not self.on_cluster:
            raise DethpcError("get_cluster_info().trial is only available inside a trial "
                              "(DETHPC_TRIAL_DIR is not set)")
        return TrialInfo(trial_id=self.trial_id or 0, experiment_id=self.experiment_id or 0,
                         trial_seed=self.trial_seed or 0,
                         hparams=read_hparams(self.trial_dir, self._env),
                         _config=self.experiment_config, _trial_run_id=self.run_id)

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's ``data`` field (``{}`` when absent)."""
        data = self.experiment_config.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def container_addrs(self) -> list[str]:
        """The trial's nodes (``$SLURM_JOB_NODELIST`` expanded), first node first."""
        from dethpc.common.hostlist import expand_hostlist

        spec = self._env.get("SLURM_JOB_NODELIST") or self._env.get("SLURM_NODELIST") or ""
        return expand_hostlist(spec) if spec else ["127.0.0.1"]

    @property
    def container_rank(self) -> int:
        """This node's index among ``container_addrs`` (``$SLURM_NODEID``)."""
        return _env_int("SLURM_NODEID", self._env) or 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClusterInfo:
        env = os.environ if env is None else env
        raw_dir = env.get(ENV_TRIAL_DIR)
        trial_dir = Path(raw_dir) if raw_dir else None
        cfg = env.get(ENV_EXPERIMENT_CONFIG)
        if cfg:
            cfg_path: Path | None = Path(cfg)
        elif trial_dir is not None:
            cfg_path = trial_dir.parent.parent / "config.yaml"
        else:
            cfg_path = None
        run_id = _env_int(ENV_RUN_ID, env)
        if run_id is None:
            run_id = _env_int("SLURM_RESTART_COUNT", env) or 0
        ctx_dir = env.get(ENV_CONTEXT_DIR)
        return cls(
            trial_dir=trial_dir,
            trial_id=_env_int(ENV_TRIAL_ID, env),
            experiment_id=_env_int(ENV_EXPERIMENT_ID, env),
            run_id=run_id,
            trial_seed=_env_int(ENV_TRIAL_SEED, env),
            context_dir=Path(ctx_dir) if ctx_dir else None,
            experiment_config_path=cfg_path,
            _env=dict(env),
        )


def checkpoint_dir(trial_dir: Path, env: Mapping[str, str]) -> Path:
    """``$DETHPC_CHECKPOINT_DIR`` or ``<trial_dir>/checkpoints``."""
    raw = env.get(ENV_CHECKPOINT_DIR)
    return Path(raw) if raw else TrialPaths(trial_dir).checkpoints
