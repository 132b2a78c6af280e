"""``dethpc.config.parse_stored``: the text an experiment row stores, read back."""

from __future__ import annotations

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import dump_config, parse_stored

RAW = {"name": "t", "entrypoint": "python3 train.py",
       "hyperparameters": {"lr": 1e-3, "walltime": "01:00:00"},
       "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}


def test_a_dumped_config_reads_back_the_same() -> None:
    cfg = parse_stored(dump_config(RAW))
    assert cfg.raw == RAW
    assert cfg.searcher.max_length is not None and cfg.searcher.max_length.value == 10


@pytest.mark.parametrize("text", ["", "# nothing\n"])
def test_empty_text_is_refused_by_name(text: str) -> None:
    with pytest.raises(ConfigError, match="entrypoint"):
        parse_stored(text)


def test_the_same_text_is_parsed_once() -> None:
    """A tick reads every open experiment's config more than once: the parse is
    remembered by the text; another text (a changed config) is parsed anew."""
    text = dump_config(RAW)
    assert parse_stored(text) is parse_stored(text)
    other = parse_stored(dump_config({**RAW, "name": "u"}))
    assert other.name == "u" and other is not parse_stored(text)
