"""Fixtures for unit tests of the CLI run in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dethpc.cli.common import ENV


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private DETHPC_HOME and local cluster config; the CLI's cached store reset."""
    h = tmp_path / "home"
    h.mkdir()
    (h / "cluster.yaml").write_text(yaml.safe_dump(
        {"backend": "local", "runs_root": str(h / "runs")}))
    monkeypatch.setenv("DETHPC_HOME", str(h))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(h / "cluster.yaml"))

    def reset() -> None:
        for name in ("cluster", "store", "backend"):
            ENV.__dict__.pop(name, None)
        ENV.cluster_path = None
    reset()
    yield h
    reset()
