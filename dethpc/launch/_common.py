"""What every launcher shares: Slurm environment, job layout, ports, argv pieces.

Owns: reading the Slurm environment (``read_slurm_env``), the job layout
(hosts, tasks per node, master address and port), the per-job port rule
(``derive_port``), the torch-style rank variables (``rank_env``, and a rank's whole
environment: ``worker_env``), socket
interface variables, GPU isolation per local rank, the launcher command line
(``parse_launcher_args`` -> ``Target``) and the ``srun`` argv prefix.
Everything here is pure: it takes an ``env`` mapping and returns values.
Must not: start processes (``_procs`` does), or know one launcher's specifics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dethpc.common.errors import DethpcError
from dethpc.common.hostlist import expand_hostlist
from dethpc.common.jobenv import (
    ENV_BACKEND,
    ENV_CONTAINER_EXEC,
    ENV_CONTAINER_PYTHON,
    ENV_DET_CHIEF_IP,
    ENV_DET_TRIAL_ID,
    ENV_GPU_ISOLATION,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NPROC,
    ENV_SLOTS_PER_TRIAL,
    ENV_SOCKET_IFNAME,
)
from dethpc.common.traits import BackendKind, traits_of
from dethpc.launch._run_main import guarded_argv

#: ports are PORT_BASE + job_id % PORT_SPAN: 15000..31999, below Linux's ephemeral
#: range (32768-60999) so an outgoing connection never holds our port. Two jobs
#: sharing a node collide only when their ids differ by a multiple of PORT_SPAN,
#: i.e. never for jobs submitted within 17000 job ids of each other.
PORT_BASE = 15000
PORT_SPAN = 17000
#: step ids Slurm gives the batch shell and the extern step (not a real ``srun`` step)
_NON_STEP_IDS = {"", "4294967294", "4294967292", "4294967295", "batch", "extern"}
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
TRIAL_RUNNER_MODULE = "dethpc.pytorch.run"


class LaunchError(DethpcError):
    """A launcher cannot start the job as asked (bad arguments, missing tool, ...)."""


# --------------------------------------------------------------------- env reading
@dataclass(frozen=True)
class SlurmEnv:
    """The Slurm variables a launcher needs, parsed (job or step view)."""

    job_id: int | None
    hosts: tuple[str, ...]
    nnodes: int
    ntasks: int
    procid: int
    nodeid: int
    localid: int
    step_id: str | None
    tasks_per_node: tuple[int, ...]
    gpus_on_node: int
    cpus_per_task: int | None

    @property
    def in_step(self) -> bool:
        """True inside an ``srun`` step (not the batch shell): do not call srun again."""
        return self.step_id is not None and self.step_id not in _NON_STEP_IDS

    @property
    def local_world_size(self) -> int:
        return self.tasks_per_node[min(self.nodeid, len(self.tasks_per_node) - 1)]


def parse_tasks_per_node(text: str, nnodes: int | None = None) -> tuple[int, ...]:
    """``"2(x3),1"`` -> ``(2, 2, 2, 1)``; a bare ``"4"`` repeats for ``nnodes`` nodes."""
    counts: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _TASKS.match(part)
        if match is None:
            raise LaunchError(f"cannot parse Slurm tasks-per-node value {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if len(counts) == 1 and nnodes and nnodes > 1:
        counts *= nnodes
    return tuple(counts)


def read_slurm_env(env: Mapping[str, str]) -> SlurmEnv:
    """Parse the job's (or, inside ``srun``, the step's) Slurm variables from ``env``."""
    step_id = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    in_step = step_id is not None and step_id not in _NON_STEP_IDS
    nodelist = _first(env, *(["SLURM_STEP_NODELIST"] if in_step else []),
                      "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = tuple(expand_hostlist(nodelist)) if nodelist else ()
    nnodes = _int(_first(env, *(["SLURM_STEP_NUM_NODES"] if in_step else []),
                         "SLURM_JOB_NUM_NODES", "SLURM_NNODES"), len(hosts) or 1)
    ntasks = _int(_first(env, *(["SLURM_STEP_NUM_TASKS"] if in_step else []),
                         "SLURM_NTASKS", "SLURM_NPROCS"), 0)
    tpn_text = _first(env, *(["SLURM_STEP_TASKS_PER_NODE"] if in_step else []),
                      "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
    tasks_per_node = parse_tasks_per_node(tpn_text, nnodes) if tpn_text else ()
    if not tasks_per_node:
        tasks_per_node = (max(ntasks // max(nnodes, 1), 1),) * max(nnodes, 1)
    if not ntasks:
        ntasks = sum(tasks_per_node)
    job_id = _first(env, "SLURM_JOB_ID", "SLURM_JOBID")
    return SlurmEnv(
        job_id=int(job_id) if job_id.isdigit() else None,
        hosts=hosts,
        nnodes=nnodes,
        ntasks=ntasks,
        procid=_int(env.get("SLURM_PROCID"), 0),
        nodeid=_int(env.get("SLURM_NODEID"), 0),
        localid=_int(env.get("SLURM_LOCALID"), 0),
        step_id=step_id,
        tasks_per_node=tasks_per_node,
        gpus_on_node=_gpus_on_node(env),
        cpus_per_task=_int(env.get("SLURM_CPUS_PER_TASK"), 0) or None,
    )


def use_slurm(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> bool:
    """True when the launcher should go through Slurm: a job id, not the local backend, and
    srun, or already one task of a step (inside a container image without srun, say)."""
    kind = BackendKind.parse(env.get(ENV_BACKEND))
    if kind is not None and not traits_of(kind).srun_steps:
        return False
    return bool(_first(env, "SLURM_JOB_ID", "SLURM_JOBID")) and (
        which("srun") is not None or bool(env.get("SLURM_STEP_ID")))


def _gpus_on_node(env: Mapping[str, str]) -> int:
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    return len(visible_devices(env))


def visible_devices(env: Mapping[str, str]) -> tuple[str, ...]:
    text = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not text or text in ("-1", "NoDevFiles"):
        return ()
    return tuple(d.strip() for d in text.split(",") if d.strip())


# ------------------------------------------------------------------ layout & ports
@dataclass(frozen=True)
class JobLayout:
    """Where the processes of one launch go: hosts, tasks per node, the rendezvous."""

    hosts: tuple[str, ...]
    tasks_per_node: int
    master_addr: str
    master_port: int
    job_id: int | None = None

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.tasks_per_node


def derive_port(job_id: int | None, offset: int = 0) -> int:
    """The rendezvous port of a job: ``PORT_BASE + (job_id + offset) % PORT_SPAN``.

    Deterministic, so every node computes the same port without talking;
    ``offset`` separates several rendezvous inside one job (het-job components).
    Off Slurm (no job id) the base port is used.
    """
    return PORT_BASE + ((job_id or 0) + offset) % PORT_SPAN


def slurm_layout(senv: SlurmEnv, env: Mapping[str, str]) -> JobLayout:
    """The layout of the current allocation (homogeneous: every node the same)."""
    if not senv.hosts:
        raise LaunchError("SLURM_JOB_NODELIST is not set: run inside a Slurm allocation")
    if len(set(senv.tasks_per_node)) > 1:
        raise LaunchError(
            f"tasks per node differ across nodes {senv.tasks_per_node}; ask Slurm for "
            f"--ntasks-per-node (dethpc.jobs.allocation always does) so every node is the same"
        )
    return JobLayout(
        hosts=senv.hosts,
        tasks_per_node=senv.tasks_per_node[0],
        master_addr=env.get(ENV_MASTER_ADDR) or senv.hosts[0],
        master_port=_master_port(senv.job_id, env),
        job_id=senv.job_id,
    )


def local_layout(nproc: int, env: Mapping[str, str]) -> JobLayout:
    """One node, ``nproc`` processes on this machine (no Slurm, or the local backend)."""
    job_id = _first(env, "SLURM_JOB_ID", "SLURM_JOBID")
    jid = int(job_id) if job_id.isdigit() else None
    return JobLayout(
        hosts=("127.0.0.1",),
        tasks_per_node=nproc,
        master_addr=env.get(ENV_MASTER_ADDR) or "127.0.0.1",
        master_port=_master_port(jid, env),
        job_id=jid,
    )


def local_nproc(env: Mapping[str, str], override: str | None = None) -> int:
    """How many processes a local (off-Slurm) launch starts: the launcher's own
    ``--nproc-per-node``, ``DETHPC_NPROC``, the trial's ``resources.slots_per_trial``
    (``DETHPC_SLOTS_PER_TRIAL``, set by every trial's job script: on the local backend
    one process per slot, as on Slurm), ``SLURM_NTASKS``, else 1."""
    for value in (override, env.get(ENV_NPROC), env.get(ENV_SLOTS_PER_TRIAL),
                  env.get("SLURM_NTASKS")):
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def override_value(overrides: Sequence[str], *names: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` among pass-through overrides (last wins)."""
    found = None
    for i, token in enumerate(overrides):
        name, eq, value = token.partition("=")
        if name in names:
            found = value if eq else (overrides[i + 1] if i + 1 < len(overrides) else None)
    return found


