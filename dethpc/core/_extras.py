"""Determined's master-side services that a Slurm job has no counterpart for.

Owns: ``ProfilerContext`` (``core_context.profiler``: Determined samples the node's
CPU/GPU use and sends it to the master; here ``on()``/``off()`` are logged and do
nothing: ``sstat``/``seff`` and the job's own profilers see the same) and
``ExperimentalCoreContext`` (``core_context.experimental``: Determined records in its
model registry that the task used a checkpoint or a model version; here the call is
logged), with their Dummy twins.
Must not: start threads, talk to anything, or write files.
"""

from __future__ import annotations

import logging
from typing import Any

from dethpc.core._distributed import DistributedContext

log = logging.getLogger(__name__)


class ProfilerContext:
    """``on()``/``off()`` of Determined's system-metrics profiler: logged no-ops."""

    def __init__(self, agent_id: str = "", metrics: Any = None,
                 distributed: DistributedContext | None = None) -> None:
        del agent_id, metrics
        self._dist = distributed or DistributedContext()
        self.enabled = False
        self._told = False

    def on(self, sampling_interval: int = 1, samples_per_report: int = 10) -> None:
        if not self._told and self._dist.rank == 0:
            log.info("core_context.profiler.on(): dethpc collects no system metrics (no "
                     "master to show them); use sstat/seff or your own profiler")
            self._told = True
        del sampling_interval, samples_per_report
        self.enabled = True

    def off(self) -> None:
        self.enabled = False


class DummyProfilerContext(ProfilerContext):
    """Off-cluster twin (the same no-ops)."""

    def __init__(self) -> None:
        super().__init__()


class ExperimentalCoreContext:
    """Determined's model-registry links of a task: logged (no registry here)."""

    def __init__(self, session: Any = None, trial_id: int | None = None) -> None:
        del session
        self._trial_id = trial_id

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        uuid = getattr(checkpoint, "uuid", checkpoint)
        log.info("trial %s uses checkpoint %s (dethpc keeps no model registry)",
                 self._trial_id, uuid)

    def report_task_using_model_version(self, model_version: Any) -> None:
        log.info("trial %s uses model version %r (dethpc keeps no model registry)",
                 self._trial_id, model_version)


class DummyExperimentalCoreContext(ExperimentalCoreContext):
    """Off-cluster twin (the same log lines)."""

    def __init__(self) -> None:
        super().__init__()
