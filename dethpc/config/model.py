"""Typed, validated configuration values (the output of the config parsers).

Owns: the dataclasses for the experiment config (Determined field names) and
the cluster config (admin's pools -> partitions).
Must not: parse YAML or validate; ``dethpc.config.experiment`` and
``dethpc.config.cluster`` build these from raw dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeAlias

from dethpc.common.errors import FieldError


class Unit(StrEnum):
    RECORDS = "records"
    BATCHES = "batches"
    EPOCHS = "epochs"


@dataclass(frozen=True)
class Length:
    """A training length, e.g. ``{batches: 100}``."""

    unit: Unit
    value: int

    def to_dict(self) -> dict[str, int]:
        return {self.unit.value: self.value}


# ----------------------------------------------------------------- hyperparameters
@dataclass(frozen=True)
class ConstHP:
    val: Any


@dataclass(frozen=True)
class IntHP:
    minval: int
    maxval: int
    count: int | None = None


@dataclass(frozen=True)
class DoubleHP:
    minval: float
    maxval: float
    count: int | None = None


@dataclass(frozen=True)
class LogHP:
    """Values base**x for x uniform in [minval, maxval] (Determined semantics)."""

    minval: float
    maxval: float
    base: float = 10.0
    count: int | None = None


@dataclass(frozen=True)
class CategoricalHP:
    vals: tuple[Any, ...]


HParam: TypeAlias = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP
#: a hyperparameter tree: leaves are HParam, inner nodes are dicts (nested hparams)
HParamTree: TypeAlias = dict[str, "HParam | HParamTree"]


# ------------------------------------------------------------------------ searcher
#: the name of a searcher in ``dethpc.config.searcher_registry`` (single, random, grid,
#: adaptive_asha, ...); the registry, not a type, lists the allowed names
SearcherName: TypeAlias = str


class AshaMode(StrEnum):
    """``adaptive_asha`` ``mode``: how many brackets (``dethpc.searchers.asha.mode_brackets``)."""

    AGGRESSIVE = "aggressive"
    STANDARD = "standard"
    CONSERVATIVE = "conservative"


class AshaVariant(StrEnum):
    """``adaptive_asha`` ``variant``: stop losers early, or promote winners (ASHA paper)."""

    STOPPING = "stopping"
    PROMOTION = "promotion"


@dataclass(frozen=True)
class SearcherConfig:
    """The validated ``searcher`` section. The keys common to every searcher come
    first; the searcher-owned keys with a field here (ASHA's, Determined's names)
    follow; a registered searcher's keys without a field land in ``options``.
    The field defaults are the defaults the searchers' specs declare."""

    name: SearcherName
    metric: str
    smaller_is_better: bool = True
    #: target length of a full trial, normalized from max_length or time_metric+max_time
    max_length: Length | None = None
    #: when time_metric is used, the metric name reported in validation (e.g. "batches")
    time_metric: str | None = None
    max_time: int | None = None
    max_trials: int = 1
    max_concurrent_trials: int = 16
    # adaptive_asha
    mode: AshaMode = AshaMode.STANDARD
    divisor: int = 4
    max_rungs: int = 5
    bracket_rungs: tuple[int, ...] = ()
    variant: AshaVariant = AshaVariant.STOPPING
    #: seconds a stopped trial gets to checkpoint and exit before scancel
    stop_grace_s: int = 60
    #: values of keys a registered searcher owns that have no field above, by key
    options: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ other sections
@dataclass(frozen=True)
class ResourcesConfig:
    slots_per_trial: int = 1
    resource_pool: str | None = None
    max_slots: int | None = None
    priority: int | None = None


@dataclass(frozen=True)
class CheckpointStorage:
    type: Literal["shared_fs", "directory"] = "shared_fs"
    #: where checkpoints go; None = the trial's run directory
    path: Path | None = None
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1


@dataclass(frozen=True)
class EnvironmentConfig:
    image: str | None = None            # cpu image (or the only one)
    image_gpu: str | None = None        # cuda image when a dict {cpu:, cuda:} was given
    environment_variables: dict[str, str] = field(default_factory=dict)
    #: variables for GPU trials when the dict form {cpu: [...], cuda: [...]} was given;
    #: None = use ``environment_variables`` for GPU trials too
    environment_variables_gpu: dict[str, str] | None = None


@dataclass(frozen=True)
class BindMount:
    host_path: str
    container_path: str
    read_only: bool = False


