"""Trial start: what a trial process pays from its job's start to its first batch, and
how much of it is dethpc's (issue 47 item 3).

The trial is examples/digits (model_def.py, digits.npz) run by ``bench_train.py``, its
train.py with time marks. Two ways a trial starts, both on the local backend (no Slurm;
this machine's cores):

* ``per_job``: the real trial job script (``dethpc.jobs.jobscript.trial_script``) run by
  ``bash`` with the local backend's ``SLURM_*`` environment, as ``LocalBackend`` runs
  it: ``run_start --det-env`` (the job's ref and Determined's ``DET_*``: one python),
  the trial (``python3 bench_train.py``), ``run_end``. ``per_job_old``: the same script
  with its run's start as it was before the fold (``as_before``: ``run_start`` before
  the environment's exports, ``python -m dethpc.launch.detenv`` after them: two).
* ``pool``: what a pool worker does per work item (``dethpc.launch.worker``): the
  item's environment (``main.trial_env``: Determined's variables, the latest checkpoint)
  and ``forkserver.spawn`` from a process that preloaded its modules once. ``pool_old``
  preloads ``torch`` alone (the worker before issue 47); ``pool_new`` what
  ``forkserver.preload`` adds to it now (``torch._dynamo`` beside torch, dethpc's job
  side). Each runs in its own worker-like process, so one's preload never helps the other.

Phases per trial (seconds; medians over ``--reps``, interleaved so load drift hits
every mode alike):

* ``wrapper_before_trial``: job start (``bash`` started / item claimed) to the trial
  script's first line, less a bare ``python -c pass`` for a fresh process (per-job): the
  job script's own lines and its python helpers.
* ``dethpc_imports``: ``import dethpc.core`` and ``dethpc.pytorch``'s names, after torch.
* ``user_imports``: numpy and torch (before dethpc's), the trial's model_def (after).
* ``dethpc_setup``: from the user's imports to the first batch, less the user's own
  trial code in it: ``core.init``, the context, the Trainer, its loaders' wrapping.
* ``user_setup``: the trial's ``__init__`` (model, optimizer: where torch imports
  ``torch._dynamo``) and its data loaders.
* ``first_batch``: the first ``train_batch``.
* ``after_trial``: the trial's last line to the job's end (interpreter exit, ``run_end``).
* ``dethpc_own``: ``wrapper_before_trial + dethpc_imports + dethpc_setup``: dethpc's
  part of the start (goal <= 0.2 s).

``job_script_helpers``: each python the per-job script's shell runs, alone (wall and CPU
medians): what the wrapper's part is made of, and ``run_end``'s share of ``after_trial``
(the rest is the trial interpreter's own exit: torch's).

``--quick`` runs 1 rep (a smoke run). Writes bench/results/trial_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dethpc.common.paths import ExperimentPaths  # noqa: E402
from dethpc.config import parse_experiment_config  # noqa: E402
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool  # noqa: E402
from dethpc.jobs.jobscript import trial_script  # noqa: E402
from dethpc.jobs.worker_pool_items import work_item  # noqa: E402

HERE = Path(__file__).resolve().parent
DIGITS = REPO / "examples" / "digits"
HPARAMS = {"lr": 0.01, "hidden_size": 64, "dropout": 0.1, "optimizer": "adam",
           "global_batch_size": 32}
CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})
PHASES = ("wrapper_before_trial", "dethpc_imports", "user_imports", "dethpc_setup",
          "user_setup", "first_batch", "after_trial", "dethpc_own", "job_to_first_batch",
          "cpu.dethpc_imports", "cpu.dethpc_setup", "cpu.user_setup")


def config() -> ExperimentConfig:
    return parse_experiment_config({
        "name": "trial-start", "entrypoint": "python3 bench_train.py",
        "hyperparameters": HPARAMS,
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 1}}})


def run_dir(root: Path) -> ExperimentPaths:
    paths = ExperimentPaths(root / "run").ensure()
    paths.context.mkdir(exist_ok=True)
    for name in ("model_def.py", "digits.npz"):
        shutil.copy(DIGITS / name, paths.context / name)
    shutil.copy(HERE / "bench_train.py", paths.context / "bench_train.py")
    return paths


def new_trial(paths: ExperimentPaths, trial_id: int) -> Path:
    tp = paths.trial(trial_id).ensure()
    tp.hparams.write_text(json.dumps(HPARAMS))
    return tp.root


def local_env(job_id: int) -> dict[str, str]:
    """The local backend's Slurm-like environment (backends.local_supervisor)."""
    ncpu = str(os.cpu_count() or 1)
    return {**os.environ, "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id),
            "SLURM_JOB_NAME": "bench", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
            "SLURM_NPROCS": "1", "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1",
            "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_NODELIST": "localhost",
            "SLURM_JOB_NODELIST": "localhost", "SLURMD_NODENAME": "localhost",
            "SLURM_TASKS_PER_NODE": "1", "SLURM_RESTART_COUNT": "0",
            "SLURM_SUBMIT_DIR": str(REPO), "SLURM_SUBMIT_HOST": socket.gethostname(),
            "SLURM_CPUS_ON_NODE": ncpu, "SLURM_JOB_CPUS_PER_NODE": ncpu,
            "DETHPC_BACKEND": "local", "PYTHONPATH": str(REPO)}


