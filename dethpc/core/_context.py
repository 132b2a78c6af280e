"""Assembling the in-job ``Context`` from the environment (real or Dummy twins).

Owns: ``Context`` (the sub-contexts in one object) and ``build_context()``, which
picks the real sub-contexts when the job has a trial directory and the Dummy twins
otherwise. The trial directory is ``DETHPC_TRIAL_DIR`` (a job dethpc submitted) or,
in a Slurm job dethpc did not submit, the one ``dethpc.common.detached`` registers in the
spool (``with_trial_dir``): metrics, checkpoints and ``latest_checkpoint`` work there
too, and a requeued job (same id) resumes from its own checkpoint.
It also owns ``get_cluster_info()`` (Determined's ``det.get_cluster_info()``):
the trial's ``ClusterInfo`` whose ``latest_checkpoint`` this process finds on its
own (no collective), or ``None`` off-cluster.
Must not: exit the process (``dethpc.core.init`` does), import torch, or read
any file other than through the sub-contexts and ``_info``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dethpc.common.jobenv import ENV_CHECKPOINT_DIR, ENV_PREEMPT_SIGNAL, ENV_TRIAL_DIR
from dethpc.common.paths import TrialPaths
from dethpc.core._checkpoint import CheckpointContext, DummyCheckpointContext
from dethpc.core._distributed import DistributedContext
from dethpc.core._info import ClusterInfo, checkpoint_dir, read_hparams
from dethpc.core._preempt import (
    STOP_CHECK_INTERVAL_S,
    DummyPreemptContext,
    PreemptContext,
    PreemptMode,
)
from dethpc.core._searcher import DummySearcherContext, SearcherContext, Target
from dethpc.core._train import DummyTrainContext, MetricsWriter, TrainContext


@dataclass
class Context:
    """What training code gets from ``dethpc.core.init()``."""

    distributed: DistributedContext
    train: TrainContext
    checkpoint: CheckpointContext
    preempt: PreemptContext
    searcher: SearcherContext
    info: ClusterInfo
    hparams: dict[str, Any]

    def close(self) -> None:
        self.preempt.close()
        self.train.close()
        self.distributed.close()


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
                  stop_check_interval_s: float = STOP_CHECK_INTERVAL_S) -> Context:
    env = with_trial_dir(os.environ if env is None else env)
    dist = distributed if distributed is not None else DistributedContext.auto(env)
    info = ClusterInfo.from_env(env)
    hparams = read_hparams(info.trial_dir, env)
    if info.trial_dir is None:
        raw_ckpt = env.get(ENV_CHECKPOINT_DIR)
        ckpt: CheckpointContext = DummyCheckpointContext(Path(raw_ckpt) if raw_ckpt else None,
                                                         dist)
        ctx = Context(distributed=dist, train=DummyTrainContext(dist), checkpoint=ckpt,
                      preempt=DummyPreemptContext(dist), searcher=DummySearcherContext(None, dist),
                      info=info, hparams=hparams)
    else:
        paths = TrialPaths(Path(info.trial_dir))
        train = TrainContext(MetricsWriter(paths.metrics), dist)
        ckpt = CheckpointContext(checkpoint_dir(paths.root, env), dist, train)
        target = Target.read(paths.target) if paths.target.exists() else None
        preempt = PreemptContext(dist, stop_file=paths.stop,
                                 signal_name=env.get(ENV_PREEMPT_SIGNAL) or "USR2",
                                 mode=preempt_mode, stop_check_interval_s=stop_check_interval_s)
        ctx = Context(distributed=dist, train=train, checkpoint=ckpt, preempt=preempt,
                      searcher=SearcherContext(target, dist), info=info, hparams=hparams)
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
