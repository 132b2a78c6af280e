"""Every environment variable dethpc sets or reads: one table (name, setter, reader, meaning).

Owns: ``TABLE``, one ``EnvVar`` row per variable, ``DETHPC_*`` and Determined's ``DET_*``
alike: the variables a job's processes see (``Where.JOB``: what dethpc's job script,
launchers and pool worker set, and the optional settings a user or site may give a job),
the settings of dethpc's own commands and daemon (``Where.LOGIN``) and the dev cluster's
(``Where.DEV``); one constant per name (``ENV_*``; two ``*_PREFIX`` constants for the
families ``DETHPC_HP_<NAME>`` and ``DETHPC_COMPONENT_<NAME>_*``), which every other module
imports instead of spelling the name; ``trial_contract``, the variables every trial's job
exports whatever runs in it (a managed trial, ``dethpc.jobs.render.trial_env``; a
search's script, ``dethpc.jobs.script_jobs``; the ``dethpc sbatch`` wrapper, whose
template gets this module as ``names``); and ``doc_section``, the section of
docs/job-environment.md generated from the table (``python scripts/job_environment.py
--write`` rewrites it; a unit test holds the doc, and every name the code, the templates
and the container files spell, against the table).

Determined's ``DET_*`` rows are exactly the variables a dethpc trial sees;
``dethpc.core.determined_rules.ENV_RULES`` classifies every variable of Determined's
(served, served differently, or absent and why): the ones it serves are these rows.
``dethpc.launch.detenv`` computes their values.

Outside this module, Python code never spells a job variable's name in a string (it
imports the constant; docstrings and comments may name it). The login side's and the dev
cluster's settings are rows too, so that every name is in one table, but a module that
reads one of them may still spell it (``dethpc.store``, ``dethpc.config.cluster``, the
CLI's help and messages): they are no part of a job's contract, and the test holds them
to "is a row" only.

Must not: import anything but the standard library (it sits in the bottom layer and is
imported by the in-job modules, which stay light), or read the environment
(``dethpc.core._info``, ``dethpc.launch`` and the modules named as readers do).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Setter(enum.Enum):
    """Who sets a variable."""

    SCRIPT = "the job script"
    RUN_START = "the job script at each run's start"
    WORKER = "the pool worker, per trial it runs"
    LAUNCHER = "dethpc's launchers"
    TASK = "an interactive task's job script"
    LOCAL = "the local backend"
    CONFIG = "the experiment config's environment_variables"
    USER = "the user or site (optional)"
    DEVCLUSTER = "the dev cluster"
    TESTS = "dethpc's tests"


class Where(enum.Enum):
    """Whose processes see a variable."""

    JOB = "a job's processes"
    LOGIN = "dethpc's commands and daemon"
    DEV = "the dev cluster's tools"


@dataclass(frozen=True)
class EnvVar:
    """One row of the table."""

    name: str
    set_by: tuple[Setter, ...]
    #: the modules (or the code) that read it
    read_by: str
    meaning: str
    where: Where = Where.JOB
    #: the name is a prefix: ``name<NAME>`` is one variable per hyperparameter or component
    family: bool = False

    @property
    def determined(self) -> bool:
        """One of Determined's ``DET_*`` variables."""
        return self.name.startswith("DET_")