def phases(marks: dict[str, Any], start: float, end: float, python_start_s: float
           ) -> dict[str, float]:
    user_setup = float(marks["user_before_first_batch_s"])
    p = {
        "wrapper_before_trial": marks["first_line"] - start - python_start_s,
        "dethpc_imports": marks["dethpc_imported"] - marks["torch_imported"],
        "user_imports": (marks["torch_imported"] - marks["first_line"]
                         + marks["user_imported"] - marks["dethpc_imported"]),
        "dethpc_setup": marks["first_batch_start"] - marks["user_imported"] - user_setup,
        "user_setup": user_setup,
        "first_batch": marks["first_batch_end"] - marks["first_batch_start"],
        "after_trial": end - marks["last_line"],
        "job_to_first_batch": marks["first_batch_end"] - start,
    }
    p["dethpc_own"] = p["wrapper_before_trial"] + p["dethpc_imports"] + p["dethpc_setup"]
    # the same in CPU seconds of the trial process (the wrapper's: job_script_helpers)
    p["cpu.dethpc_imports"] = marks["cpu.dethpc_imported"] - marks["cpu.torch_imported"]
    p["cpu.dethpc_setup"] = (marks["cpu.first_batch_start"] - marks["cpu.user_imported"]
                             - marks["cpu.user_before_first_batch_s"])
    p["cpu.user_setup"] = marks["cpu.user_before_first_batch_s"]
    return {k: round(v, 4) for k, v in p.items()}


def python_start(n: int = 3) -> float:
    """A bare fresh interpreter (this venv's, ``-c pass``): a trial's own cost."""
    out = []
    for _ in range(n):
        t0 = time.time()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(time.time() - t0)
    return statistics.median(out)


#: the run's start in a trial script now: two comment lines, the defaults, one python
#: (with ``--det-env``), the output's redirect
START = re.compile(r"# the run's start:.*\n#.*\n(JOB_REF=.*\n)(eval .*) --det-env\)\"\n"
                   r"(exec .*\n)")


def as_before(script: str) -> str:
    """The trial script as rendered before ``detenv`` was folded into ``run_start``
    (``per_job_old``): ``run_start`` right after the traps, before the exports;
    ``python -m dethpc.launch.detenv`` after them, where the run's start is now."""
    found = START.search(script)
    if found is None:
        raise SystemExit("the trial script's run start is not the one this bench knows")
    defaults, start, redirect = found.groups()
    python = start.split()[1].removeprefix('"$(')
    old = (script[:found.start()] + "# Determined's DET_* variables that this run learns "
           f"as it starts (dethpc.launch.detenv)\neval \"$({python} -m dethpc.launch.detenv)"
           '"\n' + script[found.end():])
    trap = "trap 'on_signal TERM TERM' TERM\n"
    return old.replace(trap, trap + defaults + start + ')"\n' + redirect, 1)


