"""The trainers' one reader of a checkpoint's ``state.pt`` (``_trainer._load_state``,
which the PyTorch Trainer's and the DeepSpeed Trainer's ``_restore`` both call): the
file loaded onto the device asked for, RNG states and all; a checkpoint without it
refused with the writer the caller names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dethpc.common.errors import DethpcError
from dethpc.pytorch._trainer import STATE_FILE, _load_state, upgrade_state


def test_the_state_file_loads_with_what_weights_only_refuses(tmp_path: Path) -> None:
    state = {"format": "dethpc.pytorch/2", "progress": {"batches": 3},
             "rng": [{"python": [3, list(range(4)), None]}], "t": torch.ones(2)}
    torch.save(state, tmp_path / STATE_FILE)
    got = _load_state(tmp_path, "u1", writer="x", map_location="cpu")
    assert got["progress"] == {"batches": 3} and got["rng"] == state["rng"]
    assert torch.equal(got["t"], torch.ones(2)) and got["t"].device.type == "cpu"
    assert upgrade_state(got) == got            # the current format: as it was


@pytest.mark.parametrize("writer", ["dethpc.pytorch.Trainer",
                                    "dethpc.pytorch.deepspeed.Trainer"])
def test_a_checkpoint_without_one_is_refused_naming_its_writer(tmp_path: Path,
                                                               writer: str) -> None:
    with pytest.raises(DethpcError, match=f"checkpoint u2 has no {STATE_FILE}: it was not "
                                          f"written by {writer}$"):
        _load_state(tmp_path, "u2", writer=writer, map_location="cpu")
