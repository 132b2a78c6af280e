"""Every bundled experiment config (examples/digits/*.yaml) must validate."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.config import load_experiment_config

REPO = Path(__file__).resolve().parents[3]
DIGITS = sorted((REPO / "examples" / "digits").glob("*.yaml"))


def test_digits_examples_exist() -> None:
    # guards the parametrized test below against passing vacuously on an empty glob
    assert DIGITS, "no examples/digits/*.yaml found"


@pytest.mark.parametrize("path", DIGITS, ids=[p.name for p in DIGITS])
def test_digits_example_validates(path: Path) -> None:
    cfg = load_experiment_config(path)
    assert cfg.name and cfg.searcher.metric
    assert cfg.searcher.max_length is not None
