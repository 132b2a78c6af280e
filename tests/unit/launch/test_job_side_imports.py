"""The job side stays light (issue 47 item 3): what every trial's job runs imports none of
the control plane's heavy things (the store, SQLAlchemy/sqlmodel, pydantic, Alembic, the
CLI's typer and rich, Jinja2, YAML, torch), and the first python of every job script
(``dethpc.launch.run_start``) not even argparse, logging or the run's end.

Each entry runs in a fresh interpreter as the job script runs it (``python -m``, its
arguments, the local backend's environment), and the modules it loaded are read at its
end. bench/trial_start measures what this saves. And ``run_start`` answers as the
``run_end start`` of scripts rendered before it; a pool's preload of torch brings what
a trial imports at its first optimizer (``torch._dynamo``).
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
    # a trial script's run start, with Determined's DET_* (detenv's lines)
    ("dethpc.launch.run_start", ("--trial-dir", "trial", "--det-env"), HEAVY_START),
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


def _start(module: list[str], trial: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", *module, "--trial-dir", str(trial)],
                          capture_output=True, text=True, env=env, timeout=60)
    return proc.returncode, proc.stdout.strip()


def test_run_start_answers_as_run_end_start_did(tmp_path: Path) -> None:
    """The job scripts' ``run_start`` and the older scripts' ``run_end start``: the same
    ``JOB_REF``, and a run after the job's completed one is recorded completed too."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SLURM_RESTART_COUNT": "2",
           "SLURM_JOB_ID": "125", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5"}
    for n, module in enumerate((["dethpc.launch.run_start"],
                                ["dethpc.launch.run_end", "start"])):
        trial = tmp_path / str(n)
        trial.mkdir()
        assert _start(module, trial, env) == (0, "JOB_REF=120_5 done_already=0")
        # another job's completed run, then a cut line: not this job's
        (trial / "exits.jsonl").write_text(
            '{"reason": "completed", "job": "120_4"}\n{"reason": "completed", "job": "12')
        assert _start(module, trial, env) == (0, "JOB_REF=120_5 done_already=0")
        (trial / "exits.jsonl").write_text('{"reason": "completed", "job": "120_5"}\n')
        assert _start(module, trial, env) == (0, "JOB_REF=120_5 done_already=1")
        last = json.loads((trial / "exits.jsonl").read_text().splitlines()[-1])
        assert (last["reason"], last["code"], last["restart"], last["job"]) == (
            "completed", 0, 2, "120_5")
        bad = subprocess.run([sys.executable, "-m", *module, "--bogus"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "--bogus" in bad.stderr


def test_run_start_det_env_adds_detenv_lines_in_the_same_python(tmp_path: Path) -> None:
    """``run_start --det-env`` (a trial script's one python before the trial): its answer,
    then exactly the lines ``python -m dethpc.launch.detenv`` prints for the same
    environment; none for Slurm's extra start of a completed job; a DET_* problem costs
    the variables (a note on stderr), never the answer."""
    trial = tmp_path / "trial"
    (trial / "checkpoints" / "c1").mkdir(parents=True)
    (trial / "checkpoints" / "c1" / "metadata.json").write_text('{"steps_completed": 4}')
    (trial / "hparams.json").write_text('{"lr": 0.5, "name": "it\'s"}')
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SLURM_RESTART_COUNT": "1",
           "SLURM_JOB_ID": "125", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5",
           "DETHPC_TRIAL_DIR": str(trial), "DETHPC_EXPERIMENT_ID": "3",
           "DETHPC_TRIAL_ID": "9", "DETHPC_RUN_ID": "1", "CUDA_VISIBLE_DEVICES": "2,3"}

    def out(*argv: str, extra: dict[str, str] | None = None) -> tuple[str, str]:
        proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                              env={**env, **(extra or {})}, timeout=60, check=True)
        return proc.stdout, proc.stderr

    det, _ = out("dethpc.launch.detenv")
    assert "export DET_LATEST_CHECKPOINT=c1\n" in det and "DET_HPARAMS=" in det
    start = ["dethpc.launch.run_start", "--trial-dir", str(trial)]
    assert out(*start, "--det-env") == ("JOB_REF=120_5 done_already=0\n" + det, "")
    (trial / "exits.jsonl").write_text('{"reason": "completed", "job": "120_5"}\n')
    assert out(*start, "--det-env") == ("JOB_REF=120_5 done_already=1\n", "")
    (trial / "exits.jsonl").unlink()
    # a node name that is not UTF-8 (stdout's encoding here): no DET_*, the ref stands
    bad = {"SLURMD_NODENAME": "n\udcff", "PYTHONIOENCODING": "utf-8"}
    bad_out, bad_err = out(*start, "--det-env", extra=bad)
    assert out("dethpc.launch.detenv", extra=bad) == ("", bad_err)
    assert bad_out == "JOB_REF=120_5 done_already=0\n"
    assert bad_err.startswith("dethpc: DET_* variables not set: ")
