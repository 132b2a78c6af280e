"""Every ``#SBATCH`` directive of a dethpc job, in one place.

Owns: the directives of a trial job, an array job, a het-job component, an interactive
task's job and a server job (``trial_directives``, ``component_directives``,
``task_directives``, ``server_directives``), what dethpc adds to a user's own script's
(``dethpc_directives``: ``--requeue``, the pool's early signal), the shape and placement lines they
share with other jobs (``shape_directives``, ``placement_directives``, ``job_time``),
the limits those lines set that a backend enforces (``run_limits``: the local backend
reads the same time and signal) and the last check of each line (``check_directive``).
sbatch's own syntax (options, prefixes, the layering of ``sbatch_args``, a script's
``#SBATCH`` lines) is ``dethpc.common.sbatch_options``.

Memory has one meaning: ``mem_per_slot`` is the memory of one slot (one task), and
dethpc emits it once, as ``--mem`` = ``mem_per_slot`` x slots on the node.
Must not: run commands, write files or know the templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dethpc.common.errors import SubmitError
from dethpc.common.sbatch_options import canonical_option, layer, option_value, parse_time

if TYPE_CHECKING:
    from dethpc.config.model import ExperimentConfig, HetComponent, ResourcePool
    from dethpc.jobs.allocation import Allocation


def check_directive(arg: str) -> str:
    if "\n" in arg or "\r" in arg:
        raise SubmitError(f"sbatch argument {arg!r} contains a newline")
    return arg



# --------------------------------------------------------------- what a job asks for
def job_time(cfg: ExperimentConfig, pool: ResourcePool) -> str | None:
    return cfg.slurm.time or pool.default_time


@dataclass(frozen=True)
class RunLimits:
    """What a backend enforces beyond the script's text: the job's time limit (None:
    none) and its early signal, ``signal_lead_s`` before it. Slurm reads them from the
    ``#SBATCH`` lines; the local backend emulates them from the ``JobRequest``."""

    time_limit_s: int | None
    signal: str
    signal_lead_s: int


def run_limits(cfg: ExperimentConfig, pool: ResourcePool) -> RunLimits:
    """The limits of a trial's or a pool worker's job as its final ``#SBATCH`` lines say
    them (``trial_directives``): a ``--time`` in the pool's or the experiment's
    ``sbatch_args`` wins over ``slurm.time`` and the pool's ``default_time``, as on Slurm."""
    final = layer(placement_directives(pool, job_time(cfg, pool)), pool.sbatch_args,
                  cfg.slurm.sbatch_args)
    time = next((option_value(d) for d in final if canonical_option(d) == "--time"), None)
    try:
        seconds = parse_time(time)
    except ValueError:
        raise SubmitError(f"time limit {time!r} is not in sbatch --time syntax") from None
    return RunLimits(seconds, pool.signal, pool.signal_grace_s)


def shape_directives(alloc: Allocation) -> list[str]:
    """The allocation's shape, in a fixed order; memory once, as ``--mem`` per node."""
    out = [f"--nodes={alloc.nodes}", f"--ntasks-per-node={alloc.ntasks_per_node}",
           f"--cpus-per-task={alloc.cpus_per_task}"]
    if alloc.gpus_per_node:
        gpus = str(alloc.gpus_per_node)
        out.append(f"--gpus-per-node={alloc.gpu_type}:{gpus}" if alloc.gpu_type
                   else f"--gpus-per-node={gpus}")
    if alloc.mem_per_node_mb is not None:
        out.append(f"--mem={alloc.mem_per_node_mb}M")
    return out


def placement_directives(pool: ResourcePool, time: str | None = None) -> list[str]:
    """Where a job of ``pool`` runs: its partition, QoS and account, and ``time``."""
    return [f"{flag}={value}" for flag, value in (
        ("--partition", pool.partition), ("--qos", pool.qos), ("--account", pool.account),
        ("--time", time)) if value]


class SignalPool(Protocol):
    """What the early signal needs of a pool (a ``ResourcePool``, or ``dethpc sbatch``'s
    ``SitePool``)."""

    @property
    def signal(self) -> str: ...

    @property
    def signal_grace_s(self) -> int: ...


