"""The config of a cluster test experiment (``dethpc experiment create --test``).

Owns: ``make_test_config``: from a user's raw experiment config and the
hyperparameters of its first trial, the raw config of a very small experiment
that proves the job runs on the cluster, as Determined's
``make_test_experiment_config`` does: one trial (``single`` searcher on the same
metric) with those hyperparameters as constants, one batch of training, a
validation, a checkpoint, no restarts; the trial runs with
``DETHPC_TEST_MODE=1`` so the PyTorch Trainer does exactly what local test mode
does (train one batch, validate, checkpoint, restore). Resources, environment,
image, bind mounts and Slurm settings stay as given: the point is to run on
the same allocation the real experiment gets.
Must not: validate (the experiment parser does that on the result), mutate the
caller's dict, or touch the store.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dethpc.common.jobenv import ENV_TEST_MODE

TEST_LABEL = "test-mode"
_DEVICE_KEYS = ("cpu", "cuda", "gpu", "rocm")


def make_test_config(raw: Mapping[str, Any],
                           hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The raw config of the test experiment of ``raw`` (see the module docstring)."""
    out = copy.deepcopy(dict(raw))
    searcher = dict(out.get("searcher") or {})
    test_searcher: dict[str, Any] = {"name": "single", "max_length": {"batches": 1}}
    for key in ("metric", "smaller_is_better"):
        if key in searcher:
            test_searcher[key] = searcher[key]
    out["searcher"] = test_searcher
    out["hyperparameters"] = _constants(hparams)
    out["max_restarts"] = 0
    out["min_validation_period"] = {"batches": 1}
    out.pop("min_checkpoint_period", None)
    out["description"] = f"[test-mode] {out.get('description') or out.get('name') or ''}".rstrip()
    labels = list(out.get("labels") or [])
    out["labels"] = labels if TEST_LABEL in labels else [*labels, TEST_LABEL]
    env = dict(out.get("environment") or {})
    env["environment_variables"] = _with_test_mode(env.get("environment_variables"))
    out["environment"] = env
    return out


def _constants(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's hyperparameter values as a tree of ``const`` hyperparameters."""
    return {name: (_constants(value) if isinstance(value, Mapping) and value
                   else {"type": "const", "val": value})
            for name, value in hparams.items()}


def _with_test_mode(value: Any) -> Any:
    """``environment_variables`` (a list, or one list per device) plus the test flag."""
    flag = f"{ENV_TEST_MODE}=1"
    if isinstance(value, Mapping):
        return {k: (_with_test_mode(v) if k in _DEVICE_KEYS else v) for k, v in value.items()}
    items = [v for v in (value if isinstance(value, list) else [])
             if not (isinstance(v, str) and v.startswith(f"{ENV_TEST_MODE}="))]
    return [*items, flag]
