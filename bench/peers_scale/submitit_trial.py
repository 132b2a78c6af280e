"""submitit's trial in the peers-at-scale benchmark: one rung of one trial, checkpointable.

Owns: ``RungRun``, a ``submitit.helpers.Checkpointable`` (submitit's docs/checkpointing.md,
github.com/facebookincubator/submitit/blob/main/docs/checkpointing.md): called with one
``RungJob`` (trial ``i``, its shared curve, the rung's length in steps, the emulator's
costs), it starts the shared emulator (the client import ``submitit``, the start-up
sleep), resumes from the trial's checkpoint (``ckpt/t<i>``: the last rung's, or the one a
preemption left), trains to the rung's length with a validation and a checkpoint every 4
steps, and returns the last validation loss. On Slurm's signal (submitit's
``--signal=USR2@<delay>``, sent at preemption and before the time limit) submitit calls
``checkpoint`` with the same arguments while the job runs: ``self`` holds the running
emulator, so the steps since the last save are saved, the run ends ``preempted``, and the
returned ``DelayedSubmission`` (a fresh ``RungRun``, the same job) is what submitit
requeues; the requeued job resumes from that checkpoint. A job killed outright (a node
crash) is requeued by Slurm (``--requeue``) with its original submission and resumes
from the last validation's checkpoint. Each run of a rung ends ``completed`` at its
length: the driver decides which trials go on (a trial's last run is its last rung).
Must not: decide promotions (the driver does) or talk to Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from bench.peers_scale.emulator import STATE_FILE, EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.worklog import EndReason, WorkLog


@dataclass(frozen=True)
class RungJob:
    trial: int
    curve: int
    steps: int
    worklog: str
    ckpt_root: str
    validate_every: int
    spec: dict[str, Any]


class RungRun(submitit.helpers.Checkpointable):
    """One rung of one trial (see the module doc)."""

    def __init__(self) -> None:
        self.emu: TrialEmulator | None = None
        self.ckpt: Path | None = None
        self.saved = -1

    def __call__(self, job: RungJob) -> float:
        curve = load_curves()[job.curve]
        self.ckpt = Path(job.ckpt_root) / f"t{job.trial}"
        emu = TrialEmulator(f"t{job.trial}", curve, WorkLog(Path(job.worklog)),
                            EmulatorSpec(**job.spec))
        self.emu = emu
        emu.start("submitit")
        if (self.ckpt / STATE_FILE).exists():
            emu.restore(self.ckpt)
        self.saved = emu.step
        steps = min(job.steps, curve.steps)
        loss: float | None = None
        while emu.step < steps:
            emu.train_step()
            if emu.step % job.validate_every == 0 or emu.step == steps:
                loss = emu.validate()
                emu.save(self.ckpt)
                self.saved = emu.step
        if loss is None:        # resumed at the rung's end (requeued after its last save)
            loss = emu.validate()
        emu.end(EndReason.COMPLETED)
        self.emu = None
        return loss

    def checkpoint(self, job: RungJob) -> submitit.helpers.DelayedSubmission:
        """Called by submitit on Slurm's signal, while ``__call__`` runs."""
        emu, ckpt = self.emu, self.ckpt
        if emu is not None and ckpt is not None:
            if emu.step > self.saved:
                emu.save(ckpt)      # keep the steps since the last validation
            emu.end(EndReason.PREEMPTED)
        return submitit.helpers.DelayedSubmission(RungRun(), job)
