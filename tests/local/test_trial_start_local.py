"""A trial's start pays only for itself (issue 47 item 3), real processes, no mocks.

* A pool worker's preload of ``torch`` brings ``torch._dynamo``, which every
  ``torch.optim`` optimizer imports at its construction (``torch._disable_dynamo`` on
  ``Optimizer.add_param_group``): a forked trial's Trainer fit imports no
  ``torch._dynamo`` module of its own, and its results (metrics, checkpoint, exit code)
  are exactly those of a trial forked from a worker that preloaded torch alone.
* The per-job trial script (local backend) runs the digits trial to a completed exit
  record with its first python being ``dethpc.launch.run_start``.

bench/trial_start measures the time. Wall time about 25-40 s on 2 loaded cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dethpc.common.paths import ExperimentPaths
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import trial_script
from dethpc.jobs.worker_pool_items import work_item

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
HPARAMS = {"lr": 0.01, "hidden_size": 32, "dropout": 0.1, "optimizer": "adam",
           "global_batch_size": 32}
CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})
CFG = parse_experiment_config({
    "name": "start", "entrypoint": "python3 train.py --batches 3", "hyperparameters": HPARAMS,
    "searcher": {"name": "single", "metric": "validation_loss",
                 "max_length": {"batches": 3}}})
#: the trial's first lines: which torch._dynamo modules it found, before any optimizer
PROBE = """\
import json, os, sys
FOUND = sorted(m for m in sys.modules if m.startswith("torch._dynamo"))
exec(compile(open("train.py").read(), "train.py", "exec"), {"__name__": "__main__"})
NEW = sorted(m for m in sys.modules if m.startswith("torch._dynamo") and m not in FOUND)
json.dump({"found": len(FOUND), "new": NEW}, open(os.environ["PROBE_OUT"], "w"))
"""

WORKER = """\
import json, os, sys
from pathlib import Path
from dethpc.config import parse_experiment_config
from dethpc.launch.worker import forkserver, main
from dethpc.common.worker_queue import WorkItem
item = WorkItem.from_json(Path(sys.argv[2]).read_text())
forkserver.preload(["torch"], warm=sys.argv[1] == "warm")
pid, _ = forkserver.spawn(item.argv, main.trial_env(item), item.cwd,
                          Path(item.trial_dir) / "out.log")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def _run_dir(root: Path) -> ExperimentPaths:
    paths = ExperimentPaths(root / "run").ensure()
    shutil.copytree(DIGITS, paths.context)
    (paths.context / "probe.py").write_text(PROBE)
    return paths


def _trial(paths: ExperimentPaths, trial_id: int) -> Path:
    tp = paths.trial(trial_id).ensure()
    tp.hparams.write_text(json.dumps(HPARAMS))
    tp.target.write_text(json.dumps({"unit": "batches", "length": 3}))
    return tp.root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DETHPC_"))}
    return {**env, "PYTHONPATH": str(REPO), "DETHPC_HOME": str(root / "home"),
            "SLURM_JOB_ID": "41", "DETHPC_BACKEND": "local"}


def _metrics(trial: Path) -> list[tuple[str, int, object]]:
    """The trial's records less their times and checkpoint uuids."""
    recs = [json.loads(x) for x in (trial / "metrics.jsonl").read_text().splitlines()]
    return [(r["kind"], r["steps"], r.get("metrics", r.get("metadata"))) for r in recs]


def _pool_run(tmp_path: Path, paths: ExperimentPaths, trial_id: int, mode: str
              ) -> tuple[Path, dict[str, object]]:
    trial = _trial(paths, trial_id)
    item = work_item(CFG, CLUSTER, backend="local", python=sys.executable,
                     run_dir=paths.root, exp_id=1, trial_id=trial_id, seq=0)
    item = type(item)(**{**item.__dict__, "argv": [sys.executable, "probe.py"],
                         "env": {**item.env, "PROBE_OUT": str(trial / "probe.json"),
                                 "DETHPC_TRIAL_SEED": "7"}})
    (tmp_path / f"item{trial_id}.json").write_text(item.to_json())
    proc = subprocess.run([sys.executable, "-c", WORKER, mode,
                           str(tmp_path / f"item{trial_id}.json")],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stderr, (trial / "out.log").read_text())
    return trial, json.loads((trial / "probe.json").read_text())


def test_pool_preload_takes_dynamo_off_the_trial_and_keeps_its_results(tmp_path: Path
                                                                       ) -> None:
    paths = _run_dir(tmp_path)
    cold, cold_probe = _pool_run(tmp_path, paths, 1, "torch-alone")
    warm, warm_probe = _pool_run(tmp_path, paths, 2, "warm")
    # the cold trial imported torch._dynamo at its optimizer; the warm one found it
    assert cold_probe["found"] == 0 and "torch._dynamo" in cold_probe["new"], cold_probe
    assert warm_probe["found"] > 0 and warm_probe["new"] == [], warm_probe
    # the very same training: metrics, checkpoint files
    assert _metrics(cold) == _metrics(warm) != []
    ckpts = [sorted(p.name for p in (t / "checkpoints").iterdir()) for t in (cold, warm)]
    assert all(len(c) == 1 for c in ckpts), ckpts
    files = [sorted(f.name for f in (t / "checkpoints" / c[0]).iterdir())
             for t, c in zip((cold, warm), ckpts, strict=True)]
    assert files[0] == files[1], files


def test_per_job_script_runs_a_trial_to_its_exit_record(tmp_path: Path) -> None:
    paths = _run_dir(tmp_path)
    trial = _trial(paths, 3)
    script = trial / "job.sbatch"
    script.write_text(trial_script(CFG, CLUSTER, backend="local", python=sys.executable,
                                   run_dir=paths.root, exp_id=1, trial_id=3))
    assert "-m dethpc.launch.run_start" in script.read_text()
    proc = subprocess.run(["bash", str(script)], env=_env(tmp_path), cwd=trial,
                          capture_output=True, text=True, timeout=300)
    exits = [json.loads(x) for x in (trial / "exits.jsonl").read_text().splitlines()]
    assert proc.returncode == 0, (trial / "slurm-41.out").read_text()
    assert [(e["reason"], e["code"], e["job"]) for e in exits] == [("completed", 0, "41")]
    assert [k for k, steps, _ in _metrics(trial) if steps == 3] == [
        "training", "validation", "checkpoint"]
