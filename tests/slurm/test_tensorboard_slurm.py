"""``dethpc tensorboard start --slurm`` on the dev cluster: the rendered job starts, the
TensorBoard in it answers on its owner-only Unix socket with the experiment's scalars,
and ``tensorboard stop`` leaves nothing in ``squeue``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.local.test_tensorboard_local import _fresh_env, _world, scalars

pytest.importorskip("tensorboard")


@pytest.fixture
def world(slurm_cluster: Any) -> Iterator[dict[str, object]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _world(monkeypatch, backend="slurm")   # the job goes to the config's


def test_tensorboard_as_a_slurm_job_answers_and_stops(world: dict[str, Any],
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dethpc.surfaces.cli.main import main

    def cli(*args: object) -> str:
        monkeypatch.setattr(sys, "argv", ["dethpc", *map(str, args)])
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr()
        return capsys.readouterr().out

    _fresh_env()
    out = json.loads(cli("tensorboard", "start", world["exp"], "--slurm", "--json"))
    job, sock = out["job"], Path(out["endpoint"])
    assert job and out["host"], out
    assert "-J " in out["ssh"] and out["ssh"].endswith(f"@{out['host']}")
    squeue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %j"], capture_output=True,
                            text=True, timeout=60, check=True).stdout.split()
    assert squeue == ["RUNNING", f"dethpc-tensorboard-{out['id']}"]   # its adoption key
    assert scalars(sock, f"exp{world['exp']}/trial{world['b']}", "training/loss")[:3] == [
        (1, 1.0), (2, 2.0), (3, 3.0)]
    cli("tensorboard", "stop", out["id"])
    assert subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                          timeout=60).stdout.strip() == ""
    assert json.loads(cli("task", "list", "--json")) == []