ReadyCheck = Literal["port", "file", "none"]


@dataclass(frozen=True)
class HetComponent:
    """One extra component of a trial's heterogeneous job (``slurm.components``)."""

    name: str
    entrypoint: str | tuple[str, ...]
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    resource_pool: str | None = None    # None: the trial's pool
    ready: ReadyCheck = "port"          # what "up" means before the trial starts
    ready_timeout_s: int = 300


@dataclass(frozen=True)
class WorkerPool:
    """Run trials in a pool of long-lived workers (``slurm.workers`` of an experiment, or
    a resource pool's ``workers`` as the site's default; docs/worker-pool.md)."""

    enabled: bool = False
    #: worker tasks in the pool's array; 0: the searcher's ``max_concurrent_trials``
    count: int = 0
    #: modules each worker imports once, before it forks its trials (the warm start)
    preload: tuple[str, ...] = ("torch",)
    #: how often a worker renews the lease of the trial it runs
    heartbeat_s: float = 5.0
    #: a lease not renewed for this long is handed back (its worker's node died)
    lease_timeout_s: float = 60.0
    #: a worker with nothing to claim for this long exits (0: only on drain or retire); the
    #: daemon submits workers again when work comes. The daemon already retires idle
    #: workers beyond the live runs each tick (``plan_workers``); this bounds the rest (a
    #: daemon down or slow): 30 s, three of its longest ticks (``tick_max_s`` 10), by which
    #: the run the searcher makes of a run's end has reached the queue (docs/worker-pool.md)
    idle_exit_s: float = 30.0


@dataclass(frozen=True)
class BadNodes:
    """``slurm.bad_nodes``: a node on which ``failures`` runs of the experiment's trials
    failed in a row, the last within ``window_s``, is left out of its later jobs
    (``--exclude``; docs/reliability.md, "Bad nodes"). ``failures`` 0: never."""

    failures: int = 3
    window_s: int = 3600


@dataclass(frozen=True)
class Watchdog:
    """``slurm.watchdog``: a running trial that shows no progress (``metrics.jsonl``
    growing, the in-job API's heartbeat; with ``output``, its job output files growing)
    for its allowed idle time is hung: its ranks dump their stacks and the job ends, a
    counted restart (docs/reliability.md). A wrapped script (``dethpc sbatch``, a search
    of scripts) has no heartbeat: it is watched only when ``output`` opts it in."""

    #: allowed idle seconds once the run made progress; None: ``auto`` (from the trial's
    #: own longest gap, ``dethpc.control.hangs``); 0: the watchdog is off
    max_idle_s: float | None = None
    #: allowed seconds before a run's first progress (imports, data loading); at least
    #: ``max_idle_s``
    startup_s: float = 1800.0
    #: the job's output files growing (stdout/stderr: the trial log, a wrapped script's
    #: own ``--output``/``--error``) count as progress too; for a wrapped script, the
    #: opt-in to being watched at all
    output: bool = False

    @property
    def enabled(self) -> bool:
        return self.max_idle_s != 0

    def watches(self, wrapped_script: bool) -> bool:
        """Whether the watchdog watches a trial: a managed one unless turned off; a
        wrapped script (no heartbeat, maybe no metrics) only when ``output`` is on."""
        return self.enabled and (self.output or not wrapped_script)


@dataclass(frozen=True)
class Stragglers:
    """``slurm.stragglers``: in a multi-rank trial, a rank whose own time per step (its
    batch loading and ``train_batch`` outside the gradient all-reduce) is more than
    ``behind_pct`` percent over the ranks' median is shown as the trial's straggler in
    ``describe`` and the dashboard, with its node (docs/reliability.md). 0: never."""

    behind_pct: float = 20.0