def helpers(trial: Path, reps: int) -> dict[str, dict[str, float]]:
    """Each python the per-job script's shell runs, alone, as the script runs it: median
    wall and CPU seconds (CPU is the figure that the shared cores' load blurs least)."""
    py = sys.executable
    env = {**local_env(999), "TRIAL_DIR": str(trial), "DETHPC_TRIAL_DIR": str(trial),
           "DETHPC_EXPERIMENT_ID": "1", "DETHPC_TRIAL_ID": "1"}
    cmds = {
        "python -c pass": [py, "-c", "pass"],
        "run_start --det-env (now; local)": [py, "-m", "dethpc.launch.run_start",
                                             "--det-env"],
        "run_start --trial-dir --det-env (now; Slurm)": [
            py, "-m", "dethpc.launch.run_start", "--trial-dir", str(trial), "--det-env"],
        "run_start (before; local)": [py, "-m", "dethpc.launch.run_start"],
        "detenv (before)": [py, "-m", "dethpc.launch.detenv"],
        "run_end (the run's end)": [py, "-m", "dethpc.launch.run_end", "--kind", "trial",
                                    "--rc", "0", "--local", "--trial-dir", str(trial)],
        "entry latest-checkpoint (wrapped scripts)": [
            py, "-m", "dethpc.surfaces.entry", "latest-checkpoint"],
    }
    out: dict[str, dict[str, float]] = {}
    for name, argv in cmds.items():
        wall, cpu = [], []
        for _ in range(reps):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)
            wall.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        out[name] = {"wall_s": round(statistics.median(wall), 4),
                     "cpu_s": round(statistics.median(cpu), 4)}
    return out


def per_job(paths: ExperimentPaths, trial_id: int, python_start_s: float, old: bool = False
            ) -> dict[str, Any]:
    cfg = config()
    trial = new_trial(paths, trial_id)
    script = trial / "job.sbatch"
    text = trial_script(cfg, CLUSTER, backend="local", python=sys.executable,
                        run_dir=paths.root, exp_id=1, trial_id=trial_id)
    script.write_text(as_before(text) if old else text)
    marks_file = trial / "marks.json"
    env = {**local_env(1000 + trial_id), "BENCH_MARKS": str(marks_file)}
    t0 = time.time()
    proc = subprocess.run(["bash", str(script)], env=env, cwd=str(trial),
                          stdin=subprocess.DEVNULL, check=False)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"per-job trial {trial_id} exited {proc.returncode}: see {trial}")
    exits = [json.loads(x) for x in (trial / "exits.jsonl").read_text().splitlines()]
    marks = json.loads(marks_file.read_text())
    return {"phases": phases(marks, t0, end, python_start_s), "exit": exits[-1]["reason"],
            "modules": marks["modules"],
            "dynamo_before_user_init": marks["dynamo_before_user_init"]}


def pool_worker(variant: str, root: Path, first_id: int, reps: int) -> None:
    """A worker-like process: preload once, then run ``reps`` items as the worker does
    (``trial_env`` + ``forkserver.spawn``); prints one JSON line."""
    from dethpc.launch.worker import forkserver, main

    paths = ExperimentPaths(root / "run")
    t0 = time.time()
    if variant == "old":
        took, _ = forkserver.preload(["torch"], warm=False)
    else:
        took, _ = forkserver.preload(["torch"])
    preload_s = time.time() - t0
    runs = []
    for i in range(reps):
        trial_id = first_id + i
        trial = new_trial(paths, trial_id)
        item = work_item(config(), CLUSTER, backend="local", python=sys.executable,
                         run_dir=paths.root, exp_id=1, trial_id=trial_id, seq=0)
        marks_file = trial / "marks.json"
        item.env["BENCH_MARKS"] = str(marks_file)
        os.environ.update(local_env(1000 + trial_id))
        start = time.time()
        pid, _ = forkserver.spawn(item.argv, main.trial_env(item), item.cwd,
                                  trial / "slurm-pool.out")
        _, status = os.waitpid(pid, 0)
        end = time.time()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"pool trial {trial_id} failed: see {trial}")
        marks = json.loads(marks_file.read_text())
        runs.append({"phases": phases(marks, start, end, 0.0), "modules": marks["modules"],
                     "dynamo_before_user_init": marks["dynamo_before_user_init"]})
    print(json.dumps({"preload_s": round(preload_s, 3), "preloaded": took, "runs": runs}))