def _master_port(job_id: int | None, env: Mapping[str, str]) -> int:
    explicit = env.get(ENV_MASTER_PORT, "")
    return int(explicit) if explicit.isdigit() else derive_port(job_id)


# ------------------------------------------------------------------- env building
def rank_env(layout: JobLayout, rank: int, local_rank: int, node_rank: int) -> dict[str, str]:
    """The torch.distributed variables of one process."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(layout.world_size),
        "LOCAL_WORLD_SIZE": str(layout.tasks_per_node),
        "GROUP_RANK": str(node_rank),
        "GROUP_WORLD_SIZE": str(layout.nnodes),
        "NODE_RANK": str(node_rank),
        # DeepSpeed's spellings (Determined's DistributedContext.from_deepspeed reads them)
        "LOCAL_SIZE": str(layout.tasks_per_node),
        "CROSS_RANK": str(node_rank),
        "CROSS_SIZE": str(layout.nnodes),
        "MASTER_ADDR": layout.master_addr,
        "MASTER_PORT": str(layout.master_port),
    }


def rendezvous_env(layout: JobLayout) -> dict[str, str]:
    """The variables every process of a launch shares (exported to srun)."""
    return {
        "MASTER_ADDR": layout.master_addr,
        "MASTER_PORT": str(layout.master_port),
        # Determined's launchers tell the ranks the chief's address this way
        ENV_DET_CHIEF_IP: layout.master_addr,
        "WORLD_SIZE": str(layout.world_size),
        "LOCAL_WORLD_SIZE": str(layout.tasks_per_node),
        "PYTHONUNBUFFERED": "1",
    }


def socket_env(env: Mapping[str, str]) -> dict[str, str]:
    """NCCL/GLOO socket interface from ``DETHPC_SOCKET_IFNAME`` unless already set."""
    ifname = env.get(ENV_SOCKET_IFNAME, "").strip()
    if not ifname:
        return {}
    names = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")
    return {name: ifname for name in names if not env.get(name)}


def gpu_env(env: Mapping[str, str], local_rank: int, local_world: int) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for one local rank when ``DETHPC_GPU_ISOLATION=per-rank``.

    Off by default: torchrun does not isolate either, and scripts written for it
    pick ``cuda:LOCAL_RANK``, which would fail with one visible device.
    """
    if env.get(ENV_GPU_ISOLATION, "none") != "per-rank":
        return {}
    devices = visible_devices(env)
    if not devices:
        return {}
    if len(devices) < local_world:
        raise LaunchError(
            f"{local_world} processes on this node but only {len(devices)} GPUs visible "
            f"({','.join(devices)}); ask for one GPU per slot"
        )
    per = len(devices) // local_world
    mine = devices[local_rank * per : (local_rank + 1) * per]
    return {"CUDA_VISIBLE_DEVICES": ",".join(mine)}