@dataclass(frozen=True)
class SlurmSection:
    sbatch_args: tuple[str, ...] = ()
    gpu_type: str | None = None
    slots_per_node: int | None = None
    time: str | None = None             # walltime per job (sbatch --time syntax)
    components: tuple[HetComponent, ...] = ()
    #: None: the resource pool's default (``ClusterConfig.worker_pool``)
    workers: WorkerPool | None = None
    bad_nodes: BadNodes = field(default_factory=BadNodes)
    watchdog: Watchdog = field(default_factory=Watchdog)
    stragglers: Stragglers = field(default_factory=Stragglers)


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    entrypoint: str | tuple[str, ...]
    searcher: SearcherConfig
    hyperparameters: HParamTree = field(default_factory=dict)
    description: str = ""
    labels: tuple[str, ...] = ()
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    checkpoint_storage: CheckpointStorage = field(default_factory=CheckpointStorage)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    bind_mounts: tuple[BindMount, ...] = ()
    max_restarts: int = 5
    min_validation_period: Length | None = None
    min_checkpoint_period: Length | None = None
    records_per_epoch: int | None = None
    experiment_seed: int = 0
    slurm: SlurmSection = field(default_factory=SlurmSection)
    data: dict[str, Any] = field(default_factory=dict)
    #: the validated raw dict (overrides applied), what config.yaml stores
    raw: dict[str, Any] = field(default_factory=dict)
    #: one line per accepted-but-ignored field (Kubernetes-only fields, ...)
    warnings: tuple[str, ...] = ()
    #: valid (Determined accepts them) but not servable here: ``submit`` refuses these
    unsupported: tuple[FieldError, ...] = ()


# ------------------------------------------------------------------ cluster config
class RequeueMode(StrEnum):
    """How a pool's jobs ask Slurm to requeue them (cluster config ``pools.X.requeue``)."""

    #: ``--requeue``: a job requeued after a node failure waits Slurm's ``requeue_delay``
    #: (``cred_expire``, 120 s by default) and queues again by its priority
    NORMAL = "normal"
    #: ``--requeue=expedite`` (new in Slurm 25.11; the site must set
    #: ``SlurmctldParameters=enable_expedited_requeue``): after a node failure the job is
    #: eligible at once, at the top of the queue; after a run that exits non-zero Slurm
    #: requeues it *held* (the daemon releases it when the trial has restarts left:
    #: docs/admin.md)
    EXPEDITE = "expedite"

    @property
    def sbatch_option(self) -> str:
        return "--requeue=expedite" if self is RequeueMode.EXPEDITE else "--requeue"


@dataclass(frozen=True)
class ResourcePool:
    name: str
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    slots_per_node: int = 1
    #: "gpu" -> --gpus-per-node; None -> slots are CPU tasks
    gres: str | None = None
    gpu_type: str | None = None
    cpus_per_slot: int = 1
    mem_per_slot: str | None = None     # sbatch --mem-per-cpu style, e.g. "2G"
    preemptible: bool = False
    default_time: str | None = None     # sbatch --time syntax, e.g. "01:00:00"
    signal: str = "USR2"                # NCCL claims USR1
    signal_grace_s: int = 120           # seconds before the limit the signal is sent
    socket_ifname: str | None = None    # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    sbatch_args: tuple[str, ...] = ()
    #: ``--requeue`` or ``--requeue=expedite`` on this pool's jobs
    requeue: RequeueMode = RequeueMode.NORMAL
    #: the site's default for experiments on this pool that do not set ``slurm.workers``
    workers: WorkerPool = field(default_factory=WorkerPool)


@dataclass(frozen=True)
class ContainerSettings:
    """The site's container runtime (cluster config ``containers``; docs/containers.md)."""

    runtime: Literal["none", "apptainer", "singularity", "charliecloud"] = "none"
    #: Apptainer/Singularity: where images become SIFs, once (shared storage)
    sif_cache: Path | None = None
    #: the site's binds, passed as written (``src[:dst[:opts]]``)
    binds: tuple[str, ...] = ()
    #: where the pull happens: ``login`` (the daemon, before the first sbatch) or ``job``
    #: (a pre-pull job the trials depend on)
    pull: Literal["login", "job"] = "login"
    #: ``APPTAINER_CACHEDIR``/``APPTAINER_TMPDIR`` of a pull (off /tmp and home quotas)
    cache_dir: Path | None = None
    tmp_dir: Path | None = None
    #: start the container with a clean environment and pass dethpc's, Slurm's, NCCL's,
    #: CUDA's, the config's and ``pass_env`` variables explicitly
    cleanenv: bool = True
    #: more variables (names or ``PREFIX_*``) to pass under ``cleanenv``
    pass_env: tuple[str, ...] = ()
    #: a private /tmp per task (Apptainer ``--containall --workdir``, Charliecloud
    #: ``--private-tmp``)
    containall: bool = False
    #: the python inside the image (``python``/``python3`` of an entrypoint become it)
    python: str = "python3"


