"""Table tests: Slurm's words at submit -> the config fields behind them."""

from __future__ import annotations

import pytest

from dethpc.backends.slurm_parse import sbatch_refusal
from dethpc.config import parse_experiment_config
from dethpc.config.cluster import parse_cluster_config
from dethpc.jobs.verdict import OPTION_FIX, refusal_message, suspects

CLUSTER = parse_cluster_config({"backend": "slurm", "default_pool": "gpu", "pools": {
    "gpu": {"partition": "low", "qos": "normal", "slots_per_node": 2, "gres": "gpu",
            "gpu_type": "a100", "cpus_per_slot": 4, "mem_per_slot": "4G",
            "default_time": "04:00:00"},
    "cpu": {"partition": "debug", "account": "ml-team", "sbatch_args": ["--exclude=n4"]}}},
    "site.yaml")


def cfg(**extra):
    return parse_experiment_config({
        "name": "x", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        **extra})


CASES = {
    "partition": ("Invalid partition name specified", cfg(), ["pools.gpu.partition = 'low'"]),
    "qos": ("Invalid qos specification", cfg(),
            ["pools.gpu.qos = 'normal'"]),   # an unset account is not listed
    "account, with the pool's sbatch_args": (
        "Invalid account or account/partition combination specified",
        cfg(resources={"resource_pool": "cpu"}),
        ["pools.cpu.account = 'ml-team'", "pools.cpu.partition = 'debug'",
         "pools.cpu.sbatch_args = ['--exclude=n4']"]),
    "time, with the experiment's slurm.time": (
        "Requested time limit is invalid (missing or exceeds some limit)",
        cfg(slurm={"time": "3-00:00:00"}),
        ["pools.gpu.default_time = '04:00:00'", "pools.gpu.partition = 'low'",
         "slurm.time = '3-00:00:00'"]),
    "node configuration": (
        "Requested node configuration is not available",
        cfg(resources={"slots_per_trial": 2}),
        ["pools.gpu.slots_per_node = 2", "pools.gpu.cpus_per_slot = 4",
         "pools.gpu.mem_per_slot = '4G'", "pools.gpu.gres = 'gpu'",
         "pools.gpu.gpu_type = 'a100'", "pools.gpu.partition = 'low'",
         "resources.slots_per_trial = 2"]),
    # 12 nodes x 8 tasks on four 16-CPU nodes (sbatch --test-only on the dev cluster)
    "more CPUs in all than the partition": (
        "More processors requested than permitted",
        cfg(resources={"slots_per_trial": 96, "resource_pool": "cpu"}),
        ["pools.cpu.slots_per_node = 1", "pools.cpu.cpus_per_slot = 1",
         "pools.cpu.partition = 'debug'", "resources.slots_per_trial = 96",
         "pools.cpu.sbatch_args = ['--exclude=n4']"]),
    "the experiment's sbatch_args always count": (
        "Invalid partition name specified", cfg(slurm={"sbatch_args": ["-p x"]}),
        ["pools.gpu.partition = 'low'", "slurm.sbatch_args = ['-p x']"]),
    "words no rule knows": ("Zombie apocalypse", cfg(), []),
    # getopt's complaint: the item that spells the option, with its index
    "an option sbatch does not know (Determined's spacing)": (
        "sbatch: unrecognized option '--thisisnotavalidslurmoption'",
        cfg(slurm={"sbatch_args": ["--exclusive",
                                   "--thisisnotavalidslurmoption = willfail"]}),
        ["slurm.sbatch_args[1] = '--thisisnotavalidslurmoption = willfail'"]),
    "an unknown short option": (
        "sbatch: invalid option -- 'Z'", cfg(slurm={"sbatch_args": ["-Z3", "-p low"]}),
        ["slurm.sbatch_args[0] = '-Z3'"]),
    "an option without its value, in the pool's sbatch_args": (
        "sbatch: option '--exclude' requires an argument",
        cfg(resources={"resource_pool": "cpu"}),
        ["pools.cpu.sbatch_args[0] = '--exclude=n4'"]),
    "no item spells it: the items sbatch 22.05 does not know": (
        "sbatch: unrecognized option '--frob'",
        cfg(slurm={"sbatch_args": ["--exclusive", "--frobnicate=1"]}),
        ["slurm.sbatch_args[1] = '--frobnicate=1'"]),
    "no item is unknown either: every sbatch_args list": (
        "sbatch: unrecognized option '--frob'",
        cfg(resources={"resource_pool": "cpu"}, slurm={"sbatch_args": ["--exclusive"]}),
        ["pools.cpu.sbatch_args = ['--exclude=n4']", "slurm.sbatch_args = ['--exclusive']"]),
}


@pytest.mark.parametrize(("words", "config", "expected"), CASES.values(), ids=CASES.keys())
def test_suspects(words, config, expected) -> None:
    assert [str(s) for s in suspects(words, config, CLUSTER)] == expected


def test_refusal_message_names_pool_fields_fix_and_request() -> None:
    text = refusal_message("Invalid partition name specified", cfg(), CLUSTER,
                           ["--job-name=n", "--partition=low", "--nodes=1"])
    assert text.splitlines() == [
        "Slurm refuses the trials' job (sbatch --test-only): Invalid partition name specified",
        "  resource pool 'gpu' of the cluster config site.yaml",
        "  the fields behind it:",
        "    pools.gpu.partition = 'low'",
        "  fix: name a partition that exists (`sinfo -s`); or choose another pool with "
        "resources.resource_pool",
        "  the job asked for: --partition=low --nodes=1"]


def test_refusal_message_for_an_option_sbatch_does_not_know() -> None:
    config = cfg(slurm={"sbatch_args": ["--thisisnotavalidslurmoption = willfail"]})
    words = "sbatch: unrecognized option '--thisisnotavalidslurmoption'"
    text = refusal_message(words, config, CLUSTER,
                           ["--job-name=n", "--partition=low",
                            "--thisisnotavalidslurmoption = willfail"])
    assert text.splitlines() == [
        "Slurm refuses the trials' job (sbatch --test-only): sbatch: unrecognized option "
        "'--thisisnotavalidslurmoption'",
        "  resource pool 'gpu' of the cluster config site.yaml",
        "  the fields behind it:",
        "    slurm.sbatch_args[0] = '--thisisnotavalidslurmoption = willfail'",
        f"  fix: {OPTION_FIX}",
        "  the job asked for: --partition=low --thisisnotavalidslurmoption = willfail"]


@pytest.mark.parametrize(("stderr", "words"), [
    ("sbatch: error: invalid partition specified: nope\n"
     "allocation failure: Invalid partition name specified\n",
     "invalid partition specified: nope; Invalid partition name specified"),
    ("allocation failure: Invalid qos specification\n", "Invalid qos specification"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition "
     "combination specified\n",
     "Invalid account or account/partition combination specified"),
    ("sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.\n",
     "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive."),
    # getopt's complaint keeps sbatch's name (its exact words); the --help hint goes
    ("sbatch: unrecognized option '--thisisnotavalidslurmoption'\n"
     "Try \"sbatch --help\" for more information\n",
     "sbatch: unrecognized option '--thisisnotavalidslurmoption'"),
    ("sbatch: invalid option -- 'Z'\nsbatch: error: Try \"sbatch --help\" for more "
     "information\n", "sbatch: invalid option -- 'Z'"),
    ("x\nx\n", "x"),
    ("", "sbatch refused the job without a message"),
])
def test_sbatch_refusal(stderr: str, words: str) -> None:
    assert sbatch_refusal(stderr) == words
