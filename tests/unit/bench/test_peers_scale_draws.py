"""bench/peers_scale/draws: the draws every system shares are dethpc's own, trial by trial."""

from __future__ import annotations

import pytest

from bench.peers_scale.draws import N_CURVES, shared_draws
from dethpc.config.experiment import parse_experiment_config
from dethpc.searchers.base import Create
from dethpc.searchers.factory import make_searcher


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_shared_draws_are_dethpcs_asha_draws_in_creation_order(seed: int) -> None:
    exp = {"name": "draws", "entrypoint": "python t.py",
           "hyperparameters": {"curve": {"type": "int", "minval": 0, "maxval": N_CURVES - 1}},
           "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                        "smaller_is_better": True, "max_trials": 16,
                        "time_metric": "batches", "max_time": 8192, "mode": "aggressive",
                        "divisor": 4, "max_rungs": 3, "max_concurrent_trials": 64},
           "reproducibility": {"experiment_seed": seed}}
    cfg = parse_experiment_config(exp)
    actions = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed).initial()
    drawn = [a.hparams["curve"] for a in actions if isinstance(a, Create)]
    assert drawn == shared_draws(seed, 16)


def test_draws_are_in_range_and_reject_a_negative_count() -> None:
    assert all(0 <= c < N_CURVES for c in shared_draws(3, 500))
    assert shared_draws(3, 0) == []
    with pytest.raises(ValueError):
        shared_draws(3, -1)
