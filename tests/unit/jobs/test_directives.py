"""Table tests for ``dethpc.jobs.directives``: sbatch's option vocabulary, the layering of a
site's and a user's ``sbatch_args`` over dethpc's defaults (replace in place, ``!`` to
drop), the refusals at config time and sbatch's own conflicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.common.sbatch_options import (
    canonical_option,
    check_args,
    layer,
    managed_option,
    sbatch_conflicts,
    task_count,
)
from dethpc.config import parse_experiment_config
from dethpc.config.model import HetComponent, RequeueMode, ResourcePool
from dethpc.jobs.directives import component_directives, trial_directives


@pytest.mark.parametrize(("arg", "option"), [
    ("--partition=low", "--partition"),
    ("--partition low", "--partition"),
    ("--part=low", "--partition"),        # getopt: a unique prefix
    ("-plow", "--partition"),
    ("-p low", "--partition"),
    ("--mem=4G", "--mem"),                # exact beats being a prefix of --mem-per-cpu
    ("--mem-per-c=4G", "--mem-per-cpu"),
    ("--gpus=2", "--gpus"),
    ("--exclusive", "--exclusive"),
    ("--n=2", None),                      # ambiguous prefix
    ("--frobnicate", None),               # not an sbatch option
    ("-Z", None),
    ("--", None),
])
def test_canonical_option(arg: str, option: str | None) -> None:
    assert canonical_option(arg) == option


@pytest.mark.parametrize(("arg", "managed"), [
    ("--output=x", "--output"), ("--out=x", "--output"), ("-ofile", "--output"),
    ("-J name", "--job-name"), ("--requeue", "--requeue"), ("--no-requeue", "--no-requeue"),
    ("--sig=USR1@10", "--signal"), ("--test-only", "--test-only"),
    ("--mem=1G", None), ("--exclude=n1", None), ("-p low", None),
])
def test_managed_option(arg: str, managed: str | None) -> None:
    assert managed_option(arg) == managed


DEFAULTS = ["--job-name=j", "--partition=debug", "--time=01:00:00", "--nodes=1",
            "--ntasks-per-node=2", "--cpus-per-task=4", "--gpus-per-node=a100:2",
            "--mem=8192M"]

LAYERS = {
    "nothing to layer": ([], [], DEFAULTS),
    "an unrelated option is appended": (["--exclude=n3"], [], [*DEFAULTS, "--exclude=n3"]),
    "same option replaces in place": (
        ["--time=00:30:00"], [],
        ["--job-name=j", "--partition=debug", "--time=00:30:00", *DEFAULTS[3:]]),
    "short form replaces the long one": (
        ["-p high"], [], ["--job-name=j", "-p high", *DEFAULTS[2:]]),
    "--mem-per-cpu replaces --mem (sbatch refuses both)": (
        ["--mem-per-cpu=2G"], [], [*DEFAULTS[:7], "--mem-per-cpu=2G"]),
    "--gres=gpu replaces --gpus-per-node": (
        ["--gres=gpu:a100:1"], [], [*DEFAULTS[:6], "--gres=gpu:a100:1", "--mem=8192M"]),
    "--gres of another resource is its own option": (
        ["--gres=nvme:1"], [], [*DEFAULTS, "--gres=nvme:1"]),
    "--cpus-per-gpu replaces --cpus-per-task (sbatch refuses both)": (
        ["--cpus-per-gpu=3"], [], [*DEFAULTS[:5], "--cpus-per-gpu=3", *DEFAULTS[6:]]),
    "drop": (["!--mem"], [], DEFAULTS[:7]),
    "drop by short form": (["!-t"], [], [d for d in DEFAULTS if not d.startswith("--time")]),
    "drop of something not set is a no-op": (["!--exclude"], [], DEFAULTS),
    "the experiment's layer wins over the pool's": (
        ["--exclude=n3", "--mem=4G"], ["--exclude=n4"],
        [*DEFAULTS[:7], "--mem=4G", "--exclude=n4"]),
    "the experiment drops what the pool added": (["--exclude=n3"], ["!--exclude"], DEFAULTS),
    "the experiment puts back what the pool dropped": (
        ["!--mem"], ["--mem-per-gpu=10G"], [*DEFAULTS[:7], "--mem-per-gpu=10G"]),
    "twice in one layer: the last one": (
        ["--time=1", "--time=2"], [],
        ["--job-name=j", "--partition=debug", "--time=2", *DEFAULTS[3:]]),
    "an option sbatch does not know is kept as written": (
        ["--future-option=1"], [], [*DEFAULTS, "--future-option=1"]),
}


@pytest.mark.parametrize(("pool", "experiment", "expected"), LAYERS.values(), ids=LAYERS.keys())
def test_layer(pool: list[str], experiment: list[str], expected: list[str]) -> None:
    got = layer(DEFAULTS, pool, experiment)
    assert got == expected
    assert sbatch_conflicts(got) == []


@pytest.mark.parametrize(("args", "problems"), [
    (["--mem=4G", "--exclusive", "-x n1", "!--mem", "!-p"], []),
    (["mem=4G"], ["0: expected an sbatch option starting with '-', got 'mem=4G'"]),
    (["--out=x"], ["0: '--out=x' is not allowed: --output is managed by dethpc"]),
    (["!--requeue"], ["0: '!--requeue' is not allowed: --requeue is managed by dethpc"]),
    (["!--memm"], ["0: '!--memm' drops no sbatch option"]),
    (["!--mem=4G"], ["0: '!--mem=4G': a drop names the option only, e.g. '!--mem'"]),
    (["--exclusive", "--mail-type=END\n#SBATCH --wrap=x"], ["1: an sbatch option may not"]),
])
def test_check_args(args: list[str], problems: list[str]) -> None:
    got = [f"{p.index}: {p.message}" for p in check_args(args)]
    assert len(got) == len(problems), got
    for have, want in zip(got, problems, strict=True):
        assert have.startswith(want), (have, want)


@pytest.mark.parametrize(("directives", "problems"), [
    (DEFAULTS, []),
    (["--mem=1G", "--mem-per-cpu=1G"], ["'--mem=1G' and '--mem-per-cpu=1G' set the same"]),
    (["--partition=a", "-p b"], ["'--partition=a' and '-p b' set the same request"]),
    (["--cpus-per-task=2", "--cpus-per-gpu=1"], ["'--cpus-per-task=2' and '--cpus-per-gpu=1'"]),
    (["--nodes=1", "hetjob", "--nodes=2"], []),   # each het component is its own job
    (["--exclusive", "--exclusive"], ["'--exclusive' and '--exclusive' set the same"]),
])
def test_sbatch_conflicts(directives: list[str], problems: list[str]) -> None:
    got = sbatch_conflicts(directives)
    assert len(got) == len(problems), got
    for have, want in zip(got, problems, strict=True):
        assert have.startswith(want)


GPU_POOL = ResourcePool(name="gpu", partition="low", qos="normal", slots_per_node=2,
                        gres="gpu", gpu_type="a100", cpus_per_slot=4, mem_per_slot="3G",
                        default_time="02:00:00", sbatch_args=("--exclude=n3", "!--qos"))


def test_trial_directives_layer_pool_then_experiment() -> None:
    cfg = parse_experiment_config({
        "name": "x", "entrypoint": "true", "searcher": {"name": "single", "metric": "loss",
                     "max_length": {"batches": 1}},
        "slurm": {"sbatch_args": ["--mem-per-gpu=5G", "-t 10"]}})
    got = trial_directives(cfg, GPU_POOL, name="n", comment="c", output="o")
    assert got == ["--job-name=n", "--comment=c", "--output=o", "--open-mode=append",
                   "--requeue", "--signal=B:USR2@120", "--partition=low", "-t 10",
                   "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=4",
                   "--gpus-per-node=a100:1", "--mem-per-gpu=5G", "--exclude=n3"]


@pytest.mark.parametrize(("mode", "option"), [
    (RequeueMode.NORMAL, "--requeue"), (RequeueMode.EXPEDITE, "--requeue=expedite")])
def test_a_pools_requeue_mode_reaches_its_trials_not_its_workers(
        mode: RequeueMode, option: str) -> None:
    from dataclasses import replace

    from dethpc.config.model import ClusterConfig
    from dethpc.jobs.worker_pool_script import worker_array_script

    cfg = parse_experiment_config({
        "name": "x", "entrypoint": "true", "searcher": {"name": "single", "metric": "loss",
                     "max_length": {"batches": 1}}, "resources": {"resource_pool": "gpu"}})
    pool = replace(GPU_POOL, requeue=mode)
    assert option in trial_directives(cfg, pool, name="n", comment="c", output="o")
    worker = worker_array_script(cfg, ClusterConfig(backend="slurm", pools={"gpu": pool},
                                                    default_pool="gpu"),
                                 backend="slurm", run_dir=Path("/runs/x"), exp_id=1,
                                 python="python3")
    # a worker's failure is no trial's: never held by an expedited requeue
    assert "#SBATCH --requeue\n" in worker and "expedite" not in worker


def test_component_directives_take_the_pool_args_not_the_experiment_ones() -> None:
    comp = HetComponent(name="s", entrypoint="x", nodes=2, tasks_per_node=2)
    got = component_directives(comp, GPU_POOL, "00:10:00")
    assert got == ["hetjob", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                   "--partition=low", "--time=00:10:00", "--mem=6144M", "--exclude=n3"]


@pytest.mark.parametrize(("options", "tasks"), [
    ([], 1),
    (["--ntasks=4"], 4),
    (["-n 3"], 3),
    (["-n3"], 3),
    (["--ntasks 2"], 2),
    (["--nodes=2"], 2),                                  # one task per node by default
    (["--nodes=2", "--ntasks-per-node=4"], 8),           # dethpc's own shape directives
    (["-N 2-4", "--ntasks-per-node=2"], 4),              # a range: its minimum
    (["--nodes=1,4,8"], 1),                              # a size list: its first
    (["--ntasks-per-node=2"], 2),
    (["--ntasks=6", "--nodes=2", "--ntasks-per-node=2"], 6),   # --ntasks wins
    (["--ntasks=2", "--ntasks=5"], 5),                   # the last one wins (command line)
    (["--ntasks=x"], 1),                                 # sbatch refuses it; not a count
    (["--ntasks=0"], 1),
    (["--ntasks-per-n=3"], 3),                           # a unique prefix, as getopt takes it
    (["--cpus-per-task=8", "--mem=1G"], 1),
    (["--nodes=1", "--ntasks-per-node=2", "hetjob", "--ntasks=3"], 5),   # het: the sum
    (["--ntasks=2", "hetjob", "--cpus-per-task=4"], 3),
])
def test_task_count(options: list[str], tasks: int) -> None:
    assert task_count(options) == tasks


@pytest.mark.parametrize(("default_time", "slurm_time", "pool_args", "exp_args", "seconds"), [
    (None, None, (), (), None),                       # no limit anywhere
    ("01:00:00", None, (), (), 3600),                 # the pool's default
    ("01:00:00", "00:10:00", (), (), 600),            # the experiment's slurm.time
    ("01:00:00", None, ("--time=5",), (), 300),       # the pool's sbatch_args win, as on Slurm
    ("01:00:00", "00:10:00", (), ("-t 2",), 120),     # the experiment's, short form too
    ("01:00:00", None, ("!--time",), (), None),       # dropped: no limit
])
def test_run_limits_are_what_the_final_directives_say(
        default_time: str | None, slurm_time: str | None, pool_args: tuple[str, ...],
        exp_args: tuple[str, ...], seconds: int | None) -> None:
    """The local backend enforces ``run_limits``; Slurm the ``#SBATCH`` lines. Both come
    from the same layering (before, the daemon recomputed the time from slurm.time and
    default_time alone: a --time in sbatch_args was ignored by the local backend)."""
    from dethpc.jobs.directives import run_limits

    pool = ResourcePool(name="p", default_time=default_time, sbatch_args=pool_args,
                        signal="USR2", signal_grace_s=90)
    slurm: dict[str, object] = {"sbatch_args": list(exp_args)}
    if slurm_time:
        slurm["time"] = slurm_time
    cfg = parse_experiment_config({
        "name": "x", "entrypoint": "python3 train.py", "slurm": slurm,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
    limits = run_limits(cfg, pool)
    assert (limits.time_limit_s, limits.signal, limits.signal_lead_s) == (seconds, "USR2", 90)
    time_lines = [d for d in trial_directives(cfg, pool, name="n", comment="c", output="o")
                  if canonical_option(d) == "--time"]
    assert len(time_lines) == (0 if seconds is None else 1)
