"""The backend interactive tasks and TensorBoard jobs go through (``registry.slurm``)
runs Slurm's commands under the site's command timeout and retries (cluster.yaml
``command_timeout_s``, ``command_retries``), not the built-in defaults: given the
config, or found by the config's own precedence when the caller has none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dethpc.backends.slurm import SlurmBackend
from dethpc.config import parse_cluster_config
from dethpc.surfaces.tasks import registry


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    registry.site_cluster.cache_clear()
    yield
    registry.site_cluster.cache_clear()


def settings(backend: object) -> tuple[float, int]:
    assert isinstance(backend, SlurmBackend)
    return backend.runner.timeout, backend.runner.retries


def test_a_given_cluster_sets_the_commands_timeout_and_retries() -> None:
    site = parse_cluster_config({"backend": "slurm", "command_timeout_s": 7,
                                 "command_retries": 1})
    assert settings(registry.slurm(site)) == (7.0, 1)
    other = parse_cluster_config({"backend": "slurm", "command_timeout_s": 120,
                                  "command_retries": 0})
    assert settings(registry.slurm(other)) == (120.0, 0)
    assert registry.slurm(site) is registry.slurm(site)   # one per setting: one pacer


def test_without_one_the_config_found_by_its_precedence(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"backend": "slurm", "command_timeout_s": 9,
                                    "command_retries": 5}))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(path))
    assert settings(registry.slurm()) == (9.0, 5)
