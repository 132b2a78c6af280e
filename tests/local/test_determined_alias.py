"""``import determined`` inside a trial's job is dethpc's alias (docs/core-api.md, "import
determined inside a trial"), and only there, and only without a real Determined:

- a trial written for Determined (``import determined as det``, ``from determined import
  pytorch``, unchanged) that builds ``python -m determined.launch.torch_distributed`` itself
  trains to its length through ``dethpc experiment create --local`` and through the daemon
  (the job script's ``dethpc.launch.detenv``);
- with a real Determined 0.38.1 on the job's ``PYTHONPATH`` the trial imports that one,
  and the alias is neither on its path nor named;
- dethpc's CLI and daemon processes cannot import ``determined``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.launch.determined_alias import ALIAS_DIR, alias_env
from tests.local.conftest import REPO, cli

PROGRAMS = REPO / "tests" / "fixtures" / "determined_alias"
ORACLE = REPO / ".venv" / "determined-oracle"


def config(tmp_path: Path, entrypoint: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "alias", "entrypoint": entrypoint, "hyperparameters": {"lr": 0.1},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 4}}}))
    return path


def tagged(text: str, tag: str) -> dict[str, Any]:
    lines = [ln.split(tag + " ", 1)[1] for ln in text.splitlines() if tag + " {" in ln]
    assert lines, text[-3000:]
    return dict(json.loads(lines[-1]))


def training_steps(trial_dir: Path) -> list[int]:
    rows = [json.loads(ln) for ln in (trial_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["steps"] for r in rows if r["kind"] == "training"]


def test_a_determined_trial_unchanged_trains_with_the_alias(home: Path, tmp_path: Path) -> None:
    out = cli("experiment", "create", config(tmp_path, "python3 launch.py --batches 4"),
              PROGRAMS, "--local", timeout=240)
    assert "local run completed" in out.stdout, out.stdout + out.stderr
    assert "LAUNCH -m determined.launch.torch_distributed" in out.stdout
    seen = tagged(out.stdout, "ALIAS")
    assert seen == {"det": "dethpc", "pytorch": "dethpc.pytorch", "same": True,
                    "file": str(REPO / "dethpc" / "__init__.py")}
    trial = Path(out.stdout.split("trial directory ")[1].split()[0])
    assert max(training_steps(trial)) == 4


def test_the_job_script_gives_the_alias_to_a_trial(home: Path, tmp_path: Path) -> None:
    exp = json.loads(cli("submit", config(tmp_path, "python3 launch.py --batches 4"), PROGRAMS,
                         "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "200", timeout=220, check=False)
    desc = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    log = "".join(p.read_text() for p in sorted(Path(desc["run_dir"]).rglob("slurm-*.out")))
    assert desc["state"] == "COMPLETED", log[-3000:]
    assert tagged(log, "ALIAS")["det"] == "dethpc"
    assert desc["trials"][0]["steps_completed"] == 4


@pytest.mark.skipif(not (ORACLE / "determined").is_dir(),
                    reason="no real Determined: scripts/setup.sh --tests installs it")
def test_a_real_determined_on_the_path_is_never_shadowed(home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ORACLE)}
    assert alias_env(env) == {}
    out = cli("experiment", "create", config(tmp_path, "python3 probe.py"), PROGRAMS,
              "--local", env=env, timeout=120)
    assert tagged(out.stdout, "PROBE") == {
        "file": str(ORACLE / "determined" / "__init__.py"), "version": "0.38.1",
        "alias_env": None, "alias_on_path": False}
    # the alias itself steps aside for a real Determined found after it on the path
    both = os.pathsep.join([str(ALIAS_DIR), str(ORACLE)])
    probe = subprocess.run([sys.executable, str(PROGRAMS / "probe.py")], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": both}, check=True)
    seen = tagged(probe.stdout, "PROBE")
    assert (seen["file"], seen["version"]) == (str(ORACLE / "determined" / "__init__.py"),
                                               "0.38.1")


def test_without_a_real_determined_the_probe_sees_the_alias(home: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = cli("experiment", "create", config(tmp_path, "python3 probe.py"), PROGRAMS,
              "--local", env=env, timeout=120)
    seen = tagged(out.stdout, "PROBE")
    assert (seen["file"], seen["alias_env"], seen["alias_on_path"]) == (
        str(REPO / "dethpc" / "__init__.py"), str(ALIAS_DIR), True)


def test_dethpc_itself_never_imports_determined(home: Path) -> None:
    """The CLI and the daemon's modules loaded, ``determined`` is still not importable."""
    code = ("import importlib.util, sys\n"
            "import dethpc.surfaces.cli.main, dethpc.control.daemon\n"
            "assert not any('alias_path' in p for p in sys.path), sys.path\n"
            "print(importlib.util.find_spec('determined'))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, check=True)
    assert out.stdout.strip() == "None"
    started = cli("daemon", "start", env=env).stdout
    pid = int(started.split("(pid ")[1].split(")")[0])
    environ = dict(kv.split("=", 1) for kv in
                   Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in kv)
    assert "alias_path" not in environ.get("PYTHONPATH", "")
    assert "DETHPC_DETERMINED_ALIAS" not in environ
