"""Build the searcher an experiment config asks for.

Owns: ``make_searcher``, the one place that maps ``searcher.name`` to a class.
Must not: do I/O or keep state; restoring a snapshot is the caller's job
(``make_searcher(...).restore(saved)``).
"""

from __future__ import annotations

from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.errors import ConfigError, FieldError
from dethpc.searchers.asha import AshaSearcher
from dethpc.searchers.base import Searcher
from dethpc.searchers.grid import GridSearcher
from dethpc.searchers.random_search import RandomSearcher
from dethpc.searchers.single import SingleSearcher

_CLASSES: dict[str, type[Searcher]] = {
    "single": SingleSearcher,
    "random": RandomSearcher,
    "grid": GridSearcher,
    "adaptive_asha": AshaSearcher,
}


def make_searcher(config: SearcherConfig, hparams: HParamTree, seed: int) -> Searcher:
    """A fresh searcher for ``config`` over ``hparams`` whose RNG is seeded with ``seed``
    (the experiment's ``reproducibility.experiment_seed``)."""
    cls = _CLASSES.get(config.name)
    if cls is None:
        raise ConfigError(
            [FieldError("searcher.name",
                        f"unknown searcher {config.name!r}; allowed: {', '.join(_CLASSES)}")],
            source="experiment config",
        )
    return cls(config, hparams, seed)  # type: ignore[call-arg]
