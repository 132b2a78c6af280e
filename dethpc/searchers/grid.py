"""The grid searcher: one full-length trial per grid point.

Owns: ``GridSearcher``. The grid is the cartesian product of each
hyperparameter's values (``sampling.grid``: const -> its value, categorical ->
all ``vals``, int/double/log -> ``count`` evenly spaced points, int rounded and
clamped to the integers of the range). Like Determined -- whose grid config has
no ``max_trials`` -- the number of trials is the grid size and ``max_trials`` is
ignored; ``max_concurrent_trials`` bounds the trials alive at once (0 = all).
Must not: do I/O, read the clock or use the global RNG (the grid needs none).
"""

from __future__ import annotations

from typing import Any

from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.searchers import sampling
from dethpc.searchers.random_search import PoolSearcher


class GridSearcher(PoolSearcher):
    """All grid points, in ``sampling.grid`` order."""

    name = "grid"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        self.points = sampling.grid(hparams)
        super().__init__(config, hparams, seed, total=len(self.points),
                         concurrency=config.max_concurrent_trials)

    def _hparams(self, index: int) -> dict[str, Any]:
        return self.points[index]