# -- dethpc's variables of a job
ENV_EXPERIMENT_ID = "DETHPC_EXPERIMENT_ID"
ENV_TRIAL_ID = "DETHPC_TRIAL_ID"
ENV_TRIAL_DIR = "DETHPC_TRIAL_DIR"
ENV_EXPERIMENT_CONFIG = "DETHPC_EXPERIMENT_CONFIG"
ENV_PREEMPT_SIGNAL = "DETHPC_PREEMPT_SIGNAL"
ENV_TRIAL_SEED = "DETHPC_TRIAL_SEED"
ENV_CHECKPOINT_DIR = "DETHPC_CHECKPOINT_DIR"
ENV_CONTEXT_DIR = "DETHPC_CONTEXT_DIR"
ENV_BACKEND = "DETHPC_BACKEND"
ENV_SLOTS_PER_TRIAL = "DETHPC_SLOTS_PER_TRIAL"
ENV_SOCKET_IFNAME = "DETHPC_SOCKET_IFNAME"
ENV_CONTAINER_EXEC = "DETHPC_CONTAINER_EXEC"
ENV_CONTAINER_PYTHON = "DETHPC_CONTAINER_PYTHON"
ENV_HPARAMS = "DETHPC_HPARAMS"
ENV_HP_PREFIX = "DETHPC_HP_"
ENV_TARGET_LENGTH = "DETHPC_TARGET_LENGTH"
ENV_TARGET_UNIT = "DETHPC_TARGET_UNIT"
ENV_TEST_MODE = "DETHPC_TEST_MODE"
ENV_RUN_ID = "DETHPC_RUN_ID"
ENV_LATEST_CHECKPOINT = "DETHPC_LATEST_CHECKPOINT"
ENV_HET_JOB_ID = "DETHPC_HET_JOB_ID"
ENV_HET_COMPONENTS = "DETHPC_HET_COMPONENTS"
ENV_COMPONENT_PREFIX = "DETHPC_COMPONENT_"
ENV_COMPONENT = "DETHPC_COMPONENT"
ENV_READY_FILE = "DETHPC_READY_FILE"
ENV_NPROC_PER_NODE = "DETHPC_NPROC_PER_NODE"
ENV_TASK_ID = "DETHPC_TASK_ID"
ENV_TASK_KIND = "DETHPC_TASK_KIND"
ENV_TASK_DIR = "DETHPC_TASK_DIR"
ENV_DETERMINED_ALIAS = "DETHPC_DETERMINED_ALIAS"
# -- settings a user or site may give a job
ENV_HPARAMS_FILE = "DETHPC_HPARAMS_FILE"
ENV_MASTER_ADDR = "DETHPC_MASTER_ADDR"
ENV_MASTER_PORT = "DETHPC_MASTER_PORT"
ENV_NPROC = "DETHPC_NPROC"
ENV_LAUNCH_MODE = "DETHPC_LAUNCH_MODE"
ENV_GPU_ISOLATION = "DETHPC_GPU_ISOLATION"
ENV_MPI = "DETHPC_MPI"
ENV_MPI_BTL = "DETHPC_MPI_BTL"
ENV_CORE_PORT = "DETHPC_CORE_PORT"
ENV_CORE_CONNECT_TIMEOUT = "DETHPC_CORE_CONNECT_TIMEOUT"
ENV_VERDICT_WAIT_S = "DETHPC_VERDICT_WAIT_S"
ENV_LAUNCH_LOG = "DETHPC_LAUNCH_LOG"
ENV_RUN_MAIN_DEBUG = "DETHPC_RUN_MAIN_DEBUG"
ENV_LOG_LEVEL = "DETHPC_LOG_LEVEL"
ENV_DETACHED = "DETHPC_DETACHED"
ENV_METRIC = "DETHPC_METRIC"
ENV_SPOOL = "DETHPC_SPOOL"
# -- settings of dethpc's commands and daemon
ENV_HOME = "DETHPC_HOME"
ENV_CLUSTER_CONFIG = "DETHPC_CLUSTER_CONFIG"
ENV_DATABASE_URL_FILE = "DETHPC_DATABASE_URL_FILE"
ENV_DB_BUSY_TIMEOUT_S = "DETHPC_DB_BUSY_TIMEOUT_S"
ENV_SQLITE_JOURNAL = "DETHPC_SQLITE_JOURNAL"
ENV_SQLITE_SYNCHRONOUS = "DETHPC_SQLITE_SYNCHRONOUS"
ENV_DETECT = "DETHPC_DETECT"
ENV_FAST_READ = "DETHPC_FAST_READ"
ENV_FAST_SBATCH = "DETHPC_FAST_SBATCH"
ENV_CATCH_UP = "DETHPC_CATCH_UP"
ENV_REMOTE_CONFIG = "DETHPC_REMOTE_CONFIG"
ENV_TEMPLATE_DIR = "DETHPC_TEMPLATE_DIR"
ENV_FAULT_POINT = "DETHPC_FAULT_POINT"
# -- the dev cluster's
ENV_DEVCLUSTER_DIR = "DETHPC_DEVCLUSTER_DIR"
ENV_DEVCLUSTER_LANE = "DETHPC_DEVCLUSTER_LANE"
ENV_DEVCLUSTER_LANES = "DETHPC_DEVCLUSTER_LANES"
ENV_DEVCLUSTER_NODES = "DETHPC_DEVCLUSTER_NODES"
ENV_DEVCLUSTER_OWNER = "DETHPC_DEVCLUSTER_OWNER"
ENV_DEVCLUSTER_SLURM = "DETHPC_DEVCLUSTER_SLURM"
ENV_DEVCLUSTER_USERS = "DETHPC_DEVCLUSTER_USERS"
ENV_SLURM_SOURCE_DIR = "DETHPC_SLURM_SOURCE_DIR"
ENV_TEST_START_CLUSTER = "DETHPC_TEST_START_CLUSTER"
# -- Determined's variables of a trial (the values: dethpc.launch.detenv)
ENV_DET_EXPERIMENT_ID = "DET_EXPERIMENT_ID"
ENV_DET_TRIAL_ID = "DET_TRIAL_ID"
ENV_DET_TRIAL_SEED = "DET_TRIAL_SEED"
ENV_DET_TASK_ID = "DET_TASK_ID"
ENV_DET_TASK_TYPE = "DET_TASK_TYPE"
ENV_DET_RESOURCES_TYPE = "DET_RESOURCES_TYPE"
ENV_DET_SLOT_TYPE = "DET_SLOT_TYPE"
ENV_DET_WORKDIR = "DET_WORKDIR"
ENV_DET_EXPERIMENT_CONFIG = "DET_EXPERIMENT_CONFIG"
ENV_DET_INTER_NODE_NETWORK_INTERFACE = "DET_INTER_NODE_NETWORK_INTERFACE"
ENV_DET_TRIAL_RUN_ID = "DET_TRIAL_RUN_ID"
ENV_DET_ALLOCATION_ID = "DET_ALLOCATION_ID"
ENV_DET_HPARAMS = "DET_HPARAMS"
ENV_DET_LATEST_CHECKPOINT = "DET_LATEST_CHECKPOINT"
ENV_DET_STEPS_COMPLETED = "DET_STEPS_COMPLETED"
ENV_DET_AGENT_ID = "DET_AGENT_ID"
ENV_DET_CONTAINER_ID = "DET_CONTAINER_ID"
ENV_DET_SLOT_IDS = "DET_SLOT_IDS"
ENV_DET_UNIQUE_PORT_OFFSET = "DET_UNIQUE_PORT_OFFSET"
ENV_DET_CLUSTER_ID = "DET_CLUSTER_ID"
ENV_DET_RESOURCES_ID = "DET_RESOURCES_ID"
ENV_DET_USER = "DET_USER"
ENV_DET_CHIEF_IP = "DET_CHIEF_IP"