def pool(variant: str, root: Path, first_id: int, reps: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--pool-worker", variant, "--root",
                          str(root), "--first-id", str(first_id), "--reps", str(reps)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: round(statistics.median(r["phases"][k] for r in runs), 3) for k in PHASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 rep: a smoke run")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/trial_start.json")
    ap.add_argument("--pool-worker", choices=("old", "new"), help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--first-id", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pool_worker:
        pool_worker(args.pool_worker, args.root, args.first_id, args.reps)
        return
    reps = 1 if args.quick else args.reps
    with tempfile.TemporaryDirectory(prefix="dethpc-trial-start-") as tmp:
        root = Path(tmp)
        paths = run_dir(root)
        py_s = python_start()
        jobs: list[dict[str, Any]] = []
        jobs_old: list[dict[str, Any]] = []
        pools: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        preload: dict[str, list[float]] = {"old": [], "new": []}
        next_id = 1
        for _ in range(reps):   # interleaved: one of each mode per round
            jobs_old.append(per_job(paths, next_id, py_s, old=True))
            jobs.append(per_job(paths, next_id + 1, py_s))
            next_id += 2
            for variant in ("old", "new"):
                got = pool(variant, root, next_id, 2)
                next_id += 2
                preload[variant].append(got["preload_s"])
                pools[variant] += got["runs"]
        helper = helpers(new_trial(paths, next_id), max(5, 3 * reps))
        result = {
            "bench": "trial_start", "issue": "47 item 3",
            "regime": (f"{os.cpu_count()} cores shared ({platform.node()}), local backend "
                       "(no Slurm), examples/digits, python " + platform.python_version()
                       + ", torch " + _torch_version()),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "reps": reps, "python_c_pass_s": round(py_s, 3),
            "job_script_helpers": helper,
            "dethpc_own_cpu_s": {
                "what": "CPU seconds of dethpc's part of a trial's start (the load blurs "
                        "CPU least): the job script's pythons before the trial (per-job; "
                        "job_script_helpers) + dethpc's imports and setup in the trial",
                "per_job_old": _own_cpu(helper, ("run_start (before; local)",
                                                 "detenv (before)"), jobs_old),
                "per_job": _own_cpu(helper, ("run_start --det-env (now; local)",), jobs),
                "pool_old": _own_cpu(None, (), pools["old"]),
                "pool_new": _own_cpu(None, (), pools["new"])},
            "per_job_old": {"what": "two pythons before the trial: `python -m "
                                    "dethpc.launch.run_start`, then `... detenv` (before)",
                            "median": summary(jobs_old), "runs": jobs_old},
            "per_job": {"what": "one python before the trial: `python -m "
                                "dethpc.launch.run_start --det-env` (now)",
                        "median": summary(jobs), "runs": jobs},
            "pool_old": {"what": "worker preloads torch alone (before issue 47 item 3)",
                         "preload_s": preload["old"], "median": summary(pools["old"]),
                         "runs": pools["old"]},
            "pool_new": {"what": "forkserver.preload: torch + torch._dynamo + dethpc's "
                                 "job side", "preload_s": preload["new"],
                         "median": summary(pools["new"]), "runs": pools["new"]},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for mode in ("per_job_old", "per_job", "pool_old", "pool_new"):
        print(mode, json.dumps(result[mode]["median"]))
    print("job_script_helpers", json.dumps(helper))
    print("dethpc_own_cpu_s", json.dumps(result["dethpc_own_cpu_s"]))


def _own_cpu(helper: dict[str, dict[str, float]] | None, before_trial: tuple[str, ...],
             runs: list[dict[str, Any]]) -> float:
    in_trial = statistics.median(r["phases"]["cpu.dethpc_imports"]
                                 + r["phases"]["cpu.dethpc_setup"] for r in runs)
    wrapper = 0.0 if helper is None else sum(helper[h]["cpu_s"] for h in before_trial)
    return round(wrapper + in_trial, 3)


def _torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    main()
