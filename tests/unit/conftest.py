"""Fixtures for unit tests of the CLI run in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.cli_home import private_home


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A private DETHPC_HOME and local cluster config; the CLI's cached store reset."""
    with private_home(tmp_path / "home") as h:
        yield h
