"""The single searcher: one trial trained to ``max_length``.

Owns: ``SingleSearcher``. Like Determined's ``single``, the hparams are sampled
once from the tree (const values as given; a range is drawn once with the
experiment seed), so a config written for ``random`` also runs under ``single``.
Must not: do I/O, read the clock or use the global RNG.
"""

from __future__ import annotations

from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.searchers.random_search import PoolSearcher


class SingleSearcher(PoolSearcher):
    """Exactly one trial, whatever ``max_trials`` says."""

    name = "single"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        super().__init__(config, hparams, seed, total=1, concurrency=1)
