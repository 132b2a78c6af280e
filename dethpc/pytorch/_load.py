"""Loading a trained trial outside training: ``CheckpointLoadContext`` and
``load_trial_from_checkpoint_path`` (Determined's, for inference and export).

Owns: reading a checkpoint directory written by dethpc's Trainer (``state.pt`` and
``load_data.json``) or by Determined's (``state_dict.pth``, ``load_data.json``, the
model code under ``code/``), importing the trial's class, building it on a one-process
context with the checkpoint's hyperparameters, and loading its models' weights.
Must not: write into the checkpoint, or need a trial directory or a cluster.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from dethpc.common.errors import DethpcError
from dethpc.core import Context, DistributedContext
from dethpc.core._checkpoint import DummyCheckpointContext
from dethpc.pytorch._trainer import LOAD_DATA_FILE, STATE_FILE, upgrade_state
from dethpc.pytorch._trial import PyTorchTrial, PyTorchTrialContext

log = logging.getLogger(__name__)

#: Determined's own Trainer writes its state here
DETERMINED_STATE_FILE = "state_dict.pth"


class CheckpointLoadContext(PyTorchTrialContext):
    """A ``PyTorchTrialContext`` for building a trial outside training (one process, no
    trial directory): ``MyTrial(CheckpointLoadContext(hparams), ...)``, then load the
    weights yourself, or let ``load_trial_from_checkpoint_path`` do both."""

    _one_process_launch_check = False

    def __init__(self, hparams: Mapping[str, Any] | None = None,
                 exp_conf: Mapping[str, Any] | None = None) -> None:
        dist = DistributedContext()
        core = Context(DummyCheckpointContext(dist), dist, hparams=dict(hparams or {}))
        super().__init__(core, hparams=dict(hparams or {}))
        self._exp_conf = dict(exp_conf or {})


@contextlib.contextmanager
def _importable_from(dirs: list[Path]) -> Iterator[None]:
    added = [str(d) for d in dirs if d.is_dir() and str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(d)


def _trial_class(spec: str, dirs: list[Path]) -> type[PyTorchTrial]:
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname:
        raise DethpcError(f"load_data.json names the trial class {spec!r}, not "
                          "module:Class; pass trial_class= to load_trial_from_checkpoint_path")
    try:
        with _importable_from(dirs):
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
    except Exception as exc:
        where = ", ".join(str(d) for d in dirs) or "sys.path"
        raise DethpcError(f"could not import the trial class {spec} (looked in {where}): "
                          f"{exc}; pass trial_class= to load_trial_from_checkpoint_path"
                          ) from exc
    return obj  # type: ignore[no-any-return]


def _load_model(model: torch.nn.Module, state: Mapping[str, Any]) -> None:
    try:
        model.load_state_dict(state)
    except RuntimeError:
        # a state saved from DistributedDataParallel (Determined saves the wrapped model)
        plain = dict(state)
        torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(plain, "module.")
        model.load_state_dict(plain)


def load_trial_from_checkpoint_path(path: str, trial_class: type[PyTorchTrial] | None = None,
                                    trial_kwargs: dict[str, Any] | None = None,
                                    torch_load_kwargs: dict[str, Any] | None = None,
                                    **kwargs: Any) -> PyTorchTrial:
    """The trial that wrote the checkpoint in directory ``path``, built on a
    ``CheckpointLoadContext`` with the checkpoint's hyperparameters (plus
    ``trial_kwargs``) and its models' weights loaded, as Determined's.

    The class is ``trial_class`` or the one ``load_data.json`` names, imported from the
    checkpoint's ``code/`` (Determined's checkpoints) or the model directory the trial
    ran in (dethpc's), else from ``sys.path``. ``torch_load_kwargs`` go to
    ``torch.load`` (``**kwargs`` is Determined's deprecated spelling of it).
    """
    trial_kwargs = dict(trial_kwargs or {})
    torch_load_kwargs = dict(torch_load_kwargs or {})
    if kwargs:
        if torch_load_kwargs:
            raise ValueError("kwargs may not be set if torch_load_kwargs is also set")
        warnings.warn("load_trial_from_checkpoint_path(**kwargs) is deprecated (as in "
                      "Determined): pass torch_load_kwargs=", FutureWarning, stacklevel=2)
        torch_load_kwargs = kwargs
    ckpt = Path(path)
    load_data_file = ckpt / LOAD_DATA_FILE
    if not load_data_file.is_file():
        raise DethpcError(f"{ckpt} has no {LOAD_DATA_FILE}: it is not a checkpoint written by "
                          "a PyTorchTrial's Trainer (dethpc's or Determined's)")
    data = json.loads(load_data_file.read_text())
    if data.get("trial_type", "PyTorchTrial") != "PyTorchTrial":
        log.warning("%s was written by a %s, not a PyTorchTrial; trying anyway", ckpt,
                    data.get("trial_type"))
    if trial_class is None:
        dirs = [ckpt / "code"]
        if data.get("model_dir"):
            dirs.append(Path(data["model_dir"]))
        trial_class = _trial_class(str(data.get("trial_cls_spec", "")), dirs)
    context = CheckpointLoadContext(data.get("hparams") or {},
                                    data.get("experiment_config") or {})
    trial = trial_class(context, **trial_kwargs)
    for name in (STATE_FILE, DETERMINED_STATE_FILE):
        if (ckpt / name).is_file():
            if name == STATE_FILE:  # dethpc's holds the ranks' RNG states beside the weights
                torch_load_kwargs.setdefault("weights_only", False)
            state = upgrade_state(torch.load(ckpt / name, **torch_load_kwargs))
            break
    else:
        raise DethpcError(f"{ckpt} has neither {STATE_FILE} nor {DETERMINED_STATE_FILE}")
    saved = state.get("models_state_dict") or []
    if len(saved) != len(context.models):
        raise DethpcError(f"{ckpt} holds {len(saved)} model(s), the trial wrapped "
                          f"{len(context.models)}: it belongs to another trial class")
    for model, sd in zip(context.models, saved, strict=True):
        _load_model(model, sd)
    return trial
