"""dethpc's trial in the peers-at-scale benchmark: the shared emulator under dethpc's Core
API, written as a Determined 0.38 Core API user writes it (examples/core_api/).

Owns: one run of one trial: the hyperparameter ``curve`` picks a recorded curve; the
system's client import (``dethpc.core``; the curve read from the trial's
``hparams.json`` before it) and the start-up sleep are the emulator's
``start``; resume from ``det.get_cluster_info().latest_checkpoint``; then steps of 128
batches, a validation every ``PEERS_VALIDATE_EVERY`` steps reported with ``batches``
(ASHA's ``time_metric``) and a checkpoint after it; ``should_preempt()`` looked at after
every step: a preemption (Slurm's signal) saves a checkpoint and leaves, a searcher stop
leaves (the trial is decided). Every action is in the shared work log
(``$PEERS_WORKLOG``). Must not: be imported by dethpc; it runs as the experiment's
entrypoint with the repository on ``PYTHONPATH`` (the experiment's
``environment.environment_variables``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.peers_scale.emulator import EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.worklog import EndReason, WorkLog


def main() -> None:
    # the curve before the client import, which the emulator times: the trial's
    # hyperparameters file of the run directory (docs/job-contract.md)
    hparams = json.loads((Path(os.environ["DETHPC_TRIAL_DIR"]) / "hparams.json").read_text())
    curve = load_curves()[int(hparams["curve"])]
    trial = os.environ.get("DETHPC_TRIAL_ID", f"curve{curve.index}")
    spec = EmulatorSpec.from_env()
    every = int(os.environ.get("PEERS_VALIDATE_EVERY", "4"))
    emu = TrialEmulator(trial, curve, WorkLog(Path(os.environ["PEERS_WORKLOG"])), spec)
    emu.start("dethpc.core")        # container (once a job run), client import, CUDA

    import dethpc as det
    with det.core.init() as core_context:
        info = det.get_cluster_info()
        if info is not None and info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                emu.restore(path)
        length = core_context.searcher.target_length or curve.steps * curve.units_per_step
        steps = min(curve.steps, length // curve.units_per_step)

        def save() -> None:
            batches = emu.step * curve.units_per_step
            with core_context.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                emu.save(path)

        while emu.step < steps:
            emu.train_step()
            if emu.step % every == 0 or emu.step == steps:
                loss = emu.validate()
                batches = emu.step * curve.units_per_step
                core_context.train.report_validation_metrics(
                    steps_completed=batches,
                    metrics={"validation_loss": loss, "batches": batches})
                save()
            elif core_context.preempt.should_preempt() \
                    and core_context.preempt.reason != "stop":
                save()              # Slurm's signal: keep the steps since the last save
            if core_context.preempt.should_preempt():
                stopped = core_context.preempt.reason == "stop"
                emu.end(EndReason.STOPPED if stopped else EndReason.PREEMPTED)
                return
        emu.end(EndReason.COMPLETED)


if __name__ == "__main__":
    main()
