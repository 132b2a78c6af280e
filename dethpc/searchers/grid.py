"""The grid searcher: one full-length trial per grid point.

Owns: ``GridSearcher`` and its ``SPEC``. The grid is the cartesian product of
each hyperparameter's values (``sampling.grid``: const -> its value,
categorical -> all ``vals``, int/double/log -> ``count`` evenly spaced points,
int rounded and clamped to the integers of the range). Like Determined -- whose
grid config has no ``max_trials`` -- the number of trials is the grid size and a
given ``max_trials`` is ignored with a warning; every numeric hyperparameter
needs a ``count`` (checked at config time); ``max_concurrent_trials`` bounds
the trials alive at once (0 = all).
Must not: do I/O, read the clock or use the global RNG (the grid needs none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dethpc.config._check import Checker
from dethpc.config.hparams import flatten_hparams, grid_points, grid_size
from dethpc.config.model import CategoricalHP, ConstHP, HParamTree, SearcherConfig
from dethpc.config.searcher_registry import SearcherSpec
from dethpc.searchers import sampling
from dethpc.searchers.independent import IndependentSearcher


class GridSearcher(IndependentSearcher):
    """All grid points, in ``sampling.grid`` order."""

    name = "grid"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        self.points = sampling.grid(hparams)
        super().__init__(config, hparams, seed, total=len(self.points),
                         concurrency=config.max_concurrent_trials)

    def _hparams(self, index: int) -> dict[str, Any]:
        return self.points[index]


def _check_counts(ck: Checker, data: Mapping[str, Any], path: str, hparams: HParamTree) -> None:
    for dotted, hp in flatten_hparams(hparams).items():
        if grid_points(hp) is None and not isinstance(hp, ConstHP | CategoricalHP):
            ck.error(f"hyperparameters.{dotted}.count",
                     "required by the grid searcher; expected an integer >= 1")


def _grid_size(ck: Checker, value: Any, path: str, hparams: HParamTree) -> int:
    size = grid_size(hparams)
    if value is not None and value != size:
        ck.warn(path, f"ignored: the grid searcher runs every grid point ({size} trials)")
    return size


SPEC = SearcherSpec(name=GridSearcher.name, factory=GridSearcher, max_trials=_grid_size,
                    check=_check_counts, fit_length_wins=True)