@dataclass(frozen=True)
class ClusterConfig:
    backend: Literal["local", "slurm"] = "local"
    runs_root: Path = Path("~/.dethpc/runs")
    database_url: str = ""              # "" = sqlite:///<home>/dethpc.db
    #: a file holding the database URL with the user's credentials (``~`` is the user
    #: running dethpc); refused unless only its owner may read it (dethpc.store.credentials)
    database_url_file: Path | None = None
    default_pool: str = "default"
    pools: dict[str, ResourcePool] = field(default_factory=dict)
    containers: ContainerSettings = field(default_factory=ContainerSettings)
    #: local backend: most jobs running at once (0 = number of CPUs)
    local_max_concurrent: int = 0
    #: slurm CLI timeouts and retries
    command_timeout_s: float = 60.0
    command_retries: int = 3
    #: daemon loop: shortest and longest sleep between ticks
    tick_min_s: float = 0.5
    tick_max_s: float = 10.0
    #: between ticks, how often the daemon stats the metrics files of live trials and
    #: ingests those that grew (no backend call), so a searcher stop lands fast; 0: off
    metrics_poll_s: float = 0.2
    #: while the only jobs of the open experiments are worker-pool workers (their runs'
    #: progress and ends come through files), the backend is polled at most this often
    #: instead of every tick; 0: every tick
    pool_poll_s: float = 10.0
    #: the same while every worker's ``pool/alive`` file agrees with Slurm's last answer
    #: (each running one renewed within three heartbeats, none of the others there):
    #: the backend is then asked at most this often; 0: no longer than ``pool_poll_s``
    pool_quiet_poll_s: float = 60.0
    #: how long the daemon's lease lasts unrenewed: a dead daemon's experiments are taken
    #: over by another login node's daemon that long after it died (dethpc.control.lease)
    daemon_lease_s: float = 60.0
    #: who may read an experiment's run directory under a shared runs_root: ``private``
    #: (the owner only, 0700) or ``group`` (the owner's group too, 2770)
    runs_mode: Literal["private", "group"] = "private"
    #: python used inside jobs (default: the interpreter running the daemon)
    python: str | None = None
    #: the directory of Slurm's client commands (``sbatch``, ``squeue`` ...) when they are
    #: not the first on ``$PATH`` (a site's module, a second Slurm): put first on the PATH
    #: of every command dethpc runs and of its jobs (``slurm_client_env``)
    slurm_bin: Path | None = None
    #: the slurm.conf those commands read (``$SLURM_CONF``); None: theirs by default
    slurm_conf: Path | None = None
    #: ``dethpc admin check`` lists the nodes that experiments left out as bad nodes
    #: (``slurm.bad_nodes``), with the failed runs and when; dethpc never drains a node
    report_bad_nodes: bool = False
    #: the longest idle time the hang watchdog allows any trial (auto or an experiment's
    #: own ``slurm.watchdog.max_idle_s``, startup included); 0: no cap
    max_idle_cap_s: float = 0.0
    source: str = "<built-in defaults>"

    def worker_pool(self, cfg: ExperimentConfig) -> WorkerPool:
        """The experiment's worker-pool setting (``worker_pool_of``), its resource pool
        looked up here (``ConfigError`` for an unknown one, asked only without its own
        ``slurm.workers``)."""
        wp = worker_pool_of(cfg, lambda: self.pool(cfg.resources.resource_pool))
        assert wp is not None   # ``pool`` gives a pool or raises
        return wp

    def pool(self, name: str | None) -> ResourcePool:
        key = name or self.default_pool
        if key in self.pools:
            return self.pools[key]
        from dethpc.common.errors import ConfigError, FieldError

        allowed = ", ".join(sorted(self.pools)) or "(none defined)"
        raise ConfigError(
            [FieldError("resources.resource_pool",
                        f"unknown resource pool {key!r}; allowed: {allowed}")],
            source="experiment config",
        )


def worker_pool_of(cfg: ExperimentConfig,
                   pool: Callable[[], ResourcePool | None]) -> WorkerPool | None:
    """The one rule for an experiment's worker-pool setting: its own ``slurm.workers``,
    else its resource pool's ``workers`` (``pool()``, asked only then; None: the pool is
    not known). ``ClusterConfig.worker_pool`` and the daemon's per-tick ``Resolved``
    both ask it."""
    if cfg.slurm.workers is not None:
        return cfg.slurm.workers
    resource_pool = pool()
    return resource_pool.workers if resource_pool is not None else None
