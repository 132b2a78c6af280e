"""``dethpc.pytorch.init()``: process group + ``dethpc.core.init()`` + trial context.

Owns: initializing ``torch.distributed`` from the launcher's environment
(``WORLD_SIZE`` > 1: NCCL with CUDA, gloo otherwise; ``env://`` rendezvous via
``MASTER_ADDR``/``MASTER_PORT``/``RANK``) and tearing it down again.
Must not: choose ports or addresses (``dethpc.launch`` does), or run training.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

import dethpc.core as core
from dethpc.common.errors import DethpcError
from dethpc.common.exitcodes import EXIT_PREEMPTED, EXIT_STOPPED
from dethpc.core import DistributedContext, PreemptMode
from dethpc.pytorch._trial import PyTorchTrialContext

log = logging.getLogger(__name__)
T = TypeVar("T")


def init_distributed(env: Mapping[str, str] | None = None) -> DistributedContext | None:
    """Initialize the default process group when ``WORLD_SIZE`` > 1 (idempotent).

    Returns the distributed context to pass to ``dethpc.core.init(distributed=...)``,
    or None for a single process.
    """
    env = os.environ if env is None else env
    if dist.is_available() and dist.is_initialized():
        return DistributedContext.from_torch_distributed(env=env)
    world = int(env.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return None
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local = int(env.get("LOCAL_RANK", "0") or 0)
        torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group(backend=backend)
    log.info("torch.distributed initialized: rank %d of %d (%s)", dist.get_rank(),
             dist.get_world_size(), backend)
    return DistributedContext.from_torch_distributed(env=env)


@contextlib.contextmanager
def init(*, hparams: Mapping[str, Any] | None = None,
         exp_conf: Mapping[str, Any] | None = None,
         distributed: DistributedContext | None = None,
         aggregation_frequency: int = 1,
         enable_tensorboard_logging: bool = True,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         exit_on_preempt: bool = True) -> Iterator[PyTorchTrialContext]:
    """Like Determined's ``det.pytorch.init()``: yields a ``PyTorchTrialContext``.

    ``hparams`` replaces the trial's hyperparameters (use it off-cluster for defaults).
    ``exp_conf`` (Determined's, for local training) is what ``get_experiment_config()``
    answers off-cluster (and what a checkpoint's ``load_data.json`` records), as
    Determined's; in a trial the trial's config.yaml is read instead.
    ``aggregation_frequency`` must be 1; ``enable_tensorboard_logging`` has no effect (no
    TensorBoard files are written).
    """
    del enable_tensorboard_logging
    if aggregation_frequency != 1:
        raise DethpcError(f"aggregation_frequency={aggregation_frequency} is not supported by "
                          "dethpc (gradients are exchanged every batch); use 1")
    with trial_context(PyTorchTrialContext, hparams=hparams, distributed=distributed,
                       preempt_mode=preempt_mode, exit_on_preempt=exit_on_preempt) as context:
        if exp_conf is not None and not context.core.job_info.on_cluster:
            context._exp_conf = dict(exp_conf)
        yield context


@contextlib.contextmanager
def trial_context(make: Callable[..., T], *, hparams: Mapping[str, Any] | None,
                  distributed: DistributedContext | None, preempt_mode: PreemptMode,
                  exit_on_preempt: bool) -> Iterator[T]:
    """``make(core_context, hparams=hparams)`` inside ``dethpc.core.init()``, with the
    process group set up (and torn down) around it: ``init()``'s body, shared with
    ``dethpc.pytorch.deepspeed.init()``."""
    created = False
    if distributed is None:
        created = not (dist.is_available() and dist.is_initialized())
        distributed = init_distributed()
        created = created and distributed is not None
    together = False  # every rank leaves at the same point: a barrier cannot hang
    try:
        with core.init(distributed=distributed, preempt_mode=preempt_mode,
                       exit_on_preempt=exit_on_preempt) as core_context:
            yield make(core_context, hparams=hparams)
        together = True
    except SystemExit as exc:  # preempted/stopped: the ranks agreed on the step
        together = exc.code in (EXIT_PREEMPTED, EXIT_STOPPED)
        raise
    finally:
        if created and dist.is_initialized():
            shutdown_process_group(together)


def shutdown_process_group(together: bool) -> None:
    """Tear the default process group down. ``together``: wait for every rank first.

    Without the barrier a rank that tears gloo down while a peer is still finishing
    its last collective can abort the peer ("terminate called without an active
    exception", exit 134; seen once on the dev cluster, 2 nodes x 2 ranks) and fail a
    finished job. After an error on one rank the others would wait for it forever
    (gloo's timeout is 30 min), so then there is no barrier.
    """
    if together and dist.get_world_size() > 1:
        try:
            dist.barrier()
        except Exception as exc:  # noqa: BLE001 - a peer died: tear down anyway
            log.warning("barrier before destroying the process group failed: %s", exc)
    dist.destroy_process_group()
