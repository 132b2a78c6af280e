"""The experiment config an experiment row stores, read back.

Owns: ``parse_stored`` -- ``Experiment.config_yaml`` to ``ExperimentConfig``, the one
parse the daemon makes of an experiment's config per tick (and every reader of a stored
experiment may share), remembered by its text: a tick reads every open experiment's
config more than once, and the parse (YAML, then validation) was about 30 % of an idle
tick's CPU (10 ms a config on the dev machine).
Must not: touch the store (callers hand it the text), apply overrides or warn: the
config was validated and its warnings shown when it was submitted.
"""

from __future__ import annotations

from functools import lru_cache

from dethpc.config._yaml import load_stored_yaml
from dethpc.config.experiment import parse_experiment_config
from dethpc.config.model import ExperimentConfig

#: parsed configs remembered (one per distinct stored text: an open experiment's, mostly)
CACHED_CONFIGS = 4096


@lru_cache(maxsize=CACHED_CONFIGS)
def parse_stored(text: str) -> ExperimentConfig:
    """``text`` as ``dump_config`` stored it, parsed and validated. Its quoting reads the
    same under YAML 1.1 and 1.2 rules, so PyYAML's safe loader reads it (as the daemon
    always has), under the stored bounds (``load_stored_yaml``: an alias bomb an older
    dethpc stored is refused, not expanded); empty text is an empty mapping, which the
    parser refuses by name. The same text gives the same (frozen) object; an error is
    raised again each time."""
    return parse_experiment_config(load_stored_yaml(text) or {})
