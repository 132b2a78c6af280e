"""The job side stays light (issue 47 item 3): what every trial's job runs imports none of
the control plane's heavy things (the store, SQLAlchemy/sqlmodel, pydantic, Alembic, the
CLI's typer and rich, Jinja2, YAML, torch), and the first python of every job script
(``dethpc.launch.run_start``) not even argparse, logging or the run's end.

Each entry runs in a fresh interpreter as the job script runs it (``python -m``, its
arguments, the local backend's environment), and the modules it loaded are read at its
end. bench/trial_start measures what this saves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: never on the job side
HEAVY = ("dethpc.store", "dethpc.control", "dethpc.surfaces.cli", "dethpc.config",
         "dethpc.searchers", "dethpc.backends", "dethpc.jobs", "sqlalchemy", "sqlmodel",
         "pydantic", "alembic", "typer", "rich", "jinja2", "yaml")
#: nor in the helpers the job script's shell runs (the trial imports torch itself)
HEAVY_HELPER = (*HEAVY, "torch", "numpy")
#: nor in the first python of every job
HEAVY_START = (*HEAVY_HELPER, "argparse", "logging", "dethpc.launch.run_end")

PROBE = """
import json, runpy, sys
out, mod, *args = sys.argv[1:]
sys.argv = [mod, *args]
try:
    runpy.run_module(mod, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
with open(out, "w") as fh:
    json.dump(sorted(sys.modules), fh)
"""


def loaded(tmp_path: Path, module: str, *args: str, run: bool = True) -> set[str]:
    """The modules a fresh interpreter holds after ``python -m module args`` (``run``)
    or after ``import module``."""
    out = tmp_path / "modules.json"
    trial = tmp_path / "trial"
    trial.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DETHPC_"))}
    env.update({"PYTHONPATH": str(REPO), "SLURM_JOB_ID": "7", "DETHPC_BACKEND": "local",
                "DETHPC_TRIAL_DIR": str(trial), "DETHPC_EXPERIMENT_ID": "1",
                "DETHPC_TRIAL_ID": "1", "DETHPC_HOME": str(tmp_path / "home")})
    code = PROBE if run else (f"import json, sys, {module}\n"
                              f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))")
    argv = [sys.executable, "-c", code, *((str(out), module, *args) if run else ())]
    subprocess.run(argv, env=env, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    return set(json.loads(out.read_text()))


def heavy_in(modules: set[str], heavy: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.mark.parametrize("module, args, heavy", [
    ("dethpc.launch.run_start", (), HEAVY_START),
    ("dethpc.launch.run_start", ("--trial-dir", "trial"), HEAVY_START),
    ("dethpc.launch.run_end", ("start",), HEAVY_HELPER),
    ("dethpc.launch.run_end", ("--kind", "trial", "--rc", "0", "--local",
                               "--trial-dir", "trial"), HEAVY_HELPER),
    ("dethpc.launch.detenv", (), HEAVY_HELPER),
    # the wrapped script's (``dethpc sbatch``, a search's trial) latest checkpoint
    ("dethpc.surfaces.entry", ("latest-checkpoint",), HEAVY_HELPER),
])
def test_job_script_helpers_are_light(tmp_path: Path, module: str, args: tuple[str, ...],
                                      heavy: tuple[str, ...]) -> None:
    assert heavy_in(loaded(tmp_path, module, *args), heavy) == []


@pytest.mark.parametrize("module", ["dethpc.core", "dethpc.pytorch",
                                    "dethpc.launch.worker.forkserver"])
def test_trial_side_imports_are_light(tmp_path: Path, module: str) -> None:
    """What a trial imports of dethpc, and the pool's fork server: no control plane, and
    no torch until the trial's own code asks for it (``dethpc.pytorch`` is lazy)."""
    assert heavy_in(loaded(tmp_path, module, run=False), HEAVY_HELPER) == []


def test_pool_preload_brings_what_a_trial_imports_at_its_first_step() -> None:
    from dethpc.launch.worker.forkserver import preload_list

    assert preload_list(["torch"]) == ["torch", "torch._dynamo", "dethpc.core",
                                       "dethpc.pytorch"]
    assert preload_list(["numpy", "torch", "torch._dynamo", "dethpc.core"]) == [
        "numpy", "torch", "torch._dynamo", "dethpc.core", "dethpc.pytorch"]
    assert preload_list([]) == []     # nothing preloaded: nothing added
