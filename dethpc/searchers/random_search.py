"""The random searcher.

Owns: ``RandomSearcher`` -- ``max_trials`` trials with hparams sampled from the
tree, at most ``max_concurrent_trials`` alive at once (0 = no limit), the pool
rules of ``dethpc.searchers.independent``, a trial that raised ``det.InvalidHP`` replaced by a
new sample (not counted) -- and its ``SPEC`` (no keys of its own;
``max_trials`` required).
Must not: do I/O, read the clock or use the global RNG; early-stop anything.
"""

from __future__ import annotations

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.config.searcher_registry import SearcherSpec
from dethpc.searchers.independent import IndependentSearcher


class RandomSearcher(IndependentSearcher):
    """Determined's ``random``: ``max_trials`` sampled trials, ``max_concurrent_trials``
    at a time (0 = no limit)."""

    name = "random"
    #: Determined's random search replaces a trial that raised ``det.InvalidHP``
    replaces_invalid = True

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        if config.max_trials < 1:
            raise ConfigError([FieldError("searcher.max_trials", "must be >= 1")],
                              source="experiment config")
        super().__init__(config, hparams, seed, total=config.max_trials,
                         concurrency=config.max_concurrent_trials)


SPEC = SearcherSpec(name=RandomSearcher.name, factory=RandomSearcher, fit_length_wins=True)
