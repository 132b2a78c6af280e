"""The experiment config an experiment row stores, read back.

Owns: ``parse_stored`` -- ``Experiment.config_yaml`` to ``ExperimentConfig``, the one
parse the daemon makes of an experiment's config per tick (and every reader of a stored
experiment may share).
Must not: touch the store (callers hand it the text), apply overrides or warn: the
config was validated and its warnings shown when it was submitted.
"""

from __future__ import annotations

import yaml

from dethpc.config.experiment import parse_experiment_config
from dethpc.config.model import ExperimentConfig


def parse_stored(text: str) -> ExperimentConfig:
    """``text`` as ``dump_config`` stored it, parsed and validated. Its quoting reads the
    same under YAML 1.1 and 1.2 rules, so PyYAML's safe loader reads it (as the daemon
    always has); empty text is an empty mapping, which the parser refuses by name."""
    return parse_experiment_config(yaml.safe_load(text) or {})
