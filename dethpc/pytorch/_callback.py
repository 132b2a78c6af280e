"""``PyTorchCallback``: the hooks the Trainer calls around training, validation and
checkpoints (Determined's ``det.pytorch.PyTorchCallback``).

Owns: the hook methods with their no-op defaults and the order contract the Trainer
keeps (the one Determined 0.38's Trainer keeps, which ``tests/local/test_determined_oracle``
compares): ``on_trial_startup`` (before the loaders and the checkpoint),
``on_checkpoint_load_start`` then ``load_state_dict`` on resume, ``on_training_start``,
per batch ``on_training_epoch_start``/``on_training_epoch_end`` at epoch edges,
``on_training_workload_end`` after each training report, ``on_validation_start``,
``on_validation_epoch_start``/``on_validation_epoch_end`` around ``evaluate_batch``,
``on_validation_end``, ``on_checkpoint_save_start`` (the state about to be written,
mutable), ``on_checkpoint_end``/``on_checkpoint_write_end`` (the directory), and
``on_checkpoint_upload_end`` (the uuid); ``on_trial_shutdown`` on the way out, also after
an error, in the reverse order of the callbacks.
Must not: import torch (the class is plain Python).
"""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    """Subclass and override the hooks you need; return instances from
    ``PyTorchTrial.build_callbacks()`` as ``{name: callback}``. A callback's
    ``state_dict()`` is saved in every checkpoint under its name and handed back to
    ``load_state_dict()`` when the trial resumes from that checkpoint."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before anything else: the batch training starts from and the checkpoint it
        resumes from (None for a fresh start)."""

    def on_trial_shutdown(self) -> None:
        """On the way out of ``fit``, however it ends."""

    def on_validation_start(self) -> None:
        """Before a validation, models already in eval mode."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After a validation, with the metrics about to be reported (every rank)."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """The checkpoint's state (``models_state_dict``, ``optimizers_state_dict``, ...)
        before the Trainer loads it."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """The state about to be saved; what is added to it is saved too."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated by Determined in favour of ``on_checkpoint_write_end``; still called."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """The checkpoint's files are written in ``checkpoint_dir`` (chief only); files
        written there now are part of the checkpoint."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """The checkpoint is stored as ``uuid`` (every rank)."""

    def state_dict(self) -> dict[str, Any]:
        """This callback's state, saved in each checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict()`` returned, when the trial resumes."""

    def on_training_start(self) -> None:
        """After the checkpoint (if any) is loaded, before the first batch."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of epoch ``epoch_idx``."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of epoch ``epoch_idx``."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: list[dict[str, Any]]) -> None:
        """After the Trainer reported training metrics: their averages and the batches'
        own metrics since the previous report (averaged across ranks)."""

    def on_validation_epoch_start(self) -> None:
        """Before the first ``evaluate_batch`` of a validation."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """After the last ``evaluate_batch``: this rank's per-batch metrics."""