_S, _RS, _W, _L = Setter.SCRIPT, Setter.RUN_START, Setter.WORKER, Setter.LAUNCHER
_T, _U = Setter.TASK, Setter.USER
_CORE, _PT, _LAUNCH, _API = ("dethpc.core", "dethpc.pytorch", "dethpc.launch",
                             "the job API (dethpc.launch.jobapi)")
_DET = "Determined-style training code"
_USER = "the user's code"

#: every variable, in the order the docs show them
TABLE: tuple[EnvVar, ...] = (
    EnvVar(ENV_EXPERIMENT_ID, (_S,), f"{_CORE}, dethpc.launch.detenv",
           "the experiment's id in the store"),
    EnvVar(ENV_TRIAL_ID, (_S,), f"{_CORE}, dethpc.launch.detenv", "the trial's id in the store"),
    EnvVar(ENV_TRIAL_DIR, (_S,),
           f"{_CORE}, {_API}, {_LAUNCH}, dethpc.common.detached",
           "`<runs_root>/<exp>/trials/<trial>`; unset: off-cluster (Dummy contexts) or a "
           "detached job"),
    EnvVar(ENV_EXPERIMENT_CONFIG, (_S,), f"{_CORE}, {_PT}",
           "the path of the experiment's config.yaml (the Trainer's periods, `data`)"),
    EnvVar(ENV_PREEMPT_SIGNAL, (_S, _W), _CORE,
           "the signal name the batch shell forwards on preemption or the time limit "
           "(default `USR2`; TERM is always handled)"),
    EnvVar(ENV_TRIAL_SEED, (_S,), f"{_CORE}, {_PT}", "experiment_seed + trial id"),
    EnvVar(ENV_CHECKPOINT_DIR, (_S, _U), f"{_CORE}, dethpc.launch.detenv",
           "where checkpoints go (default `$DETHPC_TRIAL_DIR/checkpoints`; off-cluster "
           "`./checkpoints`)"),
    EnvVar(ENV_CONTEXT_DIR, (_S, _T), f"{_CORE}, {_PT}",
           "the snapshot of the model directory; also the working directory, and where "
           "`dethpc.pytorch.run` imports `module:Class` from"),
    EnvVar(ENV_BACKEND, (_S, _T, Setter.LOCAL), _LAUNCH,
           "`slurm` or `local` (`local`: the launchers never use srun)"),
    EnvVar(ENV_SLOTS_PER_TRIAL, (_S, _T), _LAUNCH,
           "`resources.slots_per_trial`: the ranks of a local launch"),
    EnvVar(ENV_SOCKET_IFNAME, (_S, _T), _LAUNCH,
           "the pool's `socket_ifname`: `NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME` and "
           "`HOROVOD_GLOO_IFACE` unless set"),
    EnvVar(ENV_CONTAINER_EXEC, (_S,), _LAUNCH,
           "the container runtime's exec prefix (JSON list) each rank is wrapped in"),
    EnvVar(ENV_CONTAINER_PYTHON, (_S,), _LAUNCH, "the python inside the container"),
    EnvVar(ENV_HPARAMS, (_S,), f"{_API}, {_USER}",
           "a search's script: the path of the trial's hyperparameters (JSON)"),
    EnvVar(ENV_HP_PREFIX, (_S,), _USER,
           "a search's script: one `DETHPC_HP_<NAME>` per hyperparameter (nested groups "
           "joined with `_`, upper case, other characters `_`)", family=True),
    EnvVar(ENV_TARGET_LENGTH, (_S,), _USER,
           "a search's script: the searcher's target length, when it has one"),
    EnvVar(ENV_TARGET_UNIT, (_S,), _USER, "the unit of `DETHPC_TARGET_LENGTH`"),
    EnvVar(ENV_TEST_MODE, (Setter.CONFIG, _U), _PT,
           "`1`: the Trainer's test mode (a test experiment, `dethpc test`)"),
    EnvVar(ENV_RUN_ID, (_RS, _W), f"{_CORE}, {_API}, dethpc.launch.detenv",
           "`SLURM_RESTART_COUNT` (0 on the first run); grows on each requeue"),
    EnvVar(ENV_LATEST_CHECKPOINT, (_RS, _W), _USER,
           "the trial's newest checkpoint at this run's start, when there is one"),
    EnvVar(ENV_HET_JOB_ID, (_S,), "dethpc.launch.hetjob",
           "a heterogeneous job's leader id, which both sides derive ports from"),
    EnvVar(ENV_HET_COMPONENTS, (_S,), "dethpc.launch.hetjob",
           "a heterogeneous job's groups in order (`trial,<component>,...`)"),
    EnvVar(ENV_COMPONENT_PREFIX, (_L,), _USER,
           "`DETHPC_COMPONENT_<NAME>_HOSTS`, `_ADDR`, `_PORT`, `_READY_FILE` of every part "
           "of a heterogeneous job", family=True),
    EnvVar(ENV_COMPONENT, (_L,), _USER, "a component's own name"),
    EnvVar(ENV_READY_FILE, (_L,), _USER,
           "the file a component creates when it is up (a new name per run)"),
    EnvVar(ENV_NPROC_PER_NODE, (_L,), "dethpc.launch.torch_distributed",
           "torchrun mode: the ranks per node, handed to the nested launcher"),
    EnvVar(ENV_TASK_ID, (_T,), _USER, "an interactive task's id"),
    EnvVar(ENV_TASK_KIND, (_T,), _USER, "an interactive task's kind"),
    EnvVar(ENV_TASK_DIR, (_T,), _USER, "an interactive task's own directory"),
    EnvVar(ENV_DETERMINED_ALIAS, (_RS, _W), _USER,
           "the directory of the job-side `determined` alias, put first on `PYTHONPATH` "
           "when no real Determined is importable (dethpc.launch.determined_alias)"),
    EnvVar(ENV_HPARAMS_FILE, (_U,), f"{_CORE}, {_API}", "off-cluster hyperparameters (JSON)"),
    EnvVar(ENV_MASTER_ADDR, (_U, _L), _LAUNCH,
           "the rendezvous host (default: the first host of the job)"),
    EnvVar(ENV_MASTER_PORT, (_U, _L), _LAUNCH,
           "the rendezvous port (default `15000 + job_id % 17000`)"),
    EnvVar(ENV_NPROC, (_U,), _LAUNCH, "the ranks of a local launch"),
    EnvVar(ENV_LAUNCH_MODE, (_U,), "dethpc.launch.torch_distributed, dethpc.launch.deepspeed",
           "`srun`/`torchrun` (torch), `srun`/`hostfile` (deepspeed)"),
    EnvVar(ENV_GPU_ISOLATION, (_U,), _LAUNCH,
           "`per-rank`: each rank sees only its GPU(s) in `CUDA_VISIBLE_DEVICES`. Off by "
           "default: torchrun does not isolate, and scripts written for it pick "
           "`cuda:LOCAL_RANK`"),
    EnvVar(ENV_MPI, (_U,), "dethpc.launch.mpi, dethpc.launch.deepspeed",
           "the srun MPI plugin (default: the first of pmix, pmi2 that `srun --mpi=list` "
           "offers, asked once per process)"),
    EnvVar(ENV_MPI_BTL, (_U,), "dethpc.launch.mpi",
           "Open MPI's `OMPI_MCA_btl` (default, when several nodes resolve to one address: "
           "`self,tcp`; Open MPI's shared memory crashes between fake nodes)"),
    EnvVar(ENV_CORE_PORT, (_U,), _CORE,
           "the port of `dethpc.core`'s TCP star on rank 0 (default `15000 + (job_id + "
           "8500) % 17000`, half the span away from the rendezvous port)"),
    EnvVar(ENV_CORE_CONNECT_TIMEOUT, (_U,), _CORE,
           "seconds the ranks of that star wait for each other (default 300)"),
    EnvVar(ENV_VERDICT_WAIT_S, (_U,), _CORE,
           "seconds a preempted trial waits for the searcher's verdict (default 2; 0: never)"),
    EnvVar(ENV_LAUNCH_LOG, (_U,), _LAUNCH, "the log level of `[dethpc.launch]` messages"),
    EnvVar(ENV_RUN_MAIN_DEBUG, (_U,), _LAUNCH, "set: say when a rank ends by `os._exit`"),
    EnvVar(ENV_LOG_LEVEL, (_U,), "dethpc.pytorch.run", "the log level of `dethpc.pytorch.run`"),
    EnvVar(ENV_DETACHED, (_U,), "dethpc.common.detached",
           "`0`: a plain Slurm job that calls dethpc does not register itself (stays "
           "untracked)"),
    EnvVar(ENV_METRIC, (_U,), "dethpc.common.detached",
           "the searcher metric of an adopted (detached) experiment (default `loss`)"),
    EnvVar(ENV_SPOOL, (_U,), "dethpc.common.paths (a detached job, the daemon)",
           "where jobs dethpc did not submit register themselves (default "
           "`<dethpc home>/spool`)"),
    EnvVar(ENV_HOME, (_U,), "dethpc.common.paths (the commands, the daemon, a detached job)",
           "dethpc's home: the default database, runs and spool (default `~/.dethpc`)",
           Where.LOGIN),
    EnvVar(ENV_CLUSTER_CONFIG, (_U,), "dethpc.config.cluster, the CLI",
           "the cluster config file", Where.LOGIN),
    EnvVar(ENV_DATABASE_URL_FILE, (_U,), "dethpc.store.credentials",
           "a file holding the database URL", Where.LOGIN),
    EnvVar(ENV_DB_BUSY_TIMEOUT_S, (_U,), "dethpc.store.sqlite",
           "seconds a SQLite connection waits for a lock (default 30)", Where.LOGIN),
    EnvVar(ENV_SQLITE_JOURNAL, (_U,), "dethpc.store.sqlite",
           "the SQLite journal mode (default: `wal` on a local filesystem, else `delete`; "
           "`wal` is refused off a local disk)", Where.LOGIN),
    EnvVar(ENV_SQLITE_SYNCHRONOUS, (_U,), "dethpc.store.sqlite",
           "SQLite's `synchronous` level (default `full`)", Where.LOGIN),
    EnvVar(ENV_FAST_READ, (_U,), "dethpc.surfaces.cli.fastread",
           "`0`: `experiment list`/`describe` and `trial logs` take the full CLI's path "
           "(SQLAlchemy) instead of reading a SQLite store at head with sqlite3",
           Where.LOGIN),
    EnvVar(ENV_FAST_SBATCH, (_U,), "dethpc.surfaces.cli.fastsbatch",
           "`0`: `dethpc sbatch` takes the full CLI's path (typer, SQLAlchemy) instead of "
           "writing its rows to a SQLite store at head with sqlite3", Where.LOGIN),
    EnvVar(ENV_DETECT, (_U,), "dethpc.backends.slurm_detect",
           "`0`: never probe Slurm (without a config file the backend is local)", Where.LOGIN),
    EnvVar(ENV_CATCH_UP, (_U,), "the CLI's views",
           "`0`: a view that finds no daemon running reads nothing from Slurm", Where.LOGIN),
    EnvVar(ENV_REMOTE_CONFIG, (_U,), "dethpc.surfaces.remote",
           "another file than `~/.config/dethpc/remote.yaml`", Where.LOGIN),
    EnvVar(ENV_TEMPLATE_DIR, (_U,), "dethpc.jobs.render",
           "a site's directory of job script templates", Where.LOGIN),
    EnvVar(ENV_FAULT_POINT, (Setter.TESTS,), "dethpc.control.daemon",
           "fault injection: the daemon SIGKILLs itself at the named point", Where.LOGIN),
    EnvVar(ENV_DEVCLUSTER_DIR, (_U,), "dethpc.devcluster",
           "the first dev cluster's state directory", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_LANE, (_U, Setter.DEVCLUSTER), "dethpc.devcluster",
           "the lane (dev cluster) a process is bound to (default 1)", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_LANES, (_U,), "dethpc.devcluster", "how many lanes", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_NODES, (Setter.DEVCLUSTER,), "scripts and tests on a lane",
           "the lane's node names, comma-separated", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_OWNER, (Setter.DEVCLUSTER,), "dethpc.devcluster",
           "marks the daemons a dev cluster started (`down` finds them by it)", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_SLURM, (_U,), "dethpc.devcluster",
           "the Slurm release a lane runs (default 22.05)", Where.DEV),
    EnvVar(ENV_DEVCLUSTER_USERS, (_U,), "dethpc.devcluster",
           "more users to put in every account", Where.DEV),
    EnvVar(ENV_SLURM_SOURCE_DIR, (_U,), "dethpc.devcluster",
           "where the Slurm source tarballs are", Where.DEV),
    EnvVar(ENV_TEST_START_CLUSTER, (_U,), "dethpc.devcluster",
           "`1` (as root): the Slurm tests start the dev cluster when it is down", Where.DEV),
    EnvVar(ENV_DET_EXPERIMENT_ID, (_S,), _DET, "the experiment's id"),
    EnvVar(ENV_DET_TRIAL_ID, (_S,), f"{_DET}, {_LAUNCH}", "the trial's id"),
    EnvVar(ENV_DET_TRIAL_SEED, (_S,), _DET, "experiment_seed + trial id"),
    EnvVar(ENV_DET_TASK_ID, (_S,), _DET, "`<experiment>.<trial>`"),
    EnvVar(ENV_DET_TASK_TYPE, (_S,), _DET, "`TRIAL`"),
    EnvVar(ENV_DET_RESOURCES_TYPE, (_S,), _DET, "`slurm-job`"),
    EnvVar(ENV_DET_SLOT_TYPE, (_S,), _DET, "`cuda` on a GPU pool, `cpu` otherwise"),
    EnvVar(ENV_DET_WORKDIR, (_S,), _DET,
           "the trial's working directory (the snapshot of the model directory)"),
    EnvVar(ENV_DET_EXPERIMENT_CONFIG, (_S,), _DET,
           "the experiment config as compact JSON (left out past 128 KiB)"),
    EnvVar(ENV_DET_INTER_NODE_NETWORK_INTERFACE, (_S,), f"{_DET}, {_CORE}",
           "the pool's `socket_ifname`, when set"),
    EnvVar(ENV_DET_TRIAL_RUN_ID, (_RS, _W), _DET,
           "the run, counted from 1 (`$DETHPC_RUN_ID` + 1)"),
    EnvVar(ENV_DET_ALLOCATION_ID, (_RS, _W), _DET, "`<experiment>.<trial>.<run>`"),
    EnvVar(ENV_DET_HPARAMS, (_RS, _W), _DET,
           "the trial's hyperparameters as JSON (hparams.json; left out past 128 KiB)"),
    EnvVar(ENV_DET_LATEST_CHECKPOINT, (_RS, _W), _DET,
           "the uuid of the complete checkpoint with the most steps (named from its "
           "`metadata.json`), when there is one"),
    EnvVar(ENV_DET_STEPS_COMPLETED, (_RS, _W), f"{_DET}, {_CORE}",
           "the steps_completed of that checkpoint, else 0"),
    EnvVar(ENV_DET_AGENT_ID, (_RS, _W, _L), _DET,
           "the node's name (`$SLURMD_NODENAME`, else the hostname)"),
    EnvVar(ENV_DET_CONTAINER_ID, (_RS, _W, _L), _DET, "`[cont=<node index>]`"),
    EnvVar(ENV_DET_SLOT_IDS, (_RS, _W, _L), _DET, "this node's slot ids as a JSON list"),
    EnvVar(ENV_DET_UNIQUE_PORT_OFFSET, (_RS, _W, _L), _DET,
           "the node's first GPU index (0 on CPU)"),
    EnvVar(ENV_DET_CLUSTER_ID, (_RS, _W), _DET, "the Slurm cluster's name (`$SLURM_CLUSTER_NAME`)"),
    EnvVar(ENV_DET_RESOURCES_ID, (_RS, _W), _DET, "the Slurm job's id (`$SLURM_JOB_ID`)"),
    EnvVar(ENV_DET_USER, (_RS, _W), _DET, "the Unix user the job runs as (`$USER`)"),
    EnvVar(ENV_DET_CHIEF_IP, (_L,), f"{_DET}, {_CORE}",
           "rank 0's node, as Determined's launchers set it"),
)

