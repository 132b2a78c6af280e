"""The backend interactive tasks and TensorBoard jobs go through (``registry.backend``)
is the cluster config's; Slurm's runs its commands under the site's command timeout and
retries (cluster.yaml ``command_timeout_s``, ``command_retries``), not the built-in
defaults: given the config, or found by the config's own precedence when the caller has
none; the local backend's is the machine's spool under DETHPC_HOME."""

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
    assert settings(registry.backend(site)) == (7.0, 1)
    other = parse_cluster_config({"backend": "slurm", "command_timeout_s": 120,
                                  "command_retries": 0})
    assert settings(registry.backend(other)) == (120.0, 0)
    assert registry.backend(site) is registry.backend(site)   # one per setting: one pacer


def test_without_one_the_config_found_by_its_precedence(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"backend": "slurm", "command_timeout_s": 9,
                                    "command_retries": 5}))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(path))
    assert settings(registry.backend()) == (9.0, 5)


def test_a_local_cluster_gives_the_local_backend_and_a_task_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dethpc.backends.local import LocalBackend
    from dethpc.common.traits import BackendKind
    from dethpc.store.models import Task, TaskKind

    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    local = parse_cluster_config({"backend": "local", "local_max_concurrent": 3})
    got = registry.backend(local)
    assert isinstance(got, LocalBackend) and got.max_concurrent == 3
    assert got.spool.root == tmp_path / "home" / "local-spool"
    # a task's liveness asks the backend its job went to, whatever the config says now
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"backend": "slurm"}))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(path))
    task = Task(kind=TaskKind.COMMAND, job_ref="1", backend="local")
    assert isinstance(registry.task_backend(task), LocalBackend)
    assert registry.kind_of(Task(kind=TaskKind.COMMAND, job_ref="1")) is BackendKind.SLURM
    assert isinstance(registry.task_backend(Task(kind=TaskKind.COMMAND, job_ref="1",
                                                 backend="slurm")), SlurmBackend)
