"""dethpc.backends.slurm_detect: the pure pieces (which partition, what pool, where runs go,
when the cache holds) and ``detect``'s order of events, with a scripted runner (Slurm's
own answers are tried on the dev cluster: tests/slurm/test_zero_config_slurm.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.backends import slurm_detect as sd
from dethpc.common.errors import CommandError
from dethpc.common.runner import CommandResult
from dethpc.config.cluster import load_cluster_config, parse_cluster_config

SINFO_CASES = [
    # (sinfo text, partition, cpus, gpus, nodes)
    ("debug*|16|64000|(null)|4\nlow|16|64000|(null)|4\n", "debug", 16, 0, 4),
    ("cpu|64|1|(null)|10\ngpu*|32|1|gpu:a100:4(S:0-1)|2\ngpu*|48|1|gpu:a100:8|1\n",
     "gpu", 32, 4, 3),
    ("a|8|1|(null)|1\nb|4|1|(null)|1\n", "a", 8, 0, 1),       # no default: the first
    ("gpu*|16+|1|gpu:2|3\n", "gpu", 16, 2, 3),
]


@pytest.mark.parametrize("text,name,cpus,gpus,nodes", SINFO_CASES)
def test_default_partition(text: str, name: str, cpus: int, gpus: int, nodes: int) -> None:
    assert sd.default_partition(text) == sd.DefaultPartition(name, cpus, gpus, nodes)


def test_no_partition_is_none() -> None:
    assert sd.default_partition("") is None


def facts(**kw: Any) -> sd.SlurmFacts:
    base = dict(cluster_name="c", slurm_conf="/etc/slurm/slurm.conf", partition="debug",
                cpus_per_node=16, gpus_per_node=0, nodes=4)
    return sd.SlurmFacts(**{**base, **kw})


DERIVE_CASES = [
    (facts(), {"partition": "debug", "slots_per_node": 16, "cpus_per_slot": 1}),
    (facts(account="ml", qos="limited"),
     {"partition": "debug", "account": "ml", "qos": "limited", "slots_per_node": 16,
      "cpus_per_slot": 1}),
    (facts(partition="gpu", cpus_per_node=32, gpus_per_node=4),
     {"partition": "gpu", "gres": "gpu", "slots_per_node": 4, "cpus_per_slot": 8}),
]


@pytest.mark.parametrize("given,pool", DERIVE_CASES)
def test_derive(given: sd.SlurmFacts, pool: dict[str, Any], tmp_path: Path) -> None:
    raw = sd.derive(given, {}, tmp_path)
    assert raw == {"backend": "slurm", "runs_root": str(tmp_path / "runs"),
                   "default_pool": given.partition, "pools": {given.partition: pool}}
    cfg = parse_cluster_config(raw, "<detected from Slurm>")   # a valid cluster config
    assert cfg.backend == "slurm" and cfg.pool(None).partition == given.partition


def test_runs_root_prefers_scratch_then_work(tmp_path: Path) -> None:
    scratch, work = tmp_path / "scratch", tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    assert sd.runs_root({"SCRATCH": str(scratch), "WORK": str(work)}, home) == \
        str(work / "dethpc-runs")                    # $SCRATCH not a directory: skipped
    scratch.mkdir()
    assert sd.runs_root({"SCRATCH": str(scratch), "WORK": str(work)}, home) == \
        str(scratch / "dethpc-runs")
    assert sd.runs_root({}, home) == str(home / "runs")


def test_cache_holds_while_slurm_conf_is_unchanged(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\n")
    cached = {"facts": {"slurm_conf": str(conf)}, "conf_mtime": conf.stat().st_mtime,
              "probed_at": 0.0}
    assert sd.cache_valid(cached, {}, now=1e9)
    assert not sd.cache_valid(cached, {"SLURM_CONF": "/other/slurm.conf"}, now=1e9)
    os.utime(conf, (1.0, 1.0))
    assert not sd.cache_valid(cached, {}, now=1e9)
    configless = {"facts": {"slurm_conf": ""}, "probed_at": 1000.0}
    assert sd.cache_valid(configless, {}, now=1000.0 + sd.CONFIGLESS_TTL_S - 1)
    assert not sd.cache_valid(configless, {}, now=1000.0 + sd.CONFIGLESS_TTL_S + 1)


class Scripted:
    """Answers argv prefixes with scripted results; records the calls."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.answers, self.calls = answers, []

    def run(self, argv: list[str], *, check: bool = True, retry: bool = True,
            **_: Any) -> CommandResult:
        self.calls.append(" ".join(argv))
        for prefix, (code, out) in self.answers.items():
            if " ".join(argv).startswith(prefix):
                if code and check:
                    raise CommandError(tuple(argv), code, out, "")
                return CommandResult(tuple(argv), code, out, "")
        raise CommandError(tuple(argv), None, reason="could not be started")


