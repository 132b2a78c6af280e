"""Cluster config: lookup order, defaults, pool validation, examples, round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import cluster as cluster_mod
from dethpc.config import (
    cluster_to_dict,
    dump_config,
    load_cluster_config,
    locate,
    parse_cluster_config,
)
from dethpc.config.model import RequeueMode, ResourcePool

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DETHPC_CLUSTER_CONFIG", raising=False)
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(locate, "SYSTEM_PATH", tmp_path / "etc" / "cluster.yaml")


def errors(raw: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_cluster_config(raw, "c.yaml")
    assert info.value.source == "c.yaml"
    return [str(e) for e in info.value.errors]


def test_builtin_defaults(tmp_path: Path) -> None:
    cfg = load_cluster_config()
    assert cfg.backend == "local"
    assert cfg.runs_root == tmp_path / "home" / "runs"
    assert cfg.database_url == ""
    assert cfg.pools == {"default": ResourcePool(name="default")}
    assert cfg.pool(None).name == "default"
    assert cfg.source == "<built-in defaults>"


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "etc" / "cluster.yaml"
    system.parent.mkdir()
    system.write_text("backend: slurm\n")
    assert load_cluster_config().source == str(system)
    env = tmp_path / "env.yaml"
    env.write_text("backend: local\n")
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(env))
    assert load_cluster_config().source == str(env)
    arg = tmp_path / "arg.yaml"
    arg.write_text("{}\n")
    assert load_cluster_config(arg).source == str(arg)


def test_env_pointing_to_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError) as info:
        load_cluster_config()
    assert [str(e) for e in info.value.errors] == [
        "<root>: file not found (named by $DETHPC_CLUSTER_CONFIG)"]


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "cluster.yaml"
    path.parent.mkdir()
    path.write_text("runs_root: runs\ncontainers: {sif_cache: ~/sif}\n")
    cfg = load_cluster_config(path)
    assert cfg.runs_root == tmp_path / "conf" / "runs"
    assert cfg.containers.sif_cache == Path("~/sif").expanduser()


def test_yaml_error_has_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pools:\n  a: [\n")
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    assert str(info.value.errors[0]).startswith("<root>: invalid YAML at line 3")


@pytest.mark.parametrize("name", ["local.yaml", "slurm.yaml"])
def test_examples_load_and_round_trip(name: str) -> None:
    cfg = load_cluster_config(REPO / "examples" / "cluster" / name)
    again = parse_cluster_config(cluster_to_dict(cfg), cfg.source)
    assert again == cfg
    assert "source" not in dump_config(cluster_to_dict(cfg))


def test_slurm_example_pools() -> None:
    cfg = load_cluster_config(REPO / "examples" / "cluster" / "slurm.yaml")
    assert cfg.backend == "slurm"
    assert {n: p.partition for n, p in cfg.pools.items()} == {
        "debug": "debug", "low": "low", "high": "high"}
    assert cfg.default_pool == "low"
    assert cfg.pools["high"].signal == "USR2"
    assert cfg.pools["low"].preemptible and cfg.pools["low"].gres == "gpu"


@pytest.mark.parametrize(
    ("raw", "attr", "expected"),
    [
        ({"pools": {"gpu": {}}}, "default_pool", "gpu"),
        ({"pools": {"a": {}, "default": {}}}, "default_pool", "default"),
        ({"backend": "slurm"}, "backend", "slurm"),
        ({"database_url": "postgresql://x/y"}, "database_url", "postgresql://x/y"),
        ({"local_max_concurrent": 4}, "local_max_concurrent", 4),
        ({"command_timeout_s": 5}, "command_timeout_s", 5.0),
        ({"command_retries": 0}, "command_retries", 0),
        ({"tick_min_s": 1, "tick_max_s": 1}, "tick_max_s", 1.0),
        ({"python": "/opt/py/bin/python"}, "python", "/opt/py/bin/python"),
        ({"runs_root": "/abs/runs"}, "runs_root", Path("/abs/runs")),
    ],
)
def test_valid_top_level(raw: dict[str, Any], attr: str, expected: Any) -> None:
    assert getattr(parse_cluster_config(raw), attr) == expected


@pytest.mark.parametrize(
    ("spec", "attr", "expected"),
    [
        ({"signal": "SIGUSR1"}, "signal", "USR1"),
        ({"signal": "usr2"}, "signal", "USR2"),
        ({"signal": "TERM"}, "signal", "TERM"),
        ({"signal": "URG"}, "signal", "URG"),
        ({"mem_per_slot": "500M"}, "mem_per_slot", "500M"),
        ({"mem_per_slot": 4096}, "mem_per_slot", "4096"),
        ({"default_time": "2-00:00:00"}, "default_time", "2-00:00:00"),
        ({"default_time": 60}, "default_time", "60"),
        ({"sbatch_args": ["--exclusive"]}, "sbatch_args", ("--exclusive",)),
        ({"preemptible": True}, "preemptible", True),
        ({"signal_grace_s": 0}, "signal_grace_s", 0),
        ({}, "requeue", RequeueMode.NORMAL),
        ({"requeue": "expedite"}, "requeue", RequeueMode.EXPEDITE),
    ],
)
def test_valid_pool_fields(spec: dict[str, Any], attr: str, expected: Any) -> None:
    cfg = parse_cluster_config({"pools": {"p": spec}})
    assert getattr(cfg.pools["p"], attr) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([1], "<root>: expected a mapping, got [1]"),
        ({"backend": "k8s"}, "backend: invalid value 'k8s'; allowed: 'local', 'slurm'"),
        ({"backnd": "slurm"}, "backnd: unknown field 'backnd'; did you mean 'backend'?"),
        ({"runs_root": 3}, "runs_root: expected a non-empty string, got 3"),
        ({"pools": []}, "pools: expected a mapping, got []"),
        ({"pools": {}}, "pools: expected at least one pool, got {}"),
        ({"pools": {"bad name": {}}}, "pools.bad name: pool names are letters"),
        ({"pools": {"a": {}, "b": {}}}, "default_pool: 'default' is not a pool; allowed: 'a', "
                                        "'b'"),
        ({"default_pool": "gpu"}, "default_pool: 'gpu' is not a pool; allowed: 'default'"),
        ({"pools": {"p": {"partiton": "x"}}}, "pools.p.partiton: unknown field 'partiton'; did "
                                              "you mean 'partition'?"),
        ({"pools": {"p": {"slots_per_node": 0}}}, "pools.p.slots_per_node: expected an integer "
                                                  ">= 1, got 0"),
        ({"pools": {"p": {"cpus_per_slot": True}}}, "pools.p.cpus_per_slot: expected an "
                                                    "integer >= 1, got True"),
        ({"pools": {"p": {"mem_per_slot": "lots"}}}, "pools.p.mem_per_slot: expected a Slurm "
                                                     "memory size like '2G'"),
        ({"pools": {"p": {"preemptible": "yes!"}}}, "pools.p.preemptible: expected true or "
                                                    "false, got 'yes!'"),
        ({"pools": {"p": {"default_time": "1:2:3:4"}}}, "pools.p.default_time: invalid Slurm "
                                                        "time '1:2:3:4'"),
        ({"pools": {"p": {"signal": "USR3"}}}, "pools.p.signal: invalid signal 'USR3'; expected "
                                               "a signal name such as USR1, USR2, TERM"),
        ({"pools": {"p": {"signal": "KILL"}}}, "pools.p.signal: invalid signal 'KILL'"),
        ({"pools": {"p": {"signal": 10}}}, "pools.p.signal: invalid signal 10"),
        ({"pools": {"p": {"signal_grace_s": -1}}}, "pools.p.signal_grace_s: expected an "
                                                   "integer >= 0, got -1"),
        ({"pools": {"p": {"socket_ifname": 0}}}, "pools.p.socket_ifname: expected a non-empty "
                                                 "string"),
        ({"pools": {"p": {"sbatch_args": ["--signal=USR1@9"]}}},
         "pools.p.sbatch_args[0]: '--signal=USR1@9' is not allowed: --signal is managed"),
        ({"pools": {"p": {"sbatch_args": [3]}}}, "pools.p.sbatch_args[0]: expected a non-empty "
                                                 "string, got 3"),
        ({"pools": {"p": 3}}, "pools.p: expected a mapping, got 3"),
        ({"pools": {"p": {"requeue": "fast"}}}, "pools.p.requeue: invalid value 'fast'; "
                                                "allowed: 'normal', 'expedite'"),
        ({"containers": {"runtime": "docker"}}, "containers.runtime: invalid value 'docker'; "
                                                "allowed: 'none', 'apptainer', 'singularity'"),
        ({"containers": {"binds": "/a:/b"}}, "containers.binds: expected a list of strings"),
        ({"containers": {"sif": "/x"}}, "containers.sif: unknown field 'sif'"),
        ({"local_max_concurrent": -1}, "local_max_concurrent: expected an integer >= 0, got -1"),
        ({"command_timeout_s": 0}, "command_timeout_s: expected a number > 0, got 0"),
        ({"command_retries": 1.5}, "command_retries: expected an integer >= 0, got 1.5"),
        ({"tick_min_s": 5, "tick_max_s": 1}, "tick_max_s: must be >= tick_min_s (5.0), got 1.0"),
        ({"python": ""}, "python: expected a non-empty string, got ''"),
    ],
)
def test_errors(raw: Any, expected: str) -> None:
    found = errors(raw)
    assert any(e.startswith(expected) for e in found), found


def test_pool_lookup_error_names_allowed_pools() -> None:
    cfg = parse_cluster_config({"pools": {"a": {}, "b": {}}, "default_pool": "a"})
    with pytest.raises(ConfigError) as info:
        cfg.pool("c")
    assert "unknown resource pool 'c'; allowed: a, b" in str(info.value)


def _slurm_install(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "opt" / "slurm" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "sbatch").write_text("#!/bin/sh\n")
    conf = tmp_path / "opt" / "slurm" / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=x\n")
    return bin_dir, conf


def test_slurm_bin_and_conf_are_relative_to_the_file_and_round_trip(tmp_path: Path) -> None:
    bin_dir, conf = _slurm_install(tmp_path)
    path = tmp_path / "cluster.yaml"
    path.write_text("backend: slurm\nslurm_bin: opt/slurm/bin\n"
                    "slurm_conf: opt/slurm/etc/slurm.conf\n")
    cfg = load_cluster_config(path)
    assert (cfg.slurm_bin, cfg.slurm_conf) == (bin_dir, conf)
    again = parse_cluster_config(cluster_to_dict(cfg), "again")
    assert (again.slurm_bin, again.slurm_conf) == (bin_dir, conf)


def test_a_slurm_bin_without_sbatch_or_a_missing_slurm_conf_is_refused(tmp_path: Path) -> None:
    out = errors({"slurm_bin": str(tmp_path), "slurm_conf": str(tmp_path / "nope.conf")})
    assert any(e.startswith("slurm_bin") and "holds no sbatch" in e and "allowed:" in e
               for e in out), out
    assert any(e.startswith("slurm_conf") and "is not a file" in e for e in out), out


@pytest.mark.parametrize(("bin_dir", "conf", "path", "want"), [
    # nothing named: nothing changes
    (None, None, "/usr/bin:/bin", {}),
    # the directory goes first, once
    ("/opt/s/bin", None, "/usr/bin:/opt/s/bin:/bin", {"PATH": "/opt/s/bin:/usr/bin:/bin"}),
    # already first, and SLURM_CONF already this: nothing to set
    ("/opt/s/bin", "/etc/s.conf", "/opt/s/bin:/usr/bin", {}),
    ("/opt/s/bin", "/etc/t.conf", "/usr/bin",
     {"PATH": "/opt/s/bin:/usr/bin", "SLURM_CONF": "/etc/t.conf"}),
    (None, "/etc/t.conf", "/usr/bin", {"SLURM_CONF": "/etc/t.conf"}),
])
def test_slurm_client_env(bin_dir: str | None, conf: str | None, path: str,
                          want: dict[str, str]) -> None:
    from dethpc.config.model import ClusterConfig

    named = ClusterConfig(slurm_bin=Path(bin_dir) if bin_dir else None,
                          slurm_conf=Path(conf) if conf else None)
    environ = {"PATH": path, "SLURM_CONF": "/etc/s.conf"}
    assert cluster_mod.slurm_client_env(named, environ) == want