def early_signal(pool: SignalPool) -> str:
    """The pool's early signal to the batch shell, ``signal_grace_s`` before the end."""
    return f"--signal=B:{pool.signal}@{pool.signal_grace_s}"


def dethpc_directives(directives: Sequence[str], pool: SignalPool) -> list[str]:
    """What dethpc adds after the user's ``directives`` (a search's, or a plain
    ``dethpc sbatch``'s): ``--requeue`` and the pool's early signal to the batch shell,
    each unless the user chose (``--no-requeue`` counts).
    ``--array``, ``--chdir``, ``--job-name`` and ``--comment`` are on sbatch's command
    line (``JobRequest``), which beats any ``#SBATCH`` line."""
    chosen = {canonical_option(d) for d in directives}
    out = []
    if not chosen & {"--requeue", "--no-requeue"}:
        out.append("--requeue")
    if "--signal" not in chosen:
        out.append(early_signal(pool))
    return out


def trial_directives(cfg: ExperimentConfig, pool: ResourcePool, *, name: str,
                     comment: str, output: str) -> list[str]:
    """Every ``#SBATCH`` argument of a trial's job (or of an array of trials), in order:
    dethpc's own, the placement, the shape, then the pool's and the experiment's
    ``sbatch_args`` layered over them."""
    from dethpc.jobs.allocation import plan_allocation

    alloc = plan_allocation(cfg.resources.slots_per_trial, pool, cfg.slurm)
    own = [f"--job-name={name}", f"--comment={comment}", f"--output={output}",
           "--open-mode=append", pool.requeue.sbatch_option, early_signal(pool)]
    out = layer([*own, *placement_directives(pool, job_time(cfg, pool)), *shape_directives(alloc)],
                pool.sbatch_args, cfg.slurm.sbatch_args)
    return [check_directive(d) for d in out]


def task_directives(cfg: ExperimentConfig, pool: ResourcePool, *, name: str, comment: str,
                    output: str) -> list[str]:
    """Every ``#SBATCH`` argument of an interactive task's job (a shell, notebook or
    command): a trial's placement and shape with the pool's and the config's
    ``sbatch_args`` layered over them, but its own name and log, no requeue (a preempted
    interactive job just ends) and no signal."""
    from dethpc.jobs.allocation import plan_allocation

    alloc = plan_allocation(cfg.resources.slots_per_trial, pool, cfg.slurm)
    own = [f"--job-name={name}", f"--comment={comment}", f"--output={output}",
           "--open-mode=append", "--no-requeue"]
    out = layer([*own, *placement_directives(pool, job_time(cfg, pool)), *shape_directives(alloc)],
                pool.sbatch_args, cfg.slurm.sbatch_args)
    return [check_directive(d) for d in out]


def server_directives(name: str, output: str, partition: str = "") -> list[str]:
    """A one-CPU server job's (TensorBoard's ``--slurm``): one task, its log, the
    partition's default time limit (it ends itself when idle)."""
    out = [f"--job-name={name}", "--ntasks=1", "--cpus-per-task=1", f"--output={output}"]
    if partition:
        out.append(f"--partition={partition}")
    return [check_directive(d) for d in out]


def component_directives(comp: HetComponent, pool: ResourcePool,
                         time: str | None) -> list[str]:
    """The ``#SBATCH`` lines of one het-job component, after its ``hetjob`` separator:
    the component's shape on its pool (one slot = one task, no GPUs), then the pool's
    ``sbatch_args`` (the experiment's apply to the trial's component only)."""
    from dethpc.jobs.allocation import mem_per_node_mb

    own = [f"--nodes={comp.nodes}", f"--ntasks-per-node={comp.tasks_per_node}",
           f"--cpus-per-task={comp.cpus_per_task}", *placement_directives(pool, time)]
    mem_mb = mem_per_node_mb(pool, comp.tasks_per_node)
    if mem_mb is not None:
        own.append(f"--mem={mem_mb}M")
    out = layer(own, pool.sbatch_args)
    return ["hetjob", *(check_directive(d) for d in out)]


