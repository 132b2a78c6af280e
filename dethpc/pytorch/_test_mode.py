"""Test mode for ``dethpc experiment create --local --test`` (Determined's ``--test``).

Owns: ``run_test_mode()``: run an entrypoint once in a throw-away trial directory
with ``DETHPC_TEST_MODE=1`` (the Trainer then trains one batch, validates a few
batches, checkpoints, restores that checkpoint and exits 0).
Must not: import torch (the CLI calls this; the entrypoint runs in a subprocess).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import (
    ENV_CONTEXT_DIR,
    ENV_EXPERIMENT_CONFIG,
    ENV_TEST_MODE,
    ENV_TRIAL_DIR,
)
from dethpc.common.paths import TrialPaths
from dethpc.launch.determined_alias import alias_env

log = logging.getLogger(__name__)

_TRIAL_CLASS = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
#: what test mode trains to: one batch, validated
TEST_TARGET: Mapping[str, Any] = {"unit": "batches", "length": 1, "validate_at": [1]}


def entrypoint_argv(entrypoint: str | Sequence[str], python: str | None = None) -> list[str]:
    """argv for an entrypoint: ``module:Class`` runs through ``dethpc.pytorch.run``;
    a command (``python3 train.py ...``) is split, with ``python``/``python3`` replaced
    by ``python`` (default: this interpreter, so dethpc and torch are importable)."""
    py = python or sys.executable
    if isinstance(entrypoint, str):
        if _TRIAL_CLASS.match(entrypoint.strip()):
            return [py, "-m", "dethpc.pytorch.run", entrypoint.strip()]
        argv = shlex.split(entrypoint)
    else:
        argv = list(entrypoint)
    if not argv:
        raise DethpcError("entrypoint is empty; give module:TrialClass or a command")
    if argv[0] in ("python", "python3"):
        argv[0] = py
    from dethpc.launch._determined import from_determined  # Determined's launchers

    return from_determined(argv)


def run_test_mode(entrypoint: str | Sequence[str], context_dir: Path,
                  hparams: Mapping[str, Any], *,
                  experiment_config: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None, python: str | None = None,
                  timeout: float | None = None, keep: bool = False,
                  workdir: Path | None = None, test_mode: bool = True,
                  target: Mapping[str, Any] | None = TEST_TARGET) -> int:
    """Run ``entrypoint`` in test mode from ``context_dir``; return its exit code.

    ``test_mode=False`` runs it for real instead (``dethpc experiment create --local``):
    no ``DETHPC_TEST_MODE``, to the searcher's ``target`` (none: the training code's
    own length).

    The experiment directory is ``workdir`` (kept) or a temporary one, removed
    afterwards unless ``keep`` is set or the run failed (its path is then logged).
    The trial directory inside it is ``trials/0``.
    """
    context_dir = Path(context_dir).resolve()
    if not context_dir.is_dir():
        raise DethpcError(f"context directory {context_dir} does not exist")
    keep = keep or workdir is not None
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="dethpc-test-"))
    paths = TrialPaths(root / "trials" / "0").ensure()
    paths.hparams.write_text(json.dumps(dict(hparams), indent=1))
    if target is not None:
        paths.target.write_text(json.dumps(dict(target)))
    child_env = dict(os.environ if env is None else env)
    if experiment_config is not None:
        import yaml

        cfg = root / "config.yaml"
        cfg.write_text(yaml.safe_dump(dict(experiment_config)))
        child_env[ENV_EXPERIMENT_CONFIG] = str(cfg)
    package_root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(context_dir), package_root, child_env.get("PYTHONPATH", "")) if p)
    if python is None:  # `import determined` is dethpc's alias unless one is installed
        child_env.update(alias_env(child_env))
    child_env.update({ENV_TRIAL_DIR: str(paths.root), ENV_CONTEXT_DIR: str(context_dir)})
    if test_mode:
        child_env[ENV_TEST_MODE] = "1"
    else:
        child_env.pop(ENV_TEST_MODE, None)
    argv = entrypoint_argv(entrypoint, python)
    log.info("test mode: %s (trial dir %s)", shlex.join(argv), paths.root)
    try:
        code = subprocess.run(argv, cwd=context_dir, env=child_env, timeout=timeout,
                              check=False).returncode
    except subprocess.TimeoutExpired as exc:
        raise DethpcError(f"test mode of {shlex.join(argv)} did not finish within "
                          f"{timeout}s (trial dir kept: {paths.root})") from exc
    except OSError as exc:
        raise DethpcError(f"cannot run entrypoint {shlex.join(argv)}: {exc}") from exc
    if code == 0 and not keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        log.info("test-mode trial directory kept: %s", paths.root)
    return code