# ------------------------------------------------------------------ command line
@dataclass(frozen=True)
class Target:
    """What each worker runs: a python file, a python module, or any command."""

    kind: str  # "file" | "module" | "command"
    value: str
    args: tuple[str, ...] = ()

    def tokens(self) -> list[str]:
        """The target as written on a launcher command line (after ``--``)."""
        head = ["-m", self.value] if self.kind == "module" else [self.value]
        return head + list(self.args)

    def python_argv(self, python: str = sys.executable) -> list[str]:
        """The argv of one rank: Python targets run under the exit guard (``_run_main``)."""
        if self.kind in ("file", "module"):
            return guarded_argv(python, self.tokens())
        return [self.value, *self.args]


@dataclass(frozen=True)
class LauncherArgs:
    """A parsed launcher command line: dethpc options, pass-through overrides, target."""

    target: Target
    options: dict[str, str] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()


def parse_target(tokens: Sequence[str]) -> Target:
    if not tokens:
        raise LaunchError("no script given; usage: [overrides --] script.py [args] | --trial m:C")
    if tokens[0] == "-m":
        if len(tokens) < 2:
            raise LaunchError("-m needs a module name")
        return Target("module", tokens[1], tuple(tokens[2:]))
    if len(tokens) > 1 and _is_python(tokens[0]) and (
            tokens[1] == "-m" or tokens[1].endswith(".py")):
        # "python3 script.py" (Determined's tutorials write it so): a Python target,
        # run by this interpreter under the exit guard like "script.py"
        return parse_target(tokens[1:])
    kind = "file" if tokens[0].endswith(".py") else "command"
    return Target(kind, tokens[0], tuple(tokens[1:]))