#: each row by its name
BY_NAME: dict[str, EnvVar] = {row.name: row for row in TABLE}

#: the signal on which a trial's processes write the Python stacks of all their threads
#: to their stderr (the trial log): the hang watchdog sends it to every rank before it
#: ends a hung job. URG: ignored by default, so a process without the handler (a user's
#: script, a launcher) is not harmed by it
STACK_DUMP_SIGNAL = "URG"


def lookup(name: str) -> EnvVar | None:
    """The row of ``name``: its own, else the family whose prefix it starts with."""
    found = BY_NAME.get(name)
    if found is not None:
        return found
    return next((row for row in TABLE if row.family and name.startswith(row.name)
                 and len(name) > len(row.name)), None)


def determined(*, set_by: Setter, without: Setter | None = None) -> tuple[str, ...]:
    """The ``DET_*`` names that ``set_by`` sets (and ``without`` does not), in order."""
    return tuple(row.name for row in TABLE if row.determined and set_by in row.set_by
                 and (without is None or without not in row.set_by))


def trial_contract(*, experiment_id: int, trial_id: int, trial_dir: str, config: str,
                   signal: str, seed: int) -> list[tuple[str, str]]:
    """The variables every trial's job exports, in this order."""
    return [(ENV_EXPERIMENT_ID, str(experiment_id)), (ENV_TRIAL_ID, str(trial_id)),
            (ENV_TRIAL_DIR, trial_dir), (ENV_EXPERIMENT_CONFIG, config),
            (ENV_PREEMPT_SIGNAL, signal), (ENV_TRIAL_SEED, str(seed))]


