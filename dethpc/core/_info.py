"""What the job knows about itself: environment variables and run-directory files.

Owns: ``ClusterInfo``
(trial/experiment ids, run id, trial seed, directories, the experiment config, and
Determined's spellings: ``.trial`` -> ``TrialInfo``, ``.user_data``, ``.task_type``,
``.container_addrs``, ``.slot_ids``, ``.agent_id``, ... read from Slurm's environment
through ``dethpc.common.slots``), Determined's ``TrialInfo``, ``RendezvousInfo`` and
``ResourcesInfo``, and the readers of ``hparams.json`` and the experiment's ``config.yaml``.
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
    ENV_DET_INTER_NODE_NETWORK_INTERFACE,
    ENV_DET_STEPS_COMPLETED,
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
        return read_json_object(Path(override), f"hyperparameter file (${ENV_HPARAMS_FILE})")
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


class TrialInfo:
    """Determined's ``det.get_cluster_info().trial``: the trial that is running (the same
    constructor as Determined's; ``config``, ``steps_completed``, ``trial_run_id``,
    ``debug`` and ``inter_node_network_interface`` are kept private, as there)."""

    def __init__(self, trial_id: int, experiment_id: int, trial_seed: int,
                 hparams: dict[str, Any], config: dict[str, Any], steps_completed: int,
                 trial_run_id: int, debug: bool,
                 inter_node_network_interface: str | None) -> None:
        self.trial_id = trial_id
        self.experiment_id = experiment_id
        self.trial_seed = trial_seed
        self.hparams = hparams
        #: the experiment config (private in Determined too: read ``hparams``/``user_data``)
        self._config = config
        #: the steps of the checkpoint this run started from (``$DET_STEPS_COMPLETED``)
        self._steps_completed = steps_completed
        #: 1 on the first run, +1 per requeue or resume (as Determined's)
        self._trial_run_id = trial_run_id
        self._debug = debug
        self._inter_node_network_interface = inter_node_network_interface

    def __repr__(self) -> str:
        return (f"TrialInfo(trial_id={self.trial_id}, experiment_id={self.experiment_id}, "
                f"trial_seed={self.trial_seed}, hparams={self.hparams!r})")


class RendezvousInfo:
    """Determined's ``RendezvousInfo``: the trial's nodes ("containers"), this node's
    index and the slots of each node."""

    def __init__(self, container_addrs: list[str], container_rank: int,
                 container_slot_counts: list[int]) -> None:
        self.container_addrs = container_addrs
        self.container_rank = container_rank
        self.container_slot_counts = container_slot_counts


class ResourcesInfo:
    """Determined's ``ResourcesInfo``: the UUIDs of this node's GPUs."""

    def __init__(self, gpu_uuids: list[str]) -> None:
        self._gpu_uuids = gpu_uuids

    @property
    def gpu_uuids(self) -> list[str]:
        return self._gpu_uuids


def query_gpu_uuids(devices: list[str], timeout_s: float = 10.0) -> list[str]:
    """The UUIDs of GPUs ``devices`` (indices) from ``nvidia-smi``; ``[]`` when it is
    absent or fails (Determined reads them the same way, by inspection)."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None or not devices:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader",
                               "-i", ",".join(devices)], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


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
    #: this node's ``ResourcesInfo`` once known (Determined's ``_resources_info``)
    _resources: list[ResourcesInfo] = field(default_factory=list, repr=False)

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
        """``<experiment>.<trial>`` (Determined's: ``<experiment>.<uuid>``)."""
        return f"{self.experiment_id}.{self.trial_id}"

    @property
    def allocation_id(self) -> str:
        """One per run of the trial: ``<task_id>.<trial_run_id>`` (as Determined's; the
        run counts from 1)."""
        return f"{self.task_id}.{self.run_id + 1}"

    @property
    def agent_id(self) -> str:
        """This node's name (``$SLURMD_NODENAME``, else the hostname), as Determined's Slurm
        launcher sets it."""
        from dethpc.common.slots import agent_id

        return agent_id(self._env)

    @property
    def cluster_id(self) -> str:
        """The Slurm cluster's name (``$SLURM_CLUSTER_NAME``; "" outside Slurm)."""
        return self._env.get("SLURM_CLUSTER_NAME", "")

    @property
    def slot_ids(self) -> list[int]:
        """This node's slots: its GPU indices, else ``0..n-1`` for its CPU slots."""
        from dethpc.common.slots import slot_ids

        return slot_ids(self._env)

    @property
    def _rendezvous_info(self) -> RendezvousInfo:
        """Determined's ``RendezvousInfo`` of the trial, from Slurm's environment: its
        nodes (``$SLURM_JOB_NODELIST`` expanded, first node first), this node's index
        (``$SLURM_NODEID``) and each node's slots."""
        from dethpc.common.hostlist import expand_hostlist
        from dethpc.common.slots import slot_counts

        spec = self._env.get("SLURM_JOB_NODELIST") or self._env.get("SLURM_NODELIST") or ""
        return RendezvousInfo(expand_hostlist(spec) if spec else ["127.0.0.1"],
                              _env_int("SLURM_NODEID", self._env) or 0, slot_counts(self._env))

    @property
    def container_slot_counts(self) -> list[int]:
        """The slots of each of the trial's nodes, first node first."""
        return self._rendezvous_info.container_slot_counts

    @property
    def gpu_uuids(self) -> list[str]:
        """This node's GPUs' UUIDs: named by the environment, else asked of ``nvidia-smi``
        (once per process); ``[]`` without GPUs or when they cannot be known."""
        from dethpc.common.slots import gpu_devices, gpu_uuids

        if not self._resources:
            known = gpu_uuids(self._env)
            self._resources.append(ResourcesInfo(
                known if known is not None else query_gpu_uuids(gpu_devices(self._env))))
        return self._resources[0].gpu_uuids

    @property
    def master_url(self) -> str:
        """There is no master: always ``""``."""
        return ""

    @property
    def session_token(self) -> str:
        """There is no master to log in to: always ``""``."""
        return ""

    @property
    def master_cert_name(self) -> str | None:
        return None

    @property
    def master_cert_file(self) -> str | None:
        return None

    @property
    def trial(self) -> TrialInfo:
        """The running trial (``trial_id``, ``experiment_id``, ``trial_seed``, ``hparams``).

        In a trial directory without ids (``--local --test``) the ids are 0."""
        if not self.on_cluster:
            raise DethpcError("get_cluster_info().trial is only available inside a trial "
                              f"({ENV_TRIAL_DIR} is not set)")
        config = self.experiment_config
        return TrialInfo(trial_id=self.trial_id or 0, experiment_id=self.experiment_id or 0,
                         trial_seed=self.trial_seed or 0,
                         hparams=read_hparams(self.trial_dir, self._env), config=config,
                         steps_completed=_env_int(ENV_DET_STEPS_COMPLETED, self._env) or 0,
                         trial_run_id=self.run_id + 1, debug=bool(config.get("debug")),
                         inter_node_network_interface=self._env.get(
                             ENV_DET_INTER_NODE_NETWORK_INTERFACE) or None)

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's ``data`` field (``{}`` when absent)."""
        data = self.experiment_config.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def container_addrs(self) -> list[str]:
        """The trial's nodes (``$SLURM_JOB_NODELIST`` expanded), first node first."""
        return self._rendezvous_info.container_addrs

    @property
    def container_rank(self) -> int:
        """This node's index among ``container_addrs`` (``$SLURM_NODEID``)."""
        return self._rendezvous_info.container_rank

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