def _is_python(token: str) -> bool:
    name = os.path.basename(token)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def parse_launcher_args(argv: Sequence[str], options: Sequence[str]) -> LauncherArgs:
    """Split ``[overrides --] script args`` (or ``--trial module:Class``).

    ``options`` are the dethpc flags that take a value (``--mode``); they are
    consumed wherever they appear before ``--``. Everything else before ``--``
    passes through to the underlying tool (torchrun, deepspeed, srun).
    """
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        head, tail = argv[:cut], argv[cut + 1 :]
    else:
        head, tail = [], argv
        while tail and tail[0].partition("=")[0] in (*options, "--trial"):
            take = 1 if "=" in tail[0] else 2
            head += tail[:take]
            tail = tail[take:]
    opts: dict[str, str] = {}
    overrides: list[str] = []
    i = 0
    while i < len(head):
        token = head[i]
        name, eq, value = token.partition("=")
        if name in options or name == "--trial":
            if not eq:
                if i + 1 >= len(head):
                    raise LaunchError(f"{name} needs a value")
                i, value = i + 1, head[i + 1]
            opts[name.lstrip("-")] = value
        else:
            overrides.append(token)
        i += 1
    if "trial" in opts:
        if tail:
            raise LaunchError("give either --trial module:Class or a script, not both")
        target = Target("module", TRIAL_RUNNER_MODULE, (opts.pop("trial"),))
    else:
        target = parse_target(tail)
    return LauncherArgs(target=target, options=opts, overrides=tuple(overrides))


# ------------------------------------------------------------------------ plans
@dataclass(frozen=True)
class WorkerSpec:
    """One process to start: its argv, its full environment, its output prefix."""

    argv: Sequence[str]
    env: Mapping[str, str]
    rank: int
    prefix: bool = True
    label: str = ""          # e.g. a het-job component: "[server rank=0] "


@dataclass(frozen=True)
class LaunchPlan:
    """What a launcher will do: ``exec`` one argv in place, or start ``workers``."""

    kind: str  # "exec" | "workers"
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workers: tuple[WorkerSpec, ...] = ()
    notes: tuple[str, ...] = ()
    #: (path, content) pairs written before starting (a generated hostfile, ...)
    files: tuple[tuple[str, str], ...] = ()


def single_plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    notes: Sequence[str] = (),
    files: Sequence[tuple[str, str]] = (),
) -> LaunchPlan:
    """Supervise one unprefixed child (``srun`` or a tool that prefixes itself)."""
    spec = WorkerSpec(tuple(argv), env, 0, prefix=False)
    return LaunchPlan("workers", tuple(argv), env, (spec,), tuple(notes), tuple(files))


def in_step_worker_plan(
    target_argv: Sequence[str], layout: JobLayout, env: Mapping[str, str]
) -> LaunchPlan:
    """Inside an ``srun`` step this process is one rank: run the target as that rank."""
    wenv = worker_env({**env, **rendezvous_env(layout), **socket_env(env)})
    spec = WorkerSpec(tuple(target_argv), wenv, int(wenv["RANK"]))
    return LaunchPlan("workers", workers=(spec,))


def local_workers(
    target_argv: Sequence[str], layout: JobLayout, env: Mapping[str, str]
) -> tuple[WorkerSpec, ...]:
    """One prefixed worker per local rank, each with its torch-style rank variables."""
    specs = []
    for rank in range(layout.tasks_per_node):
        wenv = {**env, **socket_env(env), "PYTHONUNBUFFERED": "1",
                **rank_env(layout, rank, rank, 0)}
        wenv.update(gpu_env(wenv, rank, layout.tasks_per_node))
        specs.append(WorkerSpec(tuple(target_argv), wenv, rank))
    return tuple(specs)