DOC_BEGIN = "<!-- BEGIN generated by scripts/job_environment.py --write: do not edit -->"
DOC_END = "<!-- END generated -->"

#: the doc's parts: a heading, which rows go under it, and what the count says
_PARTS: tuple[tuple[str, str, str], ...] = (
    ("Set by dethpc in a job", "job-dethpc", "set by dethpc in a job"),
    ("Settings a user or site may give a job", "job-user", "settings of a job"),
    ("Determined's `DET_*` variables of a trial", "job-det", "Determined's"),
    ("Settings of dethpc's commands and daemon", "login", "of dethpc's commands"),
    ("The dev cluster's", "dev", "of the dev cluster"),
)


def _part(row: EnvVar) -> str:
    if row.where is Where.LOGIN:
        return "login"
    if row.where is Where.DEV:
        return "dev"
    if row.determined:
        return "job-det"
    return "job-user" if row.set_by[0] is Setter.USER else "job-dethpc"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def doc_section() -> str:
    """docs/job-environment.md's generated section: the table, part by part."""
    counts = {key: sum(1 for row in TABLE if _part(row) == key) for _, key, _ in _PARTS}
    lines = [DOC_BEGIN, "",
             f"{len(TABLE)} variables: "
             + ", ".join(f"{counts[key]} {label}" for _, key, label in _PARTS) + ".", ""]
    for title, key, _ in _PARTS:
        lines += [f"### {title}", "", "| variable | set by | read by | meaning |",
                  "| --- | --- | --- | --- |"]
        for row in TABLE:
            if _part(row) != key:
                continue
            name = f"`{row.name}<NAME>`" if row.family else f"`{row.name}`"
            setters = "; ".join(s.value for s in row.set_by)
            lines.append(f"| {name} | {_cell(setters)} | {_cell(row.read_by)} | "
                         f"{_cell(row.meaning)} |")
        lines.append("")
    lines.append(DOC_END)
    return "\n".join(lines) + "\n"