def slurm(conf: Path, ping: tuple[int, str] = (0, "Slurmctld(primary) at h is UP\n"),
          accounting: bool = True) -> Scripted:
    answers = {"scontrol ping": ping,
               "scontrol show config": (0, f"ClusterName = dev\nSLURM_CONF = {conf}\n"),
               "sinfo": (0, "debug*|16|1|(null)|4\n")}
    if accounting:
        answers["sacctmgr -n -P show user"] = (0, "ml-team|\n")
        answers["sacctmgr -n -P show assoc"] = (0, "limited|\n")
    return Scripted(answers)


def on_path(name: str) -> str | None:
    return f"/usr/bin/{name}"


def test_detect_probes_once_caches_and_says_it_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sd.shutil, "which", on_path)
    conf = tmp_path / "slurm.conf"
    conf.write_text("x")
    said: list[str] = []
    runner = slurm(conf)
    raw = sd.detect(tmp_path / "home", {"USER": "u"}, runner, said.append)  # type: ignore[arg-type]
    assert raw is not None and raw["pools"]["debug"]["account"] == "ml-team"
    assert raw["pools"]["debug"]["qos"] == "limited"
    assert len(said) == 1 and "partition debug (account ml-team, qos limited)" in said[0]
    assert "sacctmgr -n -P show user u format=defaultaccount" in runner.calls
    cached = yaml.safe_load((tmp_path / "home" / sd.CACHE_NAME).read_text())
    assert cached["config"] == raw and cached["facts"]["cluster_name"] == "dev"
    # the second call reads the cache: no command, nothing said
    again = Scripted({})
    assert sd.detect(tmp_path / "home", {"USER": "u"}, again, said.append) == raw  # type: ignore[arg-type]
    assert again.calls == [] and len(said) == 1


def test_detect_without_accounting_leaves_account_and_qos_to_slurm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sd.shutil, "which", on_path)
    raw = sd.detect(tmp_path, {"USER": "u"}, slurm(tmp_path / "none", accounting=False),  # type: ignore[arg-type]
                    lambda _: None)
    assert raw is not None and set(raw["pools"]["debug"]) == {"partition", "slots_per_node",
                                                              "cpus_per_slot"}


@pytest.mark.parametrize("which,ping,warned", [
    (lambda _: None, (0, "UP"), False),                              # no Slurm at all
    (on_path, (1, "Slurmctld(primary) at h is DOWN\n"), True),       # controller away
])
def test_detect_falls_back_to_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    which: Any, ping: tuple[int, str], warned: bool) -> None:
    monkeypatch.setattr(sd.shutil, "which", which)
    said: list[str] = []
    assert sd.detect(tmp_path, {"USER": "u"}, slurm(tmp_path, ping=ping), said.append) is None  # type: ignore[arg-type]
    assert bool(said) is warned and not (tmp_path / sd.CACHE_NAME).exists()


def test_detect_off_probes_nothing(tmp_path: Path) -> None:
    runner = Scripted({})
    assert sd.detect(tmp_path, {"DETHPC_DETECT": "0"}, runner) is None  # type: ignore[arg-type]
    assert runner.calls == []


def test_precedence_file_beats_detection_user_beats_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dethpc.config import cluster as cc
    from dethpc.config import locate

    monkeypatch.delenv("DETHPC_CLUSTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    site = tmp_path / "site.yaml"
    monkeypatch.setattr(locate, "SYSTEM_PATH", site)
    detected = {"backend": "slurm", "runs_root": str(tmp_path / "r"), "default_pool": "p",
                "pools": {"p": {"partition": "p"}}}
    assert load_cluster_config(detect=lambda: detected).source == cc.DETECTED
    assert load_cluster_config(detect=lambda: None).source == cc.BUILTIN
    site.write_text("backend: local\n")
    assert load_cluster_config(detect=lambda: detected).source == str(site)
    user = tmp_path / "xdg" / "dethpc" / "cluster.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("backend: local\n")
    assert load_cluster_config(detect=lambda: detected).source == str(user)
    env = tmp_path / "env.yaml"
    env.write_text("backend: local\n")
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(env))
    assert load_cluster_config(detect=lambda: detected).source == str(env)
