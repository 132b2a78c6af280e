"""Experiment config parsing: valid forms, every field group's errors, warnings, files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import (
    dump_config,
    flatten_hparams,
    grid_size,
    load_experiment_config,
    parse_experiment_config,
)
from dethpc.config.experiment import check_supported
from dethpc.config.model import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    Length,
    LogHP,
    Unit,
)

_DELETE = object()


def base() -> dict[str, Any]:
    return {
        "name": "mnist",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}},
        "searcher": {
            "name": "random",
            "metric": "validation_loss",
            "max_length": {"batches": 100},
            "max_trials": 4,
        },
    }


def patched(changes: dict[str, Any]) -> dict[str, Any]:
    """``base()`` with dotted keys set (``_DELETE`` removes the key)."""
    raw = base()
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return raw


def errors(raw: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(raw)
    return [str(e) for e in info.value.errors]


def test_minimal_config_defaults() -> None:
    cfg = parse_experiment_config({
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": 50},
    })
    assert cfg.name == "experiment"
    assert cfg.searcher.max_length == Length(Unit.BATCHES, 50)
    assert cfg.searcher.max_trials == 1
    assert cfg.searcher.smaller_is_better is True
    assert cfg.searcher.max_concurrent_trials == 16
    assert cfg.max_restarts == 5
    assert cfg.experiment_seed == 0
    assert cfg.checkpoint_storage.path is None
    assert cfg.hyperparameters == {}
    assert cfg.warnings == ()


def test_raw_is_a_copy_of_the_input() -> None:
    raw = base()
    cfg = parse_experiment_config(raw)
    raw["name"] = "changed"
    assert cfg.raw["name"] == "mnist"


# ---------------------------------------------------------------- valid forms
@pytest.mark.parametrize(
    ("changes", "attr", "expected"),
    [
        ({"entrypoint": ["python3", "train.py", "--x"]}, "entrypoint",
         ("python3", "train.py", "--x")),
        ({"entrypoint": "model_def:Trial"}, "entrypoint", "model_def:Trial"),
        ({"labels": ["a", "b"]}, "labels", ("a", "b")),
        ({"description": "d"}, "description", "d"),
        ({"max_restarts": 0}, "max_restarts", 0),
        ({"records_per_epoch": 60000}, "records_per_epoch", 60000),
        ({"reproducibility": {"experiment_seed": 42}}, "experiment_seed", 42),
        ({"min_validation_period": {"epochs": 1}}, "min_validation_period",
         Length(Unit.EPOCHS, 1)),
        ({"min_checkpoint_period": {"batches": 10}}, "min_checkpoint_period",
         Length(Unit.BATCHES, 10)),
        ({"data": {"url": "x", "n": [1]}}, "data", {"url": "x", "n": [1]}),
    ],
)
def test_top_level_valid(changes: dict[str, Any], attr: str, expected: Any) -> None:
    assert getattr(parse_experiment_config(patched(changes)), attr) == expected


@pytest.mark.parametrize(
    ("hparams", "expected"),
    [
        ({"a": {"type": "const", "val": 3}}, {"a": ConstHP(3)}),
        ({"a": 3}, {"a": ConstHP(3)}),
        ({"a": [1, 2]}, {"a": ConstHP([1, 2])}),
        ({"a": {"type": "int", "minval": 1, "maxval": 4, "count": 2}}, {"a": IntHP(1, 4, 2)}),
        ({"a": {"type": "double", "minval": 0, "maxval": 1.5}}, {"a": DoubleHP(0.0, 1.5)}),
        ({"a": {"type": "log", "minval": -3, "maxval": -1, "base": 2}},
         {"a": LogHP(-3.0, -1.0, 2.0)}),
        ({"a": {"type": "categorical", "vals": ["x", 1]}}, {"a": CategoricalHP(("x", 1))}),
        ({"g": {"lr": {"type": "double", "minval": 0, "maxval": 1}, "m": 0.9}},
         {"g": {"lr": DoubleHP(0.0, 1.0), "m": ConstHP(0.9)}}),
    ],
)
def test_hyperparameters_valid(hparams: dict[str, Any], expected: dict[str, Any]) -> None:
    cfg = parse_experiment_config(patched({"hyperparameters": hparams}))
    assert cfg.hyperparameters == expected


def test_flatten_and_grid_size() -> None:
    cfg = parse_experiment_config(patched({"hyperparameters": {
        "opt": {"lr": {"type": "double", "minval": 0, "maxval": 1, "count": 3},
                "kind": {"type": "categorical", "vals": ["a", "b"]}},
        "n": {"type": "int", "minval": 1, "maxval": 2, "count": 5},
        "c": 1,
    }}))
    assert list(flatten_hparams(cfg.hyperparameters)) == ["opt.lr", "opt.kind", "n", "c"]
    assert grid_size(cfg.hyperparameters) == 3 * 2 * 2


@pytest.mark.parametrize(
    ("searcher", "checks"),
    [
        ({"name": "single", "metric": "m", "max_length": {"records": 5}},
         {"max_trials": 1, "max_length": Length(Unit.RECORDS, 5)}),
        ({"name": "random", "metric": "acc", "smaller_is_better": False, "max_length": 7,
          "max_trials": 3, "max_concurrent_trials": 0},
         {"smaller_is_better": False, "max_concurrent_trials": 0, "max_trials": 3}),
        ({"name": "adaptive_asha", "metric": "m", "time_metric": "batches", "max_time": 800,
          "max_trials": 16, "mode": "aggressive", "divisor": 3, "max_rungs": 4,
          "bracket_rungs": [2, 1], "variant": "promotion", "stop_grace_s": 0},
         {"max_length": Length(Unit.BATCHES, 800), "time_metric": "batches", "max_time": 800,
          "mode": "aggressive", "divisor": 3, "max_rungs": 4, "bracket_rungs": (2, 1),
          "variant": "promotion", "stop_grace_s": 0}),
        ({"name": "adaptive_asha", "metric": "m", "max_length": {"epochs": 2}, "max_trials": 2},
         {"mode": "standard", "divisor": 4, "max_rungs": 5, "variant": "stopping",
          "time_metric": None}),
    ],
)
def test_searcher_valid(searcher: dict[str, Any], checks: dict[str, Any]) -> None:
    cfg = parse_experiment_config(patched({"searcher": searcher}))
    for attr, value in checks.items():
        assert getattr(cfg.searcher, attr) == value, attr


def test_grid_max_trials_is_grid_size() -> None:
    cfg = parse_experiment_config(patched({
        "searcher": {"name": "grid", "metric": "m", "max_length": 10},
        "hyperparameters": {"a": {"type": "int", "minval": 0, "maxval": 9, "count": 3},
                            "b": {"type": "categorical", "vals": [1, 2]}},
    }))
    assert cfg.searcher.max_trials == 6
    assert cfg.warnings == ()


def test_sections_valid() -> None:
    cfg = parse_experiment_config(patched({
        "resources": {"slots_per_trial": 4, "resource_pool": "gpu", "max_slots": 8,
                      "priority": 10},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/scratch",
                               "storage_path": "ckpt", "save_trial_best": 2,
                               "save_trial_latest": 0, "save_experiment_best": 3},
        "environment": {"image": {"cpu": "c.sif", "cuda": "g.sif"},
                        "environment_variables": ["A=1", "B=x=y", "C=$(echo hi)", "D="]},
        "bind_mounts": [{"host_path": "/data", "container_path": "/d", "read_only": True}],
        "slurm": {"sbatch_args": ["--mem=4G", "-A", "--exclusive"], "gpu_type": "a100",
                  "slots_per_node": 4, "time": "1-12:00:00"},
    }))
    assert cfg.resources.slots_per_trial == 4 and cfg.resources.resource_pool == "gpu"
    assert cfg.resources.max_slots == 8 and cfg.resources.priority == 10
    assert cfg.checkpoint_storage.path == Path("/scratch/ckpt")
    assert (cfg.checkpoint_storage.save_trial_best, cfg.checkpoint_storage.save_trial_latest,
            cfg.checkpoint_storage.save_experiment_best) == (2, 0, 3)
    assert (cfg.environment.image, cfg.environment.image_gpu) == ("c.sif", "g.sif")
    assert cfg.environment.environment_variables == {
        "A": "1", "B": "x=y", "C": "$(echo hi)", "D": ""}
    assert cfg.environment.environment_variables_gpu is None
    assert cfg.bind_mounts[0].host_path == "/data" and cfg.bind_mounts[0].read_only
    assert cfg.slurm.sbatch_args == ("--mem=4G", "-A", "--exclusive")
    assert (cfg.slurm.gpu_type, cfg.slurm.slots_per_node, cfg.slurm.time) == ("a100", 4,
                                                                              "1-12:00:00")


@pytest.mark.parametrize(
    ("storage", "path"),
    [
        ({"type": "shared_fs", "host_path": "/s"}, Path("/s")),
        ({"type": "shared_fs", "host_path": "/s", "storage_path": "/s/x"}, Path("/s/x")),
        ({"type": "directory", "container_path": "/ckpt"}, Path("/ckpt")),
    ],
)
def test_checkpoint_storage_paths(storage: dict[str, Any], path: Path) -> None:
    cfg = parse_experiment_config(patched({"checkpoint_storage": storage}))
    assert cfg.checkpoint_storage.path == path


def test_environment_dict_forms() -> None:
    cfg = parse_experiment_config(patched({"environment": {
        "image": "one.sif",
        "environment_variables": {"cpu": ["A=cpu"], "cuda": ["A=gpu", "B=2"]},
    }}))
    assert cfg.environment.image == "one.sif" and cfg.environment.image_gpu is None
    assert cfg.environment.environment_variables == {"A": "cpu"}
    assert cfg.environment.environment_variables_gpu == {"A": "gpu", "B": "2"}


@pytest.mark.parametrize(("slurm", "expected"), [
    ({}, (None, 1800.0, 3, 3600, 20.0)),
    ({"watchdog": False}, (0, 1800.0, 3, 3600, 20.0)),
    ({"watchdog": {"max_idle_s": "auto", "startup_s": 60}}, (None, 60.0, 3, 3600, 20.0)),
    ({"watchdog": {"max_idle_s": 300}, "bad_nodes": {"failures": 0, "window_s": 60},
      "stragglers": {"behind_pct": 0}}, (300.0, 1800.0, 0, 60, 0.0)),
    ({"stragglers": {"behind_pct": 12.5}}, (None, 1800.0, 3, 3600, 12.5)),
])
def test_dethpc_slurm_settings(slurm: dict[str, Any], expected: tuple[Any, ...]) -> None:
    s = parse_experiment_config(patched({"slurm": slurm})).slurm
    assert (s.watchdog.max_idle_s, s.watchdog.startup_s, s.bad_nodes.failures,
            s.bad_nodes.window_s, s.stragglers.behind_pct) == expected


@pytest.mark.parametrize(("watchdog", "managed", "script"), [
    # (slurm.watchdog) -> watches a managed trial, watches a wrapped script
    (None, True, False),                         # scripts have no heartbeat: opt-in
    (False, False, False),
    ({"max_idle_s": 0, "output": True}, False, False),
    ({"output": True}, True, True),
    ({"max_idle_s": 600, "output": False}, True, False),
])
def test_the_watchdog_watches_scripts_only_when_their_output_is_opted_in(
        watchdog: Any, managed: bool, script: bool) -> None:
    slurm = {} if watchdog is None else {"watchdog": watchdog}
    w = parse_experiment_config(patched({"slurm": slurm})).slurm.watchdog
    assert (w.watches(wrapped_script=False), w.watches(wrapped_script=True)) == (managed, script)


@pytest.mark.parametrize("time", ["90", 90, "10:30", "01:00:00", "100:00:00", "2-0",
                                  "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"])
def test_slurm_time_valid(time: Any) -> None:
    assert parse_experiment_config(patched({"slurm": {"time": time}})).slurm.time == str(time)


# ------------------------------------------------------------------- warnings
@pytest.mark.parametrize(
    ("changes", "warning"),
    [
        ({"workspace": "w"}, "workspace: ignored"),
        ({"project": "p"}, "project: ignored"),
        ({"scheduling_unit": 10}, "scheduling_unit: ignored"),
        ({"perform_initial_validation": True}, "perform_initial_validation: ignored"),
        ({"profiling": {"enabled": True}}, "profiling: ignored"),
        ({"optimizations": {}}, "optimizations: ignored"),
        ({"debug": True}, "debug: ignored"),
        ({"integrations": {}}, "integrations: ignored"),
        ({"log_policies": []}, "log_policies: ignored"),
        ({"retention_policy": {}}, "retention_policy: ignored"),
        ({"pbs": {"pbsbatch_args": []}}, "pbs: ignored: dethpc runs on Slurm"),
        ({"resources.shm_size": 4096}, "resources.shm_size: ignored: Kubernetes-only"),
        ({"resources.devices": []}, "resources.devices: ignored: Kubernetes-only"),
        ({"resources.weight": 1}, "resources.weight: ignored: Kubernetes-only"),
        ({"resources.native_parallel": False}, "resources.native_parallel: ignored"),
        ({"resources.is_single_node": True}, "resources.is_single_node: ignored"),
        ({"environment.pod_spec": {}}, "environment.pod_spec: ignored: Kubernetes-only"),
        ({"environment.registry_auth": {}}, "environment.registry_auth: ignored"),
        ({"environment.force_pull_image": True}, "environment.force_pull_image: ignored"),
        ({"environment.add_capabilities": []}, "environment.add_capabilities: ignored"),
        ({"environment.drop_capabilities": []}, "environment.drop_capabilities: ignored"),
        ({"environment.proxy_ports": []}, "environment.proxy_ports: ignored"),
        ({"searcher.source_trial_id": 3}, "searcher.source_trial_id: deprecated"),
        ({"searcher.source_checkpoint_uuid": "u"}, "searcher.source_checkpoint_uuid: deprecated"),
        ({"searcher.variant": "promotion"}, "searcher.variant: ignored: only used by the "
                                            "adaptive_asha searcher, not by 'random'"),
        ({"bind_mounts": [{"host_path": "/a", "container_path": "/b",
                           "propagation": "rprivate"}]}, "bind_mounts[0].propagation: ignored"),
    ],
)
def test_warnings(changes: dict[str, Any], warning: str) -> None:
    cfg = parse_experiment_config(patched(changes))
    assert any(w.startswith(warning) for w in cfg.warnings), cfg.warnings


# --------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # top level
        ({"serch": {}}, "serch: unknown field 'serch'; did you mean 'searcher'? allowed:"),
        ({"nmae": "x"}, "nmae: unknown field 'nmae'; did you mean 'name'?"),
        ({"zzz_qqq": 1}, "zzz_qqq: unknown field 'zzz_qqq'; allowed: 'name',"),
        ({"name": 5}, "name: expected a non-empty string, got 5"),
        ({"description": 1}, "description: expected a string, got 1"),
        ({"labels": "a"}, "labels: expected a list of strings, got 'a'"),
        ({"labels": ["a", 3]}, "labels[1]: expected a non-empty string, got 3"),
        ({"entrypoint": _DELETE}, "entrypoint: required"),
        ({"entrypoint": 3}, "entrypoint: expected a non-empty string, got 3"),
        ({"entrypoint": ["python", 1]}, "entrypoint[1]: expected a string, got 1"),
        ({"max_restarts": -1}, "max_restarts: expected an integer >= 0, got -1"),
        ({"max_restarts": True}, "max_restarts: expected an integer >= 0, got True"),
        ({"reproducibility": {"experiment_seed": -1}},
         "reproducibility.experiment_seed: expected an integer between 0 and 2147483647, got -1"),
        ({"reproducibility": {"seed": 1}},
         "reproducibility.seed: unknown field 'seed'; did you mean 'experiment_seed'? allowed: "
         "'experiment_seed'"),
        ({"min_validation_period": {"steps": 3}},
         "min_validation_period.steps: unknown unit 'steps'; allowed: 'records', 'batches', "
         "'epochs'"),
        ({"min_checkpoint_period": 0}, "min_checkpoint_period: expected {batches: N}, "
                                       "{records: N} or {epochs: N} with N >= 1"),
        ({"min_checkpoint_period": {"batches": 1, "epochs": 1}},
         "min_checkpoint_period: expected {batches: N}"),
        ({"data": [1]}, "data: expected a mapping, got [1]"),
        # hyperparameters
        ({"hyperparameters": 3}, "hyperparameters: expected a mapping, got 3"),
        ({"hyperparameters.lr": {"type": "lgo", "minval": 1, "maxval": 2}},
         "hyperparameters.lr.type: invalid value 'lgo'; did you mean 'log'? allowed: 'const', "
         "'int', 'double', 'log', 'categorical'"),
        ({"hyperparameters.lr": {"type": "int", "minval": 1.5, "maxval": 2}},
         "hyperparameters.lr.minval: expected an integer, got 1.5"),
        ({"hyperparameters.lr": {"type": "double", "minval": "a", "maxval": 2}},
         "hyperparameters.lr.minval: expected a number, got 'a'"),
        ({"hyperparameters.lr": {"type": "double", "minval": 0}},
         "hyperparameters.lr.maxval: required"),
        ({"hyperparameters.lr": {"type": "double", "minval": 3, "maxval": 2}},
         "hyperparameters.lr: minval (3.0) must be <= maxval (2.0)"),
        ({"hyperparameters.lr": {"type": "int", "minval": 0, "maxval": 2, "count": 0}},
         "hyperparameters.lr.count: expected an integer >= 1, got 0"),
        ({"hyperparameters.lr": {"type": "log", "minval": 0, "maxval": 2, "base": -2}},
         "hyperparameters.lr.base: expected a number > 0 and != 1, got -2"),
        ({"hyperparameters.lr": {"type": "const"}}, "hyperparameters.lr.val: required"),
        ({"hyperparameters.lr": {"type": "double", "minval": 0, "maxval": 1, "vals": [1]}},
         "hyperparameters.lr.vals: unknown field 'vals'; did you mean 'minval'? allowed: 'type', "
         "'minval', 'maxval', 'count'"),
        ({"hyperparameters.g": {"x": {"type": "int", "minval": 2, "maxval": 1}}},
         "hyperparameters.g.x: minval (2) must be <= maxval (1)"),
        # searcher
        ({"searcher": _DELETE}, "searcher: required"),
        ({"searcher": "random"}, "searcher: expected a mapping, got 'random'"),
        ({"searcher.name": "rnadom"}, "searcher.name: invalid value 'rnadom'; did you mean "
                                      "'random'? allowed: 'single', 'random', 'grid', "
                                      "'adaptive_asha'"),
        ({"searcher.name": "asha"}, "searcher.name: invalid value 'asha'; did you mean "
                                    "'adaptive_asha'?"),
        ({"searcher.name": "pbt"}, "searcher.name: the 'pbt' searcher is not supported on dethpc"),
        ({"searcher.name": _DELETE}, "searcher.name: required; allowed: 'single'"),
        ({"searcher.metric": _DELETE}, "searcher.metric: required"),
        ({"searcher.metric": 3}, "searcher.metric: expected a non-empty string, got 3"),
        ({"searcher.smaller_is_better": "yes please"},
         "searcher.smaller_is_better: expected true or false, got 'yes please'"),
        ({"searcher.max_trials": "abc"},
         "searcher.max_trials: expected an integer >= 1, got 'abc'"),
        ({"searcher.max_trials": True}, "searcher.max_trials: expected an integer >= 1, got True"),
        ({"searcher.max_trials": 0}, "searcher.max_trials: expected an integer >= 1, got 0"),
        ({"searcher.max_trials": _DELETE},
         "searcher.max_trials: required by the random searcher"),
        ({"searcher.max_concurrent_trials": -1},
         "searcher.max_concurrent_trials: expected an integer >= 0, got -1"),
        ({"searcher.max_length": {"batchs": 10}},
         "searcher.max_length.batchs: unknown unit 'batchs'; did you mean 'batches'?"),
        ({"searcher.max_length": {"batches": 0}}, "searcher.max_length: expected {batches: N}"),
        ({"searcher.max_length": "100"}, "searcher.max_length: expected {batches: N}"),
        ({"searcher.time_metric": "batches", "searcher.max_time": 10},
         "searcher.time_metric: unknown field 'time_metric'"),
        ({"searcher.max_length": _DELETE, "searcher.time_metric": "batches"},
         "searcher.time_metric: unknown field 'time_metric'"),
        ({"searcher.max_length": _DELETE, "searcher.max_time": 5},
         "searcher.max_time: unknown field 'max_time'"),
        ({"searcher.max_length": _DELETE, "searcher.time_metric": "steps",
          "searcher.max_time": 5},
         "searcher.time_metric: unknown field 'time_metric'"),
        ({"searcher.max_length": _DELETE, "searcher.time_metric": "epochs",
          "searcher.max_time": 0}, "searcher.max_time: expected an integer >= 1, got 0"),
        ({"searcher.maxtrials": 3}, "searcher.maxtrials: unknown field 'maxtrials'; did you "
                                    "mean 'max_trials'?"),
        ({"searcher.name": "adaptive_asha", "searcher.mode": "wild"},
         "searcher.mode: invalid value 'wild'; allowed: 'aggressive', 'standard', "
         "'conservative'"),
        ({"searcher.name": "adaptive_asha", "searcher.divisor": 1},
         "searcher.divisor: expected an integer >= 2, got 1"),
        ({"searcher.name": "adaptive_asha", "searcher.max_rungs": 0},
         "searcher.max_rungs: expected an integer >= 1, got 0"),
        ({"searcher.name": "adaptive_asha", "searcher.bracket_rungs": [1, "x"]},
         "searcher.bracket_rungs[1]: expected an integer >= 1, got 'x'"),
        ({"searcher.name": "adaptive_asha", "searcher.variant": "promote"},
         "searcher.variant: invalid value 'promote'; did you mean 'promotion'?"),
        ({"searcher.stop_grace_s": -5}, "searcher.stop_grace_s: expected an integer >= 0"),
        ({"searcher.name": "grid"}, "hyperparameters.lr.count: required by the grid searcher"),
        # resources
        ({"resources": {"slots_per_trial": 1.0}},
         "resources.slots_per_trial: expected an integer >= 1, got 1.0"),
        ({"resources": {"priority": "high"}}, "resources.priority: expected an integer, "
                                              "got 'high'"),
        ({"resources": {"slot_per_trial": 2}}, "resources.slot_per_trial: unknown field "
                                               "'slot_per_trial'; did you mean 'slots_per_trial'?"),
        # checkpoint storage
        ({"checkpoint_storage": {"type": "gcs"}}, "checkpoint_storage.bucket: required"),
        ({"checkpoint_storage": {"type": "azure"}}, "checkpoint_storage.container: required"),
        ({"checkpoint_storage": {"type": "nfs"}},
         "checkpoint_storage.type: invalid value 'nfs'; allowed: 'shared_fs', 'directory'"),
        ({"checkpoint_storage": {"type": "shared_fs"}}, "checkpoint_storage.host_path: required"),
        ({"checkpoint_storage": {"type": "shared_fs", "host_path": "/a", "storage_path": "/b"}},
         "checkpoint_storage.storage_path: absolute storage_path '/b' must lie inside "
         "host_path '/a'"),
        ({"checkpoint_storage": {"type": "directory"}},
         "checkpoint_storage.container_path: required"),
        ({"checkpoint_storage": {"type": "directory", "container_path": "/c", "host_path": "/x"}},
         "checkpoint_storage.host_path: unknown field 'host_path'"),
        ({"checkpoint_storage": {"type": "shared_fs", "host_path": "/a", "save_trial_best": -1}},
         "checkpoint_storage.save_trial_best: expected an integer >= 0, got -1"),
        # environment
        ({"environment": {"image": 3}}, "environment.image: expected a non-empty string, got 3"),
        ({"environment": {"image": {"cpu": "a", "tpu": "b"}}},
         "environment.image.tpu: unknown field 'tpu'; did you mean 'gpu'? allowed: 'cpu'"),
        ({"environment": {"environment_variables": [{"A": 1}]}},
         "environment.environment_variables[0]: expected 'NAME=value'"),
        ({"environment": {"environment_variables": "A=1"}},
         "environment.environment_variables: expected a list of 'NAME=value' strings"),
        ({"environment": {"imag": "x"}}, "environment.imag: unknown field 'imag'; did you mean "
                                         "'image'?"),
        # bind mounts
        ({"bind_mounts": {"host_path": "/a"}}, "bind_mounts: expected a list of mappings"),
        ({"bind_mounts": ["/a:/b"]}, "bind_mounts[0]: expected a mapping with host_path and "
                                     "container_path, got '/a:/b'"),
        ({"bind_mounts": [{"host_path": "/a", "container_path": "/b"}, {"host_path": "x",
                                                                        "container_path": "/b"}]},
         "bind_mounts[1].host_path: expected an absolute path, got 'x'"),
        ({"bind_mounts": [{"host_path": "/a"}]}, "bind_mounts[0].container_path: required"),
        ({"bind_mounts": [{"host_path": "/a", "container_path": "/b", "read_only": "no"}]},
         "bind_mounts[0].read_only: expected true or false, got 'no'"),
        # slurm
        ({"slurm": {"time": "1:99:00"}}, "slurm.time: invalid Slurm time '1:99:00'; allowed: "
                                         "minutes, MM:SS, HH:MM:SS, D-HH"),
        ({"slurm": {"time": "1-25"}}, "slurm.time: invalid Slurm time '1-25'"),
        ({"slurm": {"time": "1h"}}, "slurm.time: invalid Slurm time '1h'"),
        ({"slurm": {"time": 0}}, "slurm.time: invalid Slurm time 0"),
        ({"slurm": {"slots_per_node": 0}}, "slurm.slots_per_node: expected an integer >= 1"),
        ({"slurm": {"gpu_type": 1}}, "slurm.gpu_type: expected a non-empty string, got 1"),
        ({"slurm": {"sbatch_args": "--mem=1G"}},
         "slurm.sbatch_args: expected a list of strings, got '--mem=1G'"),
        ({"slurm": {"sbatch_argz": []}}, "slurm.sbatch_argz: unknown field 'sbatch_argz'; did "
                                         "you mean 'sbatch_args'?"),
        # dethpc's own slurm settings (docs/reliability.md)
        ({"slurm": {"watchdog": {"max_idle_s": "soon"}}},
         "slurm.watchdog.max_idle_s: expected auto, 0 (off) or seconds, got 'soon'"),
        ({"slurm": {"watchdog": {"startup_s": 0}}}, "slurm.watchdog.startup_s: expected a number"),
        ({"slurm": {"watchdog": {"output": "yes"}}},
         "slurm.watchdog.output: expected true or false, got 'yes'"),
        ({"slurm": {"bad_nodes": {"failures": -1}}},
         "slurm.bad_nodes.failures: expected an integer"),
        ({"slurm": {"bad_nodes": {"window": 60}}}, "slurm.bad_nodes.window: unknown field"),
        ({"slurm": {"stragglers": {"behind_pct": -5}}},
         "slurm.stragglers.behind_pct: expected a number >= 0"),
        ({"slurm": {"stragglers": {"behind": 5}}}, "slurm.stragglers.behind: unknown field"),
        ({"slurm": {"stragglers": 20}}, "slurm.stragglers: expected a mapping"),
    ],
)
def test_errors(changes: dict[str, Any], expected: str) -> None:
    found = errors(patched(changes))
    assert any(e.startswith(expected) for e in found), found


@pytest.mark.parametrize(
    ("arg", "option"),
    [
        ("--array=0-3", "--array"), ("-a", "--array"), ("-a0-3", "--array"),
        ("--output=x", "--output"), ("-o", "--output"), ("--out=x", "--output"),
        ("--error=x", "--error"), ("-e", "--error"), ("--job-name=x", "--job-name"),
        ("-J", "--job-name"), ("-Jname", "--job-name"), ("--comment=c", "--comment"),
        ("--requeue", "--requeue"), ("--no-requeue", "--no-requeue"),
        ("--signal=B:USR1@60", "--signal"), ("--open-mode=append", "--open-mode"),
        ("--parsable", "--parsable"), ("--wrap=ls", "--wrap"),
    ],
)
def test_managed_sbatch_args_rejected(arg: str, option: str) -> None:
    """Determined's schema takes any string here: the config validates with a warning
    and submit refuses the option dethpc manages, naming it."""
    cfg = parse_experiment_config(patched({"slurm": {"sbatch_args": [arg]}}))
    found = [str(e) for e in cfg.unsupported]
    assert found == [f"slurm.sbatch_args[0]: {arg!r} is not allowed: {option} is managed by "
                     f"dethpc; " + found[0].split("; ", 1)[1]]
    assert "dethpc" in found[0].split("; ", 1)[1]
    with pytest.raises(ConfigError, match=r"slurm\.sbatch_args\[0\]"):
        check_supported(cfg)


@pytest.mark.parametrize("arg", ["-A", "--account=x", "--exclusive", "--mem=4G", "-p",
                                 "--qos=high", "--exclude=n1", "--export=ALL", "-N2"])
def test_other_sbatch_args_accepted(arg: str) -> None:
    assert parse_experiment_config(patched({"slurm": {"sbatch_args": [arg]}})).slurm.sbatch_args \
        == (arg,)


def test_all_errors_are_reported_at_once() -> None:
    found = errors(patched({
        "name": 5,
        "searcher.max_trials": "abc",
        "resources": {"slots_per_trial": -1},
        "bind_mounts": [{"host_path": "rel", "container_path": "/b"}],
    }))
    paths = sorted(e.split(":", 1)[0] for e in found)
    assert paths == ["bind_mounts[0].host_path", "name", "resources.slots_per_trial",
                     "searcher.max_trials"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "<root>: expected a mapping with at least entrypoint and searcher; the file is "
               "empty"),
        ([1], "<root>: expected a mapping with at least entrypoint and searcher; got [1]"),
    ],
)
def test_non_mapping_root(raw: Any, expected: str) -> None:
    assert errors(raw) == [expected]


def test_error_source_and_exit_code() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(patched({"name": 5}), source="my.yaml")
    assert info.value.source == "my.yaml" and info.value.exit_code == 2
    assert str(info.value).startswith("my.yaml is invalid (1 error(s)):")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"name": ""}, "name: expected a non-empty string, got ''"),
        ({"entrypoint": []}, "entrypoint: expected a non-empty list of strings (argv), got []"),
        ({"hyperparameters.lr": {"type": "log", "minval": 0, "maxval": 2, "base": 1}},
         "hyperparameters.lr.base: expected a number > 0 and != 1, got 1"),
        ({"hyperparameters.lr": {"type": "categorical", "vals": []}},
         "hyperparameters.lr.vals: expected a non-empty list of values, got []"),
        ({"hyperparameters": {"a.b": 1}}, "hyperparameters.a.b: hyperparameter name 'a.b' may not "
                                     "contain '.'"),
        ({"resources": {"slots_per_trial": 0}},
         "resources.slots_per_trial: expected an integer >= 1, got 0"),
        ({"resources": {"max_slots": 0}}, "resources.max_slots: expected an integer >= 1"),
        ({"resources": {"resource_pool": ""}}, "resources.resource_pool: expected a non-empty "
                                               "string, got ''"),
        ({"checkpoint_storage": {"type": "shared_fs", "host_path": "rel"}},
         "checkpoint_storage.host_path: expected an absolute path, got 'rel'"),
        ({"bind_mounts": [{"host_path": "/a", "container_path": "rel"}]},
         "bind_mounts[0].container_path: expected an absolute path, got 'rel'"),
        ({"entrypoint": "python3 'train.py"},
         "entrypoint: cannot split \"python3 'train.py\" into words like a shell does "
         "(No closing quotation)"),
        ({"environment": {"environment_variables": ["1A=x"]}},
         "environment.environment_variables[0]: expected 'NAME=value' with NAME matching "
         "[A-Za-z_][A-Za-z0-9_]*, got '1A=x'"),
        ({"environment": {"environment_variables": ["NOVALUE"]}},
         "environment.environment_variables[0]: expected 'NAME=value'"),
        ({"environment": {"environment_variables": ["A-B=1"]}},
         "environment.environment_variables[0]: expected 'NAME=value'"),
        ({"environment": {"environment_variables": {"cuda": ["$X=1"]}}},
         "environment.environment_variables.cuda[0]: expected 'NAME=value'"),
        ({"slurm": {"sbatch_args": ["--mem=1G\n#SBATCH --array=1"]}},
         "slurm.sbatch_args[0]: an sbatch option may not contain a line break"),
        ({"slurm": {"sbatch_args": ["mem=1G"]}},
         "slurm.sbatch_args[0]: expected an sbatch option starting with '-', got 'mem=1G'"),
        ({"checkpoint_storage": {"type": "s3", "bucket": "b"}},
         "checkpoint_storage.type: checkpoint storage type 's3' is valid in Determined but"),
        ({"checkpoint_storage": {"type": "gcs", "bucket": "b"}},
         "checkpoint_storage.type: checkpoint storage type 'gcs'"),
        ({"checkpoint_storage": {"type": "azure", "container": "c", "account_url": "u"}},
         "checkpoint_storage.type: checkpoint storage type 'azure'"),
        ({"searcher": {"name": "adaptive_asha", "metric": "m", "max_trials": 2,
                       "time_metric": "steps", "max_time": 5}},
         "searcher.time_metric: time_metric 'steps': dethpc measures"),
    ],
)
def test_valid_in_determined_but_refused_at_submit(changes: dict[str, Any],
                                                   expected: str) -> None:
    """Determined accepts these; dethpc cannot serve them: a warning naming the field,
    then ``check_supported`` (what submit calls) refuses with the field path."""
    cfg = parse_experiment_config(patched(changes))
    path, _, message = expected.partition(": ")
    assert any(e.path == path and message in e.message for e in cfg.unsupported), \
        cfg.unsupported
    assert any(w.startswith(path + ":") and "submit` refuses it" in w for w in cfg.warnings)
    with pytest.raises(ConfigError) as info:
        check_supported(cfg)
    assert info.value.exit_code == 2 and path in str(info.value)


# ---------------------------------------------------------------------- files
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def test_load_with_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, dump_config(base()))
    cfg = load_experiment_config(path, ["searcher.max_trials=8", "hyperparameters.lr=0.1",
                                        "labels=[a,b]", "slurm.time=1:30:00"])
    assert cfg.searcher.max_trials == 8
    assert cfg.hyperparameters == {"lr": ConstHP(0.1)}
    assert cfg.labels == ("a", "b")
    assert cfg.slurm.time == "1:30:00"
    assert cfg.raw["searcher"]["max_trials"] == 8 and cfg.raw["slurm"] == {"time": "1:30:00"}


def test_yaml_numbers_follow_yaml_1_2(tmp_path: Path) -> None:
    raw = base()
    del raw["hyperparameters"]
    path = write(tmp_path, dump_config(raw) + "slurm:\n  time: 1:30:00\n"
                 "hyperparameters:\n  lr: 1e-3\n")
    cfg = load_experiment_config(path)
    assert cfg.slurm.time == "1:30:00"  # not the base-60 integer 5400
    assert cfg.hyperparameters == {"lr": ConstHP(0.001)}


def test_dump_round_trips_strings_that_look_like_numbers() -> None:
    raw = {"a": "1e-3", "b": "1:30:00", "c": 1e-3, "d": "08", "e": "true", "f": [1, "x"]}
    import yaml  # plain PyYAML must read the same values back, too

    from dethpc.config._yaml import load_yaml_text
    text = dump_config(raw)
    assert load_yaml_text(text, "t") == raw
    assert yaml.safe_load(text) == raw


def test_dump_keeps_key_order() -> None:
    assert dump_config({"z": 1, "a": 2}).splitlines() == ["z: 1", "a: 2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed\n", "<root>: invalid YAML at line 2, column 1"),
        ("a: b\n  c: d\n", "<root>: invalid YAML at line 2, column 4: mapping values are not "
                           "allowed here"),
        ("", "<root>: expected a mapping with at least entrypoint and searcher; the file is "
             "empty"),
        ("name: a\nsearcher: {}\nname: b\n", "<root>: invalid YAML at line 3, column 1: "
                                               "duplicate key 'name' (first defined at line 1)"),
    ],
)
def test_load_bad_yaml(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_experiment_config(path)
    assert info.value.source == str(path)
    assert str(info.value.errors[0]).startswith(expected), info.value.errors


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_experiment_config(tmp_path / "nope.yaml")
    assert [str(e) for e in info.value.errors] == ["<root>: file not found"]


def test_load_bad_override_is_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, dump_config(base()))
    with pytest.raises(ConfigError) as info:
        load_experiment_config(path, ["name.x=1"])
    assert info.value.source == "--config overrides"


def test_override_validated_after_apply(tmp_path: Path) -> None:
    path = write(tmp_path, dump_config(base()))
    with pytest.raises(ConfigError) as info:
        load_experiment_config(path, ["searcher.max_trials=abc"])
    assert [str(e) for e in info.value.errors] == [
        "searcher.max_trials: expected an integer >= 1, got 'abc'"]


@pytest.mark.parametrize(("entries", "bad"), [
    (["UID=1"], "environment.environment_variables[0]"),
    (["A=1", "_=x"], "environment.environment_variables[1]"),
    (["BASH_ENV=/tmp/x"], "environment.environment_variables[0]"),
    (["PWD=/"], "environment.environment_variables[0]"),
    ({"cpu": ["A=1"], "cuda": ["SECONDS=3"]}, "environment.environment_variables.cuda[0]"),
    (["UIDX=1", "MY_PWD=/", "bash_lower=1"], None),
])
def test_environment_variables_bash_owns_are_refused(entries: Any, bad: str | None) -> None:
    """A name bash sets itself or keeps read-only cannot reach the trial (``export
    UID=1`` fails the job script). Determined accepts it, so validation warns and
    ``submit`` refuses it, naming the entry."""
    cfg = parse_experiment_config(patched({"environment": {"environment_variables": entries}}))
    if bad is None:
        assert not cfg.unsupported and cfg.environment.environment_variables
        return
    assert [e.path for e in cfg.unsupported] == [bad]
    with pytest.raises(ConfigError) as info:
        check_supported(cfg)
    assert bad in str(info.value) and "set by bash itself" in str(info.value)
