"""Assembling the in-job ``Context`` from the environment (real or Dummy twins).

Owns: ``Context`` (the sub-contexts in one object, with Determined's life cycle:
``start()``/``__enter__``, ``close()``/``__exit__``, ``alert()``) and ``build_context()``,
which picks the real sub-contexts when the job has a trial directory and the Dummy twins
otherwise. The trial directory is ``DETHPC_TRIAL_DIR`` (a job dethpc submitted) or,
in a Slurm job dethpc did not submit, the one ``dethpc.common.detached`` registers in the
spool (``with_trial_dir``): metrics, checkpoints and ``latest_checkpoint`` work there
too, and a requeued job (same id) resumes from its own checkpoint.
Leaving the context (``__exit__``, or ``close()`` called by hand) ends the process the
way docs/job-contract.md says: after ``preempt.should_preempt()`` returned True, exit
``EXIT_PREEMPTED`` (80, a signal) or ``EXIT_STOPPED`` (81, a stop/pause file); after
``det.InvalidHP`` escaped the block, an ``early_exit`` record and exit 0 (Determined's).
It also owns ``get_cluster_info()`` (Determined's ``det.get_cluster_info()``):
the trial's ``ClusterInfo`` whose ``latest_checkpoint`` this process finds on its
own (no collective), or ``None`` off-cluster.
Must not: import torch, or read any file other than through the sub-contexts and
``_info``.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dethpc.common.errors import InvalidHP
from dethpc.common.jobenv import (
    ENV_CHECKPOINT_DIR,
    ENV_PREEMPT_SIGNAL,
    ENV_TRIAL_DIR,
    STACK_DUMP_SIGNAL,
)
from dethpc.common.paths import TrialPaths
from dethpc.core._checkpoint import CheckpointContext, DummyCheckpointContext
from dethpc.core._distributed import DistributedContext
from dethpc.core._extras import (
    DummyExperimentalCoreContext,
    DummyProfilerContext,
    ExperimentalCoreContext,
    ProfilerContext,
)
from dethpc.core._info import ClusterInfo, checkpoint_dir, read_hparams
from dethpc.core._preempt import (
    ENV_VERDICT_WAIT_S,
    STOP_CHECK_INTERVAL_S,
    DummyPreemptContext,
    PreemptContext,
    PreemptMode,
    dump_stacks_on,
    rung_hook,
    verdict_wait_s,
)
from dethpc.core._searcher import (
    DummySearcherContext,
    SearcherContext,
    SearcherContextMissing,
    Target,
)
from dethpc.core._steps import StepTimes
from dethpc.core._train import (
    DummyTrainContext,
    EarlyExitReason,
    MetricsWriter,
    TensorboardMode,
    TrainContext,
)

log = logging.getLogger(__name__)


class Context:
    """What training code gets from ``dethpc.core.init()``: Determined's ``Context``
    (the same constructor keywords; ``hparams`` and ``exit_on_preempt`` are dethpc's)."""

    def __init__(self, checkpoint: CheckpointContext,
                 distributed: DistributedContext | None = None,
                 preempt: PreemptContext | None = None, train: TrainContext | None = None,
                 searcher: SearcherContext | None = None, info: ClusterInfo | None = None,
                 experimental: ExperimentalCoreContext | None = None,
                 profiler: ProfilerContext | None = None, *,
                 hparams: Mapping[str, Any] | None = None,
                 exit_on_preempt: bool = True,
                 step_times: StepTimes | None = None) -> None:
        dist = distributed or DistributedContext()
        self.checkpoint = checkpoint
        self.distributed = dist
        self.preempt = preempt or DummyPreemptContext(dist)
        self.train = train or DummyTrainContext(dist=dist)
        self.searcher = searcher or DummySearcherContext(dist)
        #: the job's ClusterInfo, also off-cluster (ids None, the environment's seed and
        #: checkpoint directory): what dethpc's own layers read
        self.job_info = info if info is not None else ClusterInfo()
        self.experimental = experimental or DummyExperimentalCoreContext()
        self.profiler = profiler or ProfilerContext(distributed=dist)
        self.hparams: dict[str, Any] = dict(hparams or {})
        self.exit_on_preempt = exit_on_preempt
        #: this rank's step times for the straggler view (dethpc's; a trial of more than
        #: one rank on the cluster), fed by the Trainer
        self.step_times = step_times
        self._closed = False

    @property
    def info(self) -> ClusterInfo | None:
        """The trial's ``ClusterInfo``; ``None`` off-cluster, as Determined's
        (``det.core.init()`` outside a trial; ``det.get_cluster_info()`` is None there too)."""
        return self.job_info if self.job_info.on_cluster else None

    @info.setter
    def info(self, info: ClusterInfo | None) -> None:
        self.job_info = info if info is not None else ClusterInfo()

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Determined starts its background threads here; dethpc has none (the signal
        handlers are installed when the context is built)."""

    def __enter__(self) -> Context:
        self.start()
        return self

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.step_times is not None:
            self.step_times.write()
        self.preempt.close()
        self.train.close()
        self.distributed.close()

    def close(self, exc_type: type[BaseException] | None = None,
              exc_val: BaseException | None = None,
              exc_tb: types.TracebackType | None = None) -> None:
        """Close the sub-contexts. Without an exception, and after an acknowledged
        preemption, the process then exits 80 or 81 (``exit_on_preempt``), so that a
        script that ``close()``s by hand ends a preempted run as a ``with`` block does.
        A second ``close()`` does nothing."""
        if self._closed:
            return
        self._close()
        if exc_type is None and exc_val is None:
            self._exit_if_preempted()

    def __exit__(self, exc_type: type[BaseException] | None,
                 exc_val: BaseException | None,
                 exc_tb: types.TracebackType | None) -> None:
        self._close()
        if isinstance(exc_val, InvalidHP):
            if self.train.early_exit is None:
                self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            log.info("det.InvalidHP (%s): the trial exits early; exiting with 0", exc_val)
            self._flush_exit(0)
        if exc_val is None:
            self._exit_if_preempted()

    def _exit_if_preempted(self) -> None:
        code = self.preempt.exit_code()
        if code is not None and self.exit_on_preempt:
            log.info("exiting with %d (preempt reason: %s)", code, self.preempt.reason)
            self._flush_exit(code)

    @staticmethod
    def _flush_exit(code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(code)

    # --------------------------------------------------------------- alerts
    def alert(self, title: str | None = None, description: str | None = None,
              level: str | None = "info") -> None:
        """Determined posts a webhook event to its master; dethpc logs it and records an
        ``alert`` line in metrics.jsonl (rank 0) for the daemon to pass on."""
        self.train.report_alert(title, description, level or "info")

    def __repr__(self) -> str:
        return f"Context(info={self.job_info!r}, distributed={self.distributed!r})"


def with_trial_dir(env: Mapping[str, str]) -> Mapping[str, str]:
    """``env`` with ``DETHPC_TRIAL_DIR`` set to the detached trial directory when this
    is a Slurm job dethpc did not submit (registering it); unchanged otherwise."""
    if env.get(ENV_TRIAL_DIR):
        return env
    from dethpc.common.detached import trial_dir

    found = trial_dir(env)
    return env if found is None else {**env, ENV_TRIAL_DIR: str(found)}


def build_context(*, distributed: DistributedContext | None = None,
                  preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
                  env: Mapping[str, str] | None = None,
                  stop_check_interval_s: float = STOP_CHECK_INTERVAL_S,
                  tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
                  exit_on_preempt: bool = True) -> Context:
    env = with_trial_dir(os.environ if env is None else env)
    dist = distributed if distributed is not None else DistributedContext.auto(env)
    info = ClusterInfo.from_env(env)
    hparams = read_hparams(info.trial_dir, env)
    if info.trial_dir is None:
        raw_ckpt = env.get(ENV_CHECKPOINT_DIR)
        ckpt: CheckpointContext = DummyCheckpointContext(
            dist, directory=Path(raw_ckpt) if raw_ckpt else None)
        ctx = Context(ckpt, dist, DummyPreemptContext(dist, preempt_mode),
                      DummyTrainContext(dist=dist, tensorboard_mode=tensorboard_mode),
                      DummySearcherContext(dist), info, DummyExperimentalCoreContext(),
                      DummyProfilerContext(), hparams=hparams, exit_on_preempt=exit_on_preempt)
    else:
        paths = TrialPaths(Path(info.trial_dir))
        train = TrainContext(MetricsWriter(paths.metrics), dist, trial_dir=paths.root,
                             config=lambda: info.experiment_config,
                             tensorboard_mode=tensorboard_mode)
        ckpt = CheckpointContext(checkpoint_dir(paths.root, env), dist, train)
        target = Target.read(paths.target) if paths.target.exists() else None
        preempt = PreemptContext(dist, stop_file=paths.stop,
                                 signal_name=env.get(ENV_PREEMPT_SIGNAL) or "USR2",
                                 mode=preempt_mode, stop_check_interval_s=stop_check_interval_s,
                                 searched_file=paths.searched,
                                 verdict_wait=verdict_wait_s(env.get(ENV_VERDICT_WAIT_S)),
                                 heartbeat_file=paths.heartbeat)
        dump_stacks_on(STACK_DUMP_SIGNAL)
        if target is not None:
            train.on_validation = rung_hook(target.validate_at, target.length, preempt)
        searcher = (SearcherContext(target, dist, progress=train.report_progress) if target
                    else SearcherContextMissing(dist))
        steps = (StepTimes(paths.rank_times(dist.rank), rank=dist.rank, world=dist.size,
                           node=info.agent_id, run=info.run_id,
                           job=env.get("SLURM_JOB_ID", "")) if dist.size > 1 else None)
        ctx = Context(ckpt, dist, preempt, train, searcher, info,
                      ExperimentalCoreContext(trial_id=info.trial_id),
                      ProfilerContext(info.agent_id, distributed=dist), hparams=hparams,
                      exit_on_preempt=exit_on_preempt, step_times=steps)
    info._latest = ctx.checkpoint.latest
    return ctx


_CLUSTER_INFO: list[ClusterInfo | None] = []


def get_cluster_info(env: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The running trial's ``ClusterInfo``, or ``None`` outside a trial (as Determined).

    Computed once per process (``env`` given: computed afresh, not cached).
    ``latest_checkpoint`` is the newest verified checkpoint of the trial, found by
    this process alone, so any rank may ask without the others.
    """
    if env is None and _CLUSTER_INFO:
        return _CLUSTER_INFO[0]
    full = with_trial_dir(os.environ if env is None else env)
    info: ClusterInfo | None = ClusterInfo.from_env(full)
    if info is not None and info.trial_dir is None:
        info = None
    if info is not None:
        ckpt = CheckpointContext(checkpoint_dir(info.trial_dir or Path("."), full),
                                 DistributedContext())
        info._latest = ckpt.latest
    if env is None:
        _CLUSTER_INFO.append(info)
    return info
