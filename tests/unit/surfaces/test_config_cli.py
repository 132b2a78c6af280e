"""``dethpc config validate`` / ``show-cluster``: output and exit codes, no tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dethpc.surfaces.cli.config_cmd import config_app

GOOD = """\
name: digits
entrypoint: python3 train.py
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, base: 10}
  model: {width: 64}
searcher: {name: random, metric: validation_loss, max_length: 100, max_trials: 4}
resources: {shm_size: 1}
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(config_app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return str(path)


def test_validate_ok(tmp_path: Path) -> None:
    code, out, _ = run("validate", write(tmp_path, GOOD), "--config", "searcher.max_trials=8")
    assert code == 0
    assert "name:            digits" in out
    assert "searcher:        random (minimize validation_loss)" in out
    assert "max trials:      8" in out
    assert "hyperparameters: lr, model.width" in out
    assert "warning: resources.shm_size: ignored: Kubernetes-only" in out


def test_validate_show_prints_config_with_overrides(tmp_path: Path) -> None:
    code, out, _ = run("validate", write(tmp_path, GOOD), "-c", "name=other", "--show")
    assert code == 0 and "name: other" in out


def test_validate_lists_every_error_without_traceback(tmp_path: Path) -> None:
    bad = GOOD.replace("max_trials: 4", "max_trials: abc") + "serch: 1\n"
    code, out, err = run("validate", write(tmp_path, bad))
    assert code == 2
    assert "is invalid (2 error(s))" in err
    assert "searcher.max_trials: expected an integer >= 1, got 'abc'" in err
    assert "serch: unknown field 'serch'; did you mean 'searcher'?" in err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("override", ["nokey", "name.sub=1"])
def test_validate_bad_override(tmp_path: Path, override: str) -> None:
    code, _, err = run("validate", write(tmp_path, GOOD), "--config", override)
    assert code == 2 and "--config overrides is invalid" in err


def test_validate_missing_file(tmp_path: Path) -> None:
    code, _, err = run("validate", str(tmp_path / "none.yaml"))
    assert code == 2 and "file not found" in err


def test_show_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("backend: slurm\npools: {gpu: {partition: high, signal: SIGUSR1}}\n")
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(path))
    code, out, _ = run("show-cluster")
    assert code == 0
    assert f"# source: {path}" in out
    assert "backend: slurm" in out and "partition: high" in out and "signal: USR1" in out


def test_show_cluster_invalid(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("backend: k8s\n")
    code, _, err = run("show-cluster", "--cluster-config", str(path))
    assert code == 2 and "backend: invalid value 'k8s'" in err


def test_show_cluster_never_prints_the_database_password(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("database_url: postgresql+psycopg://alice:s3cret@db.example:5432/dethpc\n")
    code, out, _ = run("show-cluster", "--cluster-config", str(path))
    assert code == 0 and "s3cret" not in out
    assert "postgresql+psycopg://alice:***@db.example:5432/dethpc" in out
