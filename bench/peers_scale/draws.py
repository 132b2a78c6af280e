"""The hyperparameter draws every system of the peers-at-scale benchmark shares.

Owns: ``shared_draws(seed, trials)``: the curve (``0..127``) of trial ``i`` of a seed, the
same for every system. They are dethpc's own draws: its ``adaptive_asha`` searcher seeds
``random.Random(experiment_seed)`` and draws the one ``int`` hyperparameter ``curve``
(``minval 0``, ``maxval 127``) with ``randint`` once per trial, in creation order
(dethpc/searchers/sampling.py ``sample_one``), so ``shared_draws(seed, n)[i]`` is the
curve of dethpc's ``i+1``-th trial (checked against the searcher in
tests/unit/bench/test_peers_scale_draws.py). A peer that draws the space itself (its own
sampler) says so in its runner instead.
Must not: draw from a global random state.
"""

from __future__ import annotations

import random

#: the curves of bench/asha/curves_cnn_long.json: the hyperparameter's range is 0..N-1
N_CURVES = 128


def shared_draws(seed: int, trials: int, n_curves: int = N_CURVES) -> list[int]:
    """The curve of each of ``trials`` trials of seed ``seed`` (dethpc's draw order)."""
    if trials < 0 or n_curves < 1:
        raise ValueError(f"trials {trials} must be >= 0 and n_curves {n_curves} >= 1")
    rng = random.Random(seed)
    return [rng.randint(0, n_curves - 1) for _ in range(trials)]
