"""Experiment lifecycle operations a user asks for (the library behind the CLI).

Owns: creating an experiment (config validated by the caller, context
snapshotted, config.yaml written, rows inserted) and the state requests
pause / activate / cancel / kill / labels. The daemon carries requests out; each
change wakes it (``service.wake``).
Must not: talk to a backend (except the submit-time checks: config values dethpc
cannot honour, the pool check and the scheduler's verdict on the first trial's job)
or loop.

Imports: ``create_experiment`` is ``dethpc submit``'s whole path and must answer in
<= 0.5 s (issue 47 item 1), so this module imports neither SQLAlchemy, sqlmodel, the
models nor Jinja2 at its top: the functions that need them import them, and a new
experiment in an SQLite store at head is written with ``sqlite3`` alone
(``dethpc.store.new_experiment``).
"""

from __future__ import annotations

import getpass
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.backends.base import Backend, JobRequest
from dethpc.common.errors import DethpcError, NotFoundError, SubmitError
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.common.paths import ExperimentPaths, make_run_dir
from dethpc.config import dump_config
from dethpc.config.experiment import check_supported
from dethpc.config.model import ClusterConfig, ExperimentConfig
from dethpc.control import service
from dethpc.control.snapshot import snapshot_context
from dethpc.store.new_experiment import NewExperiment, SqliteAtHead

if TYPE_CHECKING:
    from dethpc.jobs.protocol import KindJobs
    from dethpc.store import Store
    from dethpc.store.models import Experiment, Trial


def check_resources(cfg: ExperimentConfig, cluster: ClusterConfig, backend: Backend) -> None:
    """Refuse at submit time what could never run (unknown pool/partition, too big)."""
    from dethpc.jobs.allocation import plan_allocation

    pool = cluster.pool(cfg.resources.resource_pool)
    try:
        alloc = plan_allocation(cfg.resources.slots_per_trial, pool, cfg.slurm)
    except SubmitError:
        check_capacity(cfg, cluster, backend)   # more than the partition holds: say that
        raise                                   # else: the slots do not fill whole nodes
    backend.check_pool(pool.partition, pool.qos, alloc.nodes, alloc.ntasks_per_node,
                       alloc.gpus_per_node)
    if cfg.slurm.components and not backend.traits.het_jobs:
        raise DethpcError(
            f"slurm.components makes every trial a Slurm heterogeneous job, which the "
            f"{backend.name} backend cannot run; use a cluster config with backend: slurm")
    for index, comp in enumerate(cfg.slurm.components):
        where = f"slurm.components[{index}] ({comp.name})"
        cpool = cluster.pool(comp.resource_pool or cfg.resources.resource_pool)
        try:
            backend.check_pool(cpool.partition, cpool.qos, comp.nodes,
                               comp.tasks_per_node * comp.cpus_per_task, 0)
        except DethpcError as exc:
            raise SubmitError(f"{where}: {exc}") from None


