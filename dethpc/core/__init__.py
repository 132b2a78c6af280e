"""The in-job API: ``dethpc.core.init()`` and the sub-contexts it returns.

Owns: the public names of the core API and ``init()``, the context manager that
builds a ``Context`` and, when the code inside saw ``preempt.should_preempt()``
return True and left normally, exits the process with ``EXIT_PREEMPTED`` (80,
after a signal) or ``EXIT_STOPPED`` (81, after a stop/pause file), as
docs/job-contract.md says.
Must not: import torch (the daemon imports dethpc on a login node without it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping

from dethpc.core._checkpoint import (
    CheckpointContext,
    CheckpointError,
    CheckpointInfo,
    DummyCheckpointContext,
)
from dethpc.core._context import Context, build_context
from dethpc.core._distributed import (
    DistributedContext,
    DummyDistributedContext,
    TorchDistributedContext,
)
from dethpc.core._info import ClusterInfo
from dethpc.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from dethpc.core._searcher import (
    DummySearcherContext,
    SearcherContext,
    SearcherOperation,
    Target,
)
from dethpc.core._train import DummyTrainContext, TrainContext

__all__ = [
    "CheckpointContext", "CheckpointError", "CheckpointInfo", "ClusterInfo", "Context",
    "DistributedContext", "DummyCheckpointContext", "DummyDistributedContext",
    "DummyPreemptContext", "DummySearcherContext", "DummyTrainContext", "PreemptContext",
    "PreemptMode", "SearcherContext", "SearcherOperation", "Target", "TorchDistributedContext",
    "TrainContext", "init",
]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def init(*, distributed: DistributedContext | None = None,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         env: Mapping[str, str] | None = None,
         stop_check_interval_s: float = 1.0,
         exit_on_preempt: bool = True) -> Iterator[Context]:
    """Build the trial's ``Context`` (Dummy twins when ``DETHPC_TRIAL_DIR`` is unset).

    ``distributed``: defaults to torch.distributed when initialized, else one process.
    ``stop_check_interval_s``: the stop file is stat'ed at most this often.
    ``exit_on_preempt``: leave it True in jobs; tests may set False and read
    ``ctx.preempt.exit_code()`` instead of catching ``SystemExit``.
    """
    ctx = build_context(distributed=distributed, preempt_mode=preempt_mode, env=env,
                        stop_check_interval_s=stop_check_interval_s)
    try:
        yield ctx
    finally:
        ctx.close()
    code = ctx.preempt.exit_code()
    if code is not None and exit_on_preempt:
        log.info("exiting with %d (preempt reason: %s)", code, ctx.preempt.reason)
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(code)
