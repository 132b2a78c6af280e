"""The single searcher: one trial trained to ``max_length``.

Owns: ``SingleSearcher`` and its ``SPEC`` (no keys of its own; a given
``max_trials`` other than 1 is ignored with a warning). Like Determined's
``single``, the hparams are sampled once from the tree (const values as given;
a range is drawn once with the experiment seed), so a config written for
``random`` also runs under ``single``.
Must not: do I/O, read the clock or use the global RNG.
"""

from __future__ import annotations

from typing import Any

from dethpc.config._check import Checker, show
from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.config.searcher_registry import SearcherSpec
from dethpc.searchers.independent import IndependentSearcher


class SingleSearcher(IndependentSearcher):
    """Exactly one trial, whatever ``max_trials`` says."""

    name = "single"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        super().__init__(config, hparams, seed, total=1, concurrency=1)


def _one_trial(ck: Checker, value: Any, path: str, hparams: HParamTree) -> int:
    if value is not None and value != 1:
        ck.warn(path, f"ignored: the single searcher runs exactly one trial (got {show(value)})")
    return 1


SPEC = SearcherSpec(name=SingleSearcher.name, factory=SingleSearcher, max_trials=_one_trial,
                    fit_length_wins=True)