def check_capacity(cfg: ExperimentConfig, cluster: ClusterConfig, backend: Backend) -> None:
    """``resources.slots_per_trial`` rounded up to whole nodes of the pool's
    ``slots_per_node`` fits the pool's partition, else ``SubmitError`` naming the field,
    the partition's nodes and the most it holds. Asked when the slots do not fill whole
    nodes, whose fix (another multiple, fewer slots per node) is no fix when even the
    rounded-up request is larger than the partition (Determined's 100 slots on a few
    8-GPU nodes)."""
    from dethpc.jobs.allocation import plan_allocation

    pool = cluster.pool(cfg.resources.resource_pool)
    slots = cfg.resources.slots_per_trial
    per_node = cfg.slurm.slots_per_node or pool.slots_per_node
    if per_node < 1 or slots <= per_node:
        return
    whole = plan_allocation(-(-slots // per_node) * per_node, pool, cfg.slurm)
    try:
        backend.check_pool(pool.partition, pool.qos, whole.nodes, whole.ntasks_per_node,
                           whole.gpus_per_node)
    except SubmitError as exc:
        raise SubmitError(f"resources.slots_per_trial={slots} cannot be satisfied: it needs "
                          f"{whole.nodes} node(s) of {per_node} slot(s) (slots_per_node of "
                          f"pool {pool.name!r}); {exc}") from None


def check_containers(cfg: ExperimentConfig, cluster: ClusterConfig) -> None:
    """With ``environment.image`` and a container runtime: the runtime is installed
    here and an image that is not pulled exists (dethpc.jobs.containers.check_runtime)."""
    if not cfg.environment.image or cluster.containers.runtime == "none":
        return
    from dethpc.jobs.containers import bind_destinations, check_runtime

    binds = [str(Path(cluster.runs_root).expanduser())]
    if cfg.checkpoint_storage.path is not None:
        binds.append(str(cfg.checkpoint_storage.path))
    dests = bind_destinations(cluster.containers, binds, cfg.bind_mounts)
    for image in {cfg.environment.image, cfg.environment.image_gpu or cfg.environment.image}:
        check_runtime(cluster.containers, image, destinations=dests)


def check_entrypoints(cfg: ExperimentConfig) -> None:
    """Every command a trial runs can be built (a Determined launcher dethpc cannot run,
    such as ``determined.launch.tensorflow``, is refused here with the reason)."""
    from dethpc.jobs.render import entrypoint_argv

    entrypoint_argv(cfg.entrypoint, sys.executable)
    for comp in cfg.slurm.components:
        entrypoint_argv(comp.entrypoint, sys.executable)


def check_with_scheduler(cfg: ExperimentConfig, cluster: ClusterConfig, backend: Backend,
                         ours: DethpcError | None = None, jobs: KindJobs | None = None) -> None:
    """Ask the scheduler about the first trial's job (one ``sbatch --test-only`` on
    Slurm; nothing on a backend without ``traits.submit_verdict``). A refusal raises
    ``SubmitError`` with the scheduler's own words, the pool and the config fields
    behind it (``dethpc.jobs.verdict``), plus dethpc's own finding ``ours`` if there is one.
    ``jobs``: the experiment kind's job scripts (``dethpc.jobs.kinds``; managed by default)."""
    if not backend.traits.submit_verdict:
        return
    from dethpc.backends.limits import at_submit_limit
    from dethpc.jobs.kinds import ManagedJobs
    from dethpc.jobs.verdict import refusal_message

    jobs = jobs or ManagedJobs()
    with tempfile.TemporaryDirectory(prefix="dethpc-verdict-") as tmp:
        run_dir = Path(tmp)
        try:
            script = jobs.verdict_script(cfg, cluster, backend=backend.traits.kind,
                                         python=cluster.python or sys.executable,
                                         run_dir=run_dir)
        except SubmitError:
            if ours is not None:
                raise ours from None   # no job to ask Slurm about: dethpc's finding stands
            raise
        path = ExperimentPaths(run_dir).verdict_script
        path.write_text(script, encoding="utf-8")
        words = backend.judge(JobRequest(name="dethpc-verdict", comment="dethpc:verdict",
                                         script=path, workdir=jobs.workdir(run_dir)))
    if words is None or at_submit_limit(words):
        # at a submit limit right now (QOSMaxSubmitJobPerUserLimit, ...): a verdict on
        # the moment, not on the job; the daemon submits as the user's jobs end
        return
    directives = [line.split(None, 1)[1] for line in script.splitlines()
                  if line.startswith("#SBATCH ")]
    message = refusal_message(words, cfg, cluster, directives)
    if ours is not None:
        message += f"\n  dethpc's own check: {ours}"
    raise SubmitError(message)


def create_experiment(store: Store | SqliteAtHead, cluster: ClusterConfig,
                      cfg: ExperimentConfig, context_dir: Path, backend: Backend,
                      kind: ExperimentKind = ExperimentKind.MANAGED,
                      jobs: KindJobs | None = None) -> int:
    """Validate resources, ask the scheduler about the first trial's job, snapshot the
    context and record the experiment; returns its id. Nothing is left behind when any
    step fails. ``kind`` and ``jobs`` (its job scripts, for the scheduler's verdict): a
    search over a script (``dethpc sbatch --search``) passes SCRIPT and its own.
    ``store``: the ``Store``, or an SQLite file at head (``SqliteAtHead``, ``dethpc
    submit``'s path without SQLAlchemy): the same rows either way."""
    check_supported(cfg)  # valid Determined values dethpc cannot honour (field paths)
    check_entrypoints(cfg)
    if cluster.worker_pool(cfg).enabled:   # else worker_pool_mode is OFF: nothing to check
        from dethpc.control.worker_pool_tend import check_worker_pool

        check_worker_pool(cfg, cluster, kind, cluster.python or sys.executable)
    check_containers(cfg, cluster)
    try:
        check_resources(cfg, cluster, backend)
    except SubmitError as exc:
        check_with_scheduler(cfg, cluster, backend, ours=exc, jobs=jobs)  # Slurm's first
        raise
    check_with_scheduler(cfg, cluster, backend, jobs=jobs)
    runs_root = Path(cluster.runs_root).expanduser()
    incoming = runs_root / f".incoming-{uuid.uuid4().hex}"
    try:
        runs_root.mkdir(parents=True, exist_ok=True)
        make_run_dir(incoming, cluster.runs_mode)
        snapshot_context(Path(context_dir), incoming / "context")
        (incoming / "config.yaml").write_text(dump_config(cfg.raw))
    except OSError as exc:
        shutil.rmtree(incoming, ignore_errors=True)
        raise SubmitError(f"cannot write the experiment's run directory under runs_root "
                          f"{runs_root}: {exc.strerror or exc} (errno {exc.errno}); nothing "
                          "was recorded. Free space there, or set runs_root in the cluster "
                          "config to a file system with room") from None
    row = NewExperiment(name=cfg.name, description=cfg.description, labels=list(cfg.labels),
                        config_yaml=dump_config(cfg.raw), owner=_user(),
                        backend=cluster.backend, kind=kind.value)
    renamed: list[Path] = []

    def place(exp_id: int) -> str:
        """The new experiment's run directory: the snapshot moved into place."""
        paths = run_dir_of(exp_id, runs_root)
        incoming.rename(paths.root)
        renamed.append(paths.root)
        paths.ensure()
        return str(paths.root)

    try:
        if isinstance(store, SqliteAtHead):
            exp_id = store.insert_experiment(row, place, EventKind.CREATED.value,
                                             f"experiment {cfg.name!r} submitted")
        else:
            exp_id = _insert_experiment(store, row, place)
    except BaseException:
        # the commit failed (a locked database, say): no row, so no run directory either
        shutil.rmtree(incoming, ignore_errors=True)
        for path in renamed:
            shutil.rmtree(path, ignore_errors=True)
        raise
    service.wake()
    return exp_id


def _insert_experiment(store: Store, row: NewExperiment, place: Callable[[int], str]) -> int:
    """``SqliteAtHead.insert_experiment``'s rows through the models (any database)."""
    from dethpc.store.models import Event, Experiment, SearcherState

    with store.session() as s:
        exp = Experiment(name=row.name, description=row.description, labels=row.labels,
                         config_yaml=row.config_yaml, run_dir="", owner=row.owner,
                         backend=row.backend, kind=ExperimentKind(row.kind))
        s.add(exp)
        s.flush()
        assert exp.id is not None
        exp.run_dir = place(exp.id)
        s.add(SearcherState(experiment_id=exp.id))
        s.add(Event(experiment_id=exp.id, kind=EventKind.CREATED,
                    message=f"experiment {row.name!r} submitted"))
        return exp.id


def run_dir_of(exp_id: int, runs_root: Path) -> ExperimentPaths:
    """The run directory of a new experiment; it must not exist yet."""
    return ExperimentPaths.new(runs_root, exp_id)


def claim_run_dir(exp: Experiment, runs_root: Path) -> ExperimentPaths:
    """The run directory of a just-flushed experiment (``exp.run_dir`` set); it must not
    exist yet."""
    assert exp.id is not None
    paths = run_dir_of(exp.id, runs_root)
    exp.run_dir = str(paths.root)
    return paths


def get_experiment(store: Store, exp_id: int) -> Experiment:
    from dethpc.store.models import Experiment

    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(
                f"experiment {exp_id} does not exist (see `dethpc experiment list`)")
        return exp


def request_state(store: Store, exp_id: int, action: str) -> str:
    """pause | activate | cancel | kill: record the wish; the daemon enacts it."""
    from dethpc.store.models import Event, Experiment, ExperimentState

    transitions = {
        "pause": ({ExperimentState.ACTIVE}, ExperimentState.PAUSED),
        "activate": ({ExperimentState.PAUSED}, ExperimentState.ACTIVE),
        "cancel": ({ExperimentState.ACTIVE, ExperimentState.PAUSED},
                   ExperimentState.STOPPING_CANCELED),
        "kill": ({ExperimentState.ACTIVE, ExperimentState.PAUSED,
                  ExperimentState.STOPPING_CANCELED}, ExperimentState.STOPPING_KILLED),
    }
    allowed, target = transitions[action]
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(f"experiment {exp_id} does not exist")
        current = ExperimentState(exp.state)
        if current == target:
            return current.value
        if action == "pause" and not exp.kind.daemon_submits:
            raise DethpcError(
                f"cannot pause experiment {exp_id}: it is of kind {exp.kind.value}, whose "
                "jobs dethpc does not submit, so nothing could resume it (cancel or kill "
                "it, or pause the script yourself)")
        if current not in allowed:
            raise DethpcError(f"cannot {action} experiment {exp_id}: it is {current.value} "
                              f"(only {', '.join(sorted(a.value for a in allowed))} can)")
        exp.state = target
        s.add(exp)
        s.add(Event(experiment_id=exp_id, kind=EventKind(action), message=f"{action} requested"))
    service.wake()
    return target.value


def set_concurrency(store: Store, exp_id: int, limit: int) -> int:
    """Change ``searcher.max_concurrent_trials`` of a live experiment (0 = no limit).
    The daemon then raises or lowers its arrays' ``ArrayTaskThrottle`` and lets the
    searcher start trials up to the new limit; returns the previous value."""
    from dethpc.config import parse_experiment_config
    from dethpc.config._yaml import load_stored_yaml
    from dethpc.store.models import Event, Experiment, ExperimentState

    if limit < 0:
        raise DethpcError(f"max_concurrent_trials must be >= 0 (0 = no limit), got {limit}")
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(f"experiment {exp_id} does not exist")
        if ExperimentState(exp.state).is_terminal:
            raise DethpcError(f"experiment {exp_id} is {exp.state}: nothing to change")
        raw = load_stored_yaml(exp.config_yaml) or {}
        old = parse_experiment_config(raw).searcher.max_concurrent_trials
        raw.setdefault("searcher", {})["max_concurrent_trials"] = limit
        parse_experiment_config(raw)  # the searcher may refuse the value (ConfigError)
        exp.config_yaml = dump_config(raw)
        (Path(exp.run_dir) / "config.yaml").write_text(exp.config_yaml)
        s.add(exp)
        s.add(Event(experiment_id=exp_id, kind=EventKind.CONCURRENCY,
                    message=f"max_concurrent_trials {old} -> {limit}"))
    service.wake()
    return old


def set_labels(store: Store, exp_id: int, add: list[str], remove: list[str]) -> list[str]:
    from dethpc.store.models import Experiment

    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        if exp is None:
            raise NotFoundError(f"experiment {exp_id} does not exist")
        labels = [x for x in exp.labels if x not in remove]
        labels += [x for x in add if x not in labels]
        exp.labels = labels
        s.add(exp)
        return labels


def trials_of(store: Store, exp_id: int) -> list[Trial]:
    from sqlmodel import select

    from dethpc.store.models import Trial

    with store.session() as s:
        return list(s.exec(select(Trial).where(Trial.experiment_id == exp_id)
                           .order_by(Trial.id)))  # type: ignore[arg-type]


def current_user() -> str:
    """Who runs this process: the owner of what it creates, whose experiments
    ``experiment list`` shows without ``--all`` (Determined's habit)."""
    return _user()


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - containers without a passwd entry
        return "unknown"