def srun_workers_plan(
    layout: JobLayout,
    target_argv: Sequence[str],
    env: Mapping[str, str],
    *,
    mpi: str | None = None,
    extra_srun: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> LaunchPlan:
    """One Slurm task per slot, each running the per-rank shim around the target (in
    the experiment's image when the job script says so: ``container_of``)."""
    prefix, inner = container_of(env)
    if prefix:
        if target_argv and target_argv[0] == python:
            target_argv = [inner or python, *target_argv[1:]]
        python = inner or python
    argv = srun_argv(layout, mpi=mpi, extra=extra_srun) + prefix + worker_argv(target_argv,
                                                                             python)
    full_env = {**env, **rendezvous_env(layout), **socket_env(env), **(extra_env or {})}
    return single_plan(argv, full_env)


# --------------------------------------------------------------------------- srun
def container_of(env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """The command prefix that starts a task in the experiment's image and the image's
    python, when the job script set them (``DETHPC_CONTAINER_EXEC``, a JSON argv, and
    ``DETHPC_CONTAINER_PYTHON``; dethpc.jobs.jobscript.launcher_env); else ``([], None)``.
    Read only by a launcher outside any step: a task already in the image ignores them."""
    raw = env.get(ENV_CONTAINER_EXEC)
    if not raw or env.get("SLURM_STEP_ID"):
        return [], None
    try:
        prefix = json.loads(raw)
    except ValueError as exc:
        raise LaunchError(f"{ENV_CONTAINER_EXEC} is not a JSON list: {exc}") from None
    if not isinstance(prefix, list) or not all(isinstance(a, str) for a in prefix):
        raise LaunchError(f"{ENV_CONTAINER_EXEC} must be a JSON list of strings")
    return prefix, env.get(ENV_CONTAINER_PYTHON) or None


def srun_argv(
    layout: JobLayout,
    *,
    tasks_per_node: int | None = None,
    cpus_per_task: int | None = None,
    mpi: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``srun`` with an explicit shape (never inherited from the batch env)."""
    per_node = layout.tasks_per_node if tasks_per_node is None else tasks_per_node
    argv = [
        "srun",
        f"--nodes={layout.nnodes}",
        f"--ntasks={layout.nnodes * per_node}",
        f"--ntasks-per-node={per_node}",
        "--kill-on-bad-exit=1",
    ]
    if cpus_per_task:
        argv.append(f"--cpus-per-task={cpus_per_task}")
    if mpi:
        argv.append(f"--mpi={mpi}")
    return argv + list(extra)


def worker_argv(target_argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """Run ``target_argv`` under the per-rank shim (rank env, prefixed output)."""
    return [python, "-m", "dethpc.launch._worker", "--", *target_argv]


# ---------------------------------------------------------------------- helpers
def _first(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = env.get(name)
        if value:
            return value
    return ""


def _int(value: str | None, default: int) -> int:
    return int(value) if value and value.strip().isdigit() else default


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The full environment of the child: ``env`` plus the rank variables it lacks.

    Variables already set (by torchrun, or by the user) win over Slurm's.
    """
    senv = read_slurm_env(env)
    local_world = int(env.get("LOCAL_WORLD_SIZE") or senv.local_world_size)
    derived = {
        "RANK": str(senv.procid),
        "LOCAL_RANK": str(senv.localid),
        "WORLD_SIZE": str(senv.ntasks),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(senv.nodeid),
        "GROUP_WORLD_SIZE": str(senv.nnodes),
        "NODE_RANK": str(senv.nodeid),
        # DeepSpeed's spellings (Determined's DistributedContext.from_deepspeed reads them)
        "LOCAL_SIZE": str(local_world),
        "CROSS_RANK": str(senv.nodeid),
        "CROSS_SIZE": str(senv.nnodes),
    }
    out = dict(env)
    for key, value in derived.items():
        out.setdefault(key, value)
    if ENV_DET_TRIAL_ID in env:  # a trial: Determined's per-node variables of this node
        from dethpc.launch.detenv import node_env

        out.update(node_env(env))
    out.update(gpu_env(env, int(out["LOCAL_RANK"]), local_world))
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out
