"""The in-job API: ``dethpc.core.init()`` and the sub-contexts it returns.

Owns: the public names of the core API (Determined's ``det.core`` names, each classified
in ``dethpc.core.determined_rules``) and ``init()``, which builds the ``Context`` that
training code enters with ``with`` (or ``start()``s and ``close()``s, as Determined
allows); leaving it after ``preempt.should_preempt()`` returned True exits the process with
``EXIT_PREEMPTED`` (80, after a signal) or ``EXIT_STOPPED`` (81, after a stop/pause file),
as docs/job-contract.md says.
Must not: import torch (the daemon imports dethpc on a login node without it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from dethpc.common.errors import CheckpointNotFound, InvalidHP
from dethpc.common.jobenv import ENV_CHECKPOINT_DIR, ENV_TRIAL_DIR
from dethpc.core._checkpoint import (
    CheckpointContext,
    CheckpointError,
    CheckpointInfo,
    DownloadMode,
    DummyCheckpointContext,
)
from dethpc.core._context import Context, build_context, get_cluster_info, with_trial_dir
from dethpc.core._distributed import (
    DistributedContext,
    DummyDistributedContext,
    TorchDistributedContext,
)
from dethpc.core._extras import (
    DummyExperimentalCoreContext,
    DummyProfilerContext,
    ExperimentalCoreContext,
    ProfilerContext,
)
from dethpc.core._imports import import_from_path
from dethpc.core._info import (
    LOG_FORMAT,
    ClusterInfo,
    RendezvousInfo,
    ResourcesInfo,
    TrialInfo,
)
from dethpc.core._preempt import (
    STOP_CHECK_INTERVAL_S,
    DummyPreemptContext,
    PreemptContext,
    PreemptMode,
)
from dethpc.core._searcher import (
    DummySearcherContext,
    DummySearcherOperation,
    SearcherContext,
    SearcherContextMissing,
    SearcherMode,
    SearcherOperation,
    Target,
    Unit,
)
from dethpc.core._train import (
    DummyTrainContext,
    EarlyExitReason,
    TensorboardMode,
    TrainContext,
)

__all__ = [
    "LOG_FORMAT", "CheckpointContext", "CheckpointError", "CheckpointInfo",
    "CheckpointNotFound", "ClusterInfo", "Context", "DistributedContext", "DownloadMode",
    "DummyCheckpointContext", "DummyDistributedContext", "DummyExperimentalCoreContext",
    "DummyPreemptContext", "DummyProfilerContext", "DummySearcherContext",
    "DummySearcherOperation", "DummyTrainContext", "EarlyExitReason",
    "ExperimentalCoreContext", "InvalidHP", "PreemptContext", "PreemptMode",
    "ProfilerContext", "RendezvousInfo", "ResourcesInfo", "SearcherContext",
    "SearcherContextMissing", "SearcherMode", "SearcherOperation", "Target",
    "TensorboardMode", "TorchDistributedContext", "TrainContext", "TrialInfo", "Unit",
    "get_cluster_info", "import_from_path", "init",
]

log = logging.getLogger(__name__)


def _storage_env(checkpoint_storage: str | Mapping[str, Any] | None,
                 env: Mapping[str, str]) -> Mapping[str, str]:
    """Determined's ``checkpoint_storage=`` argument: a directory is used off-cluster;
    in a trial checkpoints always go to the trial's directory (the daemon reads them)."""
    if checkpoint_storage is None:
        return env
    if env.get(ENV_TRIAL_DIR):
        log.warning("core.init(checkpoint_storage=...) is ignored in a dethpc trial: "
                    "checkpoints go to the trial's checkpoint directory")
        return env
    if isinstance(checkpoint_storage, str) and "://" not in checkpoint_storage:
        return {**env, ENV_CHECKPOINT_DIR: checkpoint_storage}
    raise CheckpointError(f"checkpoint_storage={checkpoint_storage!r} is not supported by "
                          f"dethpc: give a directory path (or set ${ENV_CHECKPOINT_DIR})")


def init(*, distributed: DistributedContext | None = None,
         checkpoint_storage: str | Mapping[str, Any] | None = None,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
         env: Mapping[str, str] | None = None,
         stop_check_interval_s: float = STOP_CHECK_INTERVAL_S,
         exit_on_preempt: bool = True) -> Context:
    """Build the trial's ``Context`` (Dummy twins outside a trial and any Slurm job);
    use it as ``with dethpc.core.init() as ctx:`` (or ``start()`` and ``close()`` it).

    In a Slurm job dethpc did not submit, the job registers itself in the spool
    (``dethpc.common.detached``; ``DETHPC_DETACHED=0`` turns that off) and gets the real
    contexts over that directory; the daemon adopts it (docs/detached.md).

    Determined's ``core.init()`` keywords are accepted: ``distributed``,
    ``checkpoint_storage`` (a directory, used off-cluster), ``preempt_mode``,
    ``tensorboard_mode`` (MANUAL allows ``train.upload_tensorboard_files()``).
    ``distributed``: defaults to torch.distributed when initialized, else one process.
    ``stop_check_interval_s``: the stop file is looked for at most this often (0.1 s).
    ``exit_on_preempt``: leave it True in jobs; tests may set False and read
    ``ctx.preempt.exit_code()`` instead of catching ``SystemExit``.
    """
    TensorboardMode(tensorboard_mode)
    env = _storage_env(checkpoint_storage, with_trial_dir(os.environ if env is None else env))
    return build_context(distributed=distributed, preempt_mode=preempt_mode, env=env,
                         stop_check_interval_s=stop_check_interval_s,
                         tensorboard_mode=TensorboardMode(tensorboard_mode),
                         exit_on_preempt=exit_on_preempt)
