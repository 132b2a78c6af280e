"""A fresh Debian machine has no munge, no Slurm and no dev-cluster state:
``status`` must say "not ready" there (so ``up`` goes on to install packages)
instead of failing on the first missing binary. This once broke ``up`` on a
new machine: ``munge -n`` could not be started."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.devcluster.cluster import DevCluster
from dethpc.devcluster.layout import DevClusterLayout


def test_status_on_a_machine_without_munge_or_slurm(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    cluster = DevCluster(DevClusterLayout(state_dir=tmp_path / "state",
                                          slurm_etc=tmp_path / "etc-slurm"))
    assert cluster.munge_ok() is False
    status = cluster.status()
    assert not status.ready and not status.munge_ok and not status.controller_up
