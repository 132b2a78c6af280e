"""Pure rendering rules and the rendered scripts' syntax (bash -n)."""

import subprocess
from pathlib import Path

import pytest

from dethpc.common.errors import SubmitError
from dethpc.config import parse_experiment_config
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import array_script, trial_script
from dethpc.jobs.render import entrypoint_argv, is_launcher, parse_slurm_time, shjoin


@pytest.mark.parametrize("value,seconds", [
    ("10", 600), ("1:30", 90), ("01:00:00", 3600), ("2-0", 172800), ("1-2:3", 93780),
    ("1-02:03:04", 93784), (None, None), ("UNLIMITED", None), ("infinite", None),
])
def test_parse_slurm_time(value, seconds):
    assert parse_slurm_time(value) == seconds


@pytest.mark.parametrize("bad", ["abc", "1:2:3:4", "-5"])
def test_parse_slurm_time_rejects(bad):
    with pytest.raises(SubmitError, match="sbatch --time"):
        parse_slurm_time(bad)


@pytest.mark.parametrize("entrypoint,argv", [
    ("python3 train.py --lr 0.1", ["python3", "train.py", "--lr", "0.1"]),
    ("model_def:DigitsTrial", ["PY", "-m", "dethpc.pytorch.run", "model_def:DigitsTrial"]),
    ("pkg.mod:Trial", ["PY", "-m", "dethpc.pytorch.run", "pkg.mod:Trial"]),
    (["python3", "a b.py"], ["python3", "a b.py"]),
    ("python3 'a b.py' $(touch x)", ["python3", "a b.py", "$(touch", "x)"]),
])
def test_entrypoint_argv(entrypoint, argv):
    assert entrypoint_argv(entrypoint, "PY") == argv


@pytest.mark.parametrize("argv,expected", [
    (["python3", "-m", "dethpc.launch.torch_distributed", "--", "t.py"], True),
    (["python3", "-m", "dethpc.launch.mpi"], True),
    (["python3", "-m", "dethpc.pytorch.run", "a:B"], False),
    (["python3", "train.py"], False),
    # nested: wrapper commands in front of the launcher
    (["numactl", "--interleave=all", "python3", "-m", "dethpc.launch.torch_distributed",
      "--", "t.py"], True),
    (["env", "A=1", "taskset", "-c", "0-3", "python", "-m", "dethpc.launch.deepspeed"], True),
    # a launcher named only after another program's "--" is that program's argument
    (["python3", "wrap.py", "--", "python3", "-m", "dethpc.launch.mpi"], False),
    (["-m", "dethpc.launch.mpi"], False),
    (["python3", "-m"], False),
])
def test_is_launcher(argv, expected):
    assert is_launcher(argv) is expected


def test_shjoin_quotes_everything():
    assert shjoin(["a", "b c", "$(x)", "'"]) == "a 'b c' '$(x)' ''\"'\"''"


def _cfg(**extra):
    raw = {"name": "t", "entrypoint": "python3 train.py",
           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
           **extra}
    return parse_experiment_config(raw)


CLUSTER = ClusterConfig(pools={"default": ResourcePool(
    name="default", partition="debug", default_time="00:10:00", signal="USR2",
    signal_grace_s=60)})


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_rendered_scripts_pass_bash_n(tmp_path, backend):
    cfg = _cfg(environment={"environment_variables": ["A=$(touch /tmp/pwned)", "B='; rm -rf ~ #"]})
    script = trial_script(cfg, CLUSTER, backend=backend, python="/usr/bin/python3",
                          run_dir=tmp_path, exp_id=1, trial_id=2)
    array = array_script(cfg, CLUSTER, run_dir=tmp_path, exp_id=1, batch_id=1,
                         tasks=[(0, tmp_path / "trials/2/job.sbatch")])
    for text in (script, array):
        p = tmp_path / "s.sh"
        p.write_text(text)
        assert subprocess.run(["bash", "-n", str(p)]).returncode == 0
    assert "#SBATCH --signal=B:USR2@60" in script
    assert "#SBATCH --requeue" in script and "#SBATCH --open-mode=append" in script
    assert "#SBATCH --partition=debug" in script and "#SBATCH --time=00:10:00" in script
    assert "export A='$(touch /tmp/pwned)'" in script
    assert ("srun --ntasks=1" in script) is (backend == "slurm")
    assert ("scontrol requeue" in script) is (backend == "slurm")


def test_directive_with_newline_is_refused(tmp_path):
    cluster = ClusterConfig(pools={"default": ResourcePool(
        name="default", sbatch_args=("--mail-type=END\n#SBATCH --wrap=x",))})
    with pytest.raises(SubmitError, match="newline"):
        trial_script(_cfg(), cluster, backend="slurm", python="py", run_dir=Path(tmp_path),
                     exp_id=1, trial_id=1)
