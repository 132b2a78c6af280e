"""The environment a per-job trial's program sees is the same with one python at the run's
start as it was with two (issue 47 item 3), on the local backend, real processes.

The trial script's first python (``python -m dethpc.launch.run_start --det-env``) prints
the job's ref and Determined's ``DET_*`` variables (``dethpc.launch.detenv``'s lines) after
the environment's exports, where ``python -m dethpc.launch.detenv`` ran before. The same
rendered script is run twice by ``LocalBackend``: as rendered, and rewritten to the
script as it was (``run_start`` before the exports, ``detenv`` after them). The trial's
program dumps ``os.environ``: the two dumps are equal but for the job's id, every
``DETHPC_*``/``DET_*`` name in them is a job variable of the documented table
(``dethpc.common.jobenv``, docs/job-environment.md), and the ``DET_*`` variables a run
learns read the config's exports (``CUDA_VISIBLE_DEVICES`` here). About 5-10 s.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from dethpc.backends.base import JobRequest
from dethpc.backends.local import LocalBackend
from dethpc.common import jobenv
from dethpc.common.paths import ExperimentPaths
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import trial_script
from dethpc.launch import detenv
from tests import backend_polling as polling

REPO = Path(__file__).resolve().parents[2]
CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})
CFG = parse_experiment_config({
    "name": "env", "entrypoint": "python3 dump_env.py", "hyperparameters": {"lr": 0.1},
    "environment": {"environment_variables": ["CUDA_VISIBLE_DEVICES=3", "QUOTE=it's"]},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
DUMP = """\
import json, os, sys
with open(sys.argv[1] if len(sys.argv) > 1 else "env.json", "w") as fh:
    json.dump(dict(os.environ), fh)
"""
#: the new run start: two comment lines, the defaults, one python, the output's redirect
START = re.compile(r"# the run's start:.*\n#.*\n(JOB_REF=.*\n)(eval .*) --det-env\)\"\n"
                   r"(exec .*\n)")


def as_before(script: str) -> str:
    """The script as it was rendered before the fold: ``run_start`` right after the
    traps, before the exports; ``detenv`` after them, where the run's start is now."""
    found = START.search(script)
    assert found is not None, script
    defaults, start, redirect = found.groups()
    python = start.split()[1].removeprefix('"$(')
    old = script[:found.start()] + "# Determined's DET_* variables that this run learns as " \
        f"it starts (dethpc.launch.detenv)\neval \"$({python} -m dethpc.launch.detenv)\"\n" \
        + script[found.end():]
    trap = "trap 'on_signal TERM TERM' TERM\n"
    assert old.count(trap) == 1
    return old.replace(trap, trap + defaults + start + ')"\n' + redirect)


def run(backend: LocalBackend, work: Path, trial: Path, script: str, name: str
        ) -> tuple[str, dict[str, str]]:
    path = trial / f"{name}.sbatch"
    path.write_text(script)
    (ref,) = backend.submit(JobRequest(name="dethpc-e1-t1", comment="dethpc:exp=1:trial=1",
                                       script=path, workdir=work))
    infos = polling.wait_for(backend, [ref], lambda i: all(
        x.state.is_terminal for x in i.values()), f"{name} to end", 120.0, 0.05)
    out = (trial / "env.json")
    assert infos[ref].exit_code == 0 and out.exists(), (
        infos[ref], [p.read_text() for p in trial.glob("slurm-*.out")])
    env = json.loads(out.read_text())
    out.unlink()
    return ref, env


#: the variables that name the job (each run below is a job of its own)
JOB_ID = ("SLURM_JOB_ID", "SLURM_JOBID", "DET_RESOURCES_ID")


def without_job_id(env: dict[str, str], ref: str) -> dict[str, str]:
    assert [env[k] for k in JOB_ID] == [ref] * len(JOB_ID)
    return {k: "<job>" if k in JOB_ID else v for k, v in env.items()}


def test_one_python_at_the_start_gives_the_trial_the_same_environment(tmp_path: Path
                                                                      ) -> None:
    paths = ExperimentPaths(tmp_path / "run").ensure()
    paths.context.mkdir(parents=True, exist_ok=True)
    (paths.context / "dump_env.py").write_text(DUMP.replace(
        '"env.json"', repr(str(paths.trial(1).root / "env.json"))))
    trial = paths.trial(1).ensure()
    trial.hparams.write_text(json.dumps({"lr": 0.1}))
    work = tmp_path / "work"
    work.mkdir()
    script = trial_script(CFG, CLUSTER, backend="local", python=sys.executable,
                          run_dir=paths.root, exp_id=1, trial_id=1)
    assert script.count('eval "$(') == 2   # run_start (with the DET_*), run_end
    before = as_before(script)
    assert "-m dethpc.launch.detenv" in before and "--det-env" not in before
    backend = LocalBackend(tmp_path / "spool")
    old_ref, old_env = run(backend, work, trial.root, before, "before")
    new_ref, new_env = run(backend, work, trial.root, script, "now")

    assert without_job_id(new_env, new_ref) == without_job_id(old_env, old_ref)
    # every dethpc and Determined name the job gave the trial is a job variable of the
    # table (this test's own process may hold the dev cluster's and the tests' settings)
    ours = [k for k in new_env if k.startswith(("DETHPC_", "DET_")) and k not in os.environ]
    rows = {k: jobenv.lookup(k) for k in ours}
    assert [k for k, row in rows.items() if row is None or row.where
            is not jobenv.Where.JOB] == []
    # Determined's variables, the script's and the run's (no checkpoint yet: no latest)
    assert set(detenv.STATIC) - {"DET_INTER_NODE_NETWORK_INTERFACE"} <= set(ours)
    assert set(detenv.RUN) - {"DET_LATEST_CHECKPOINT"} <= set(ours)
    # the run's DET_* read the environment the config exported (its GPU list)
    assert new_env["DET_UNIQUE_PORT_OFFSET"] == "3" and new_env["QUOTE"] == "it's"
    assert new_env["DET_TRIAL_RUN_ID"] == "1"
