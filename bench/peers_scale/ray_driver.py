"""Ray Tune's search in the peers-at-scale benchmark: the driver that runs inside the Ray
allocation (peer_ray.py writes the sbatch script that starts it), written as Ray's
documentation shows.

Owns: the trainable (a function trainable, the shared emulator under it: trial ``i`` gets
the shared draw ``i`` through ``tune.grid_search`` over the draws in order; the client
import is ``ray.tune``; a resumed trial restores ``tune.get_checkpoint()``; every 4 steps
a validation reported as ``{"loss", "steps"}`` with a checkpoint,
``tune.report(metrics, checkpoint=Checkpoint.from_directory(d))``), one GPU a trial
(``tune.with_resources``), ``ASHAScheduler(time_attr="steps", grace_period=4,
reduction_factor=4, max_t=64)`` (rungs at 4/16/64 steps: dethpc's 1/4/16 validation
periods), ``FailureConfig(max_failures=...)`` (a trial whose worker died restarts from its
checkpoint), and on a rerun of the allocation (Slurm's requeue after a preemption or a node
failure; a person's resubmission after the driver was killed)
``Tuner.restore(path, trainable, resume_errored=True)`` when ``Tuner.can_restore(path)``.
Docs followed: "How to Enable Fault Tolerance in Ray Tune"
(docs.ray.io/en/latest/tune/tutorials/tune-fault-tolerance.html), "How to Save and Load
Trial Checkpoints" (tune/tutorials/tune-trial-checkpoints.html), ``ASHAScheduler``
(tune/api/schedulers.html), "A Guide To Parallelism and Resources for Ray Tune"
(tune/tutorials/tune-resources.html).

A trial that ASHA stops: Tune's function trainable reports synchronously, so the stop
reaches the trial as ``SystemExit`` inside ``tune.report``; the trial's ``end`` record
(``stopped``, or ``completed`` at its last step) is written there before it leaves.
Writes ``<storage>/<name>.starts`` (one line a driver start: fresh or restored) and, when
``fit()`` returns, ``<storage>/<name>.done.json`` (trial states): the runner's
``finished``. Must not: be imported by dethpc or by the benchmark's driver (it needs Ray:
bench/peers/.venv).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.schedulers import ASHAScheduler

from bench.peers_scale.emulator import EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.worklog import EndReason, WorkLog


def trainable(config: dict[str, Any]) -> None:
    """One trial: the emulated curve ``config["curve"]``, validated and checkpointed every
    ``PEERS_VALIDATE_EVERY`` steps."""
    curve = load_curves()[int(config["curve"])]
    every = int(os.environ.get("PEERS_VALIDATE_EVERY", "4"))
    emu = TrialEmulator(tune.get_context().get_trial_id(), curve,
                        WorkLog(Path(os.environ["PEERS_WORKLOG"])), EmulatorSpec.from_env())
    emu.start("ray.tune")
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            emu.restore(Path(d))
    while not emu.done:
        emu.train_step()
        if emu.step % every and not emu.done:
            continue
        loss = emu.validate()
        with tempfile.TemporaryDirectory() as d:
            emu.save(Path(d))
            try:
                tune.report({"loss": loss, "steps": emu.step},
                            checkpoint=tune.Checkpoint.from_directory(d))
            except SystemExit:      # the scheduler stopped the trial (or it reached max_t)
                emu.end(EndReason.COMPLETED if emu.done else EndReason.STOPPED)
                raise
    emu.end(EndReason.COMPLETED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--storage", type=Path, required=True)
    ap.add_argument("--name", default="peers")
    ap.add_argument("--draws", required=True, help="the shared curves, comma-separated")
    ap.add_argument("--max-failures", type=int, default=3)
    args = ap.parse_args()
    import ray
    # the head's address, as the sbatch script exports it (the page's ``ip_head``)
    ray.init(address=os.environ.get("ip_head", "auto"), log_to_driver=False)
    path = str(args.storage / args.name)
    starts = args.storage / f"{args.name}.starts"
    restoring = tune.Tuner.can_restore(path)
    with starts.open("a") as fh:
        fh.write(json.dumps({"at": time.time(), "pid": os.getpid(),
                             "job": os.environ.get("SLURM_JOB_ID"),
                             "restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
                             "restored": restoring, "ray": ray.__version__}) + "\n")
    (args.storage / f"{args.name}.driver.pid").write_text(f"{os.getpid()}\n")
    resourced = tune.with_resources(trainable, {"cpu": 1, "gpu": 1})
    if restoring:
        tuner = tune.Tuner.restore(path, trainable=resourced, resume_errored=True)
    else:
        draws = [int(c) for c in args.draws.split(",") if c]
        tuner = tune.Tuner(
            resourced,
            param_space={"curve": tune.grid_search(draws)},
            tune_config=tune.TuneConfig(
                metric="loss", mode="min",
                scheduler=ASHAScheduler(time_attr="steps", max_t=64, grace_period=4,
                                        reduction_factor=4)),
            run_config=tune.RunConfig(
                storage_path=str(args.storage), name=args.name, verbose=1,
                failure_config=tune.FailureConfig(max_failures=args.max_failures)))
    grid = tuner.fit()
    states: dict[str, int] = {}
    # each trial's verdict (metrics.Verdict's values), keyed as the work log's trials
    # (the trial id): ERROR (FailureConfig's retries spent) given up, TERMINATED (ASHA's
    # stop or the end) decided; a trial that never reported has no id here
    verdicts: dict[str, str] = {}
    for result in grid:
        key = "error" if result.error else "ok"
        states[key] = states.get(key, 0) + 1
        if (result.metrics or {}).get("trial_id"):
            verdicts[str(result.metrics["trial_id"])] = "gave_up" if result.error \
                else "decided"
    (args.storage / f"{args.name}.done.json").write_text(json.dumps(
        {"at": time.time(), "trials": len(grid), "results": states,
         "errors": grid.num_errors, "terminated": grid.num_terminated,
         "verdicts": verdicts}) + "\n")


if __name__ == "__main__":
    main()
