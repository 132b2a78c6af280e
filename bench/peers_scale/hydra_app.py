"""Hydra 1.3.8 in the peers-at-scale benchmark: the emulated trial as a Hydra app, swept by
Hydra's Optuna sweeper over its submitit launcher (peer_hydra.py runs the multirun).

Owns: the app (``@hydra.main``, config ``hydra_conf/config.yaml``): the trial of job
``hydra.job.num`` (worklog key ``hydra-<num>``) replays curve ``cfg.curve``; the client
import is ``hydra``; every 4 steps a validation and a checkpoint in the job's own output
directory (``${hydra.sweep.dir}/<num>``), which a rerun of the same job resumes -- a
requeue by submitit after a preemption or a timeout (submitit's checkpointing.md; the
launcher's ``checkpoint`` resubmits the job as it was), or the multirun run again by a
person with the same sweep dir; the job returns its last validation loss, which the
sweeper minimizes. And ``SharedDrawsSampler``: an Optuna sampler (optuna 2.10, which
hydra-optuna-sweeper 1.3.0 requires) that gives trial ``number`` the shared draw
``shared_draws(seed, ...)[number]`` -- the benchmark's control, so that every system
trains the same curves in the same order.

What Hydra's Optuna sweeper cannot do, and so this app does not: prune. The sweeper
asks ``n_jobs`` trials, launches them as one submitit array, waits for every one of them,
tells the results, and asks the next batch (``_impl.py: sweep``); there is no report of
intermediate values and no pruner, so every trial trains its full 64 steps, and a batch
waits for its slowest trial. ``max_time`` has no sense here (no time budget in the
sweeper). Must not: be imported by dethpc or by the benchmark's driver (it needs
bench/peers/.venv-hydra).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import hydra
import optuna
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from bench.peers_scale.draws import N_CURVES, shared_draws
from bench.peers_scale.emulator import STATE_FILE, EmulatorSpec, TrialEmulator, load_curves
from bench.peers_scale.worklog import EndReason, WorkLog


class SharedDrawsSampler(optuna.samplers.BaseSampler):
    """Trial ``number`` gets the ``number``-th shared draw of ``seed`` for every
    parameter (the space here is the one ``curve``)."""

    def __init__(self, seed: int, n_curves: int = N_CURVES) -> None:
        self.seed, self.n_curves = int(seed), int(n_curves)
        self._draws: list[int] = []

    def _draw(self, number: int) -> int:
        if number >= len(self._draws):
            self._draws = shared_draws(self.seed, max(2 * number + 1, 64), self.n_curves)
        return self._draws[number]

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, param_name: str,
                           param_distribution: Any) -> Any:
        return self._draw(trial.number)


def _own_checkpoint(directory: Path, trial: str, curve: int) -> bool:
    """Whether ``directory`` holds this trial's own state (a rerun may find another's)."""
    try:
        state = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return bool(state.get("trial") == trial and state.get("curve") == curve)


@hydra.main(version_base=None, config_path="hydra_conf", config_name="config")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    trial = f"hydra-{hc.job.num}"
    curve = load_curves()[int(cfg.curve)]
    every = int(os.environ.get("PEERS_VALIDATE_EVERY", "4"))
    emu = TrialEmulator(trial, curve, WorkLog(Path(os.environ["PEERS_WORKLOG"])),
                        EmulatorSpec.from_env())
    emu.start("hydra")
    ckpt = Path(hc.runtime.output_dir) / "checkpoint"
    if _own_checkpoint(ckpt, trial, curve.index):
        emu.restore(ckpt)
    loss: float | None = None
    while not emu.done:
        emu.train_step()
        if emu.step % every == 0 or emu.done:
            loss = emu.validate()
            emu.save(ckpt)
    if loss is None:        # resumed at its end: its result again
        loss = emu.validate()
    emu.end(EndReason.COMPLETED)
    return loss


if __name__ == "__main__":
    main()
