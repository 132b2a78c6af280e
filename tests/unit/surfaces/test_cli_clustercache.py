"""``dethpc.surfaces.cli.clustercache``: the read path's saved copy of the cluster config's
facts is used only while the file and everything its validation read are the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config.cluster import load_cluster_config
from dethpc.config.model import ClusterConfig
from dethpc.surfaces.cli import clustercache
from dethpc.surfaces.cli.clustercache import ReadFacts, read_facts


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("DETHPC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DETHPC_CLUSTER_CONFIG", raising=False)


class Loads:
    """``load`` for ``read_facts``: the real load of ``path``, counted."""

    def __init__(self, path: Path) -> None:
        self.path, self.calls = path, 0

    def __call__(self) -> ClusterConfig:
        self.calls += 1
        return load_cluster_config(self.path)


def rewrite(path: Path, text: str) -> None:
    """``text`` into ``path`` with the size and mtime it had: only the bytes differ (an
    edit within the file system's timestamp granularity)."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_saved_facts_are_used_until_the_file_changes(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: local\n")
    load = Loads(cfg)
    first = read_facts(str(cfg), load)
    assert first == ReadFacts.of(load_cluster_config(cfg))
    assert (first.backend, first.own_database) == ("local", False)
    assert read_facts(str(cfg), load) == first               # the sbatch site too
    assert load.calls == 1                                   # the second from the copy
    rewrite(cfg, "backend: slurm\n")
    assert read_facts(str(cfg), load) == ReadFacts.of(load_cluster_config(cfg))
    assert read_facts(str(cfg), load).backend == "slurm"
    assert load.calls == 2                                   # a stale copy would say local
    cfg.write_text("backend: local\ndatabase_url: postgresql://db.example/dethpc\n")
    assert read_facts(str(cfg), load).own_database
    assert load.calls == 3


def test_the_sbatch_site_comes_back_from_the_copy(tmp_path: Path) -> None:
    """What ``dethpc sbatch`` reads of the config (its pools' partitions and signals, the
    runs root, the Slurm client), from the saved copy as the full load makes it."""
    from dethpc.surfaces.sbatchwrap.site import SbatchSite

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"backend: slurm\nruns_root: {tmp_path}/runs\nruns_mode: group\n"
                   f"python: /opt/py\nslurm_conf: {conf}\ndefault_pool: b\npools:\n"
                   "  a: {partition: p1, signal: USR1, signal_grace_s: 30}\n"
                   "  b: {partition: p2}\n")
    load = Loads(cfg)
    want = SbatchSite.of(load_cluster_config(cfg))
    read_facts(str(cfg), load)
    saved = read_facts(str(cfg), load)
    assert load.calls == 1 and saved.sbatch == want
    assert want.pool_for("p0,p1").name == "a" and want.pool_for("p9").name == "b"
    assert (want.runs_mode, want.python, want.slurm_conf) == ("group", "/opt/py", str(conf))


def test_an_invalid_config_is_loaded_and_refused_each_time(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: local\n")
    load = Loads(cfg)
    read_facts(str(cfg), load)
    rewrite(cfg, "backend: lokal\n")
    for calls in (2, 3):
        with pytest.raises(ConfigError, match="backend"):
            read_facts(str(cfg), load)
        assert load.calls == calls


def test_a_file_the_validation_checked_must_still_exist(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"backend: local\nslurm_conf: {conf}\n")
    load = Loads(cfg)
    read_facts(str(cfg), load)
    read_facts(str(cfg), load)
    assert load.calls == 1
    conf.unlink()
    with pytest.raises(ConfigError, match="slurm_conf"):
        read_facts(str(cfg), load)


def test_the_lookup_and_the_validating_code_are_in_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "xdg" / "dethpc" / "cluster.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("backend: local\n")
    other = tmp_path / "other.yaml"
    other.write_text("backend: slurm\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))

    def load() -> ClusterConfig:
        loads.append(1)
        return load_cluster_config(None)

    loads: list[int] = []
    assert read_facts(None, load).backend == "local"
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(other))       # another file found
    assert read_facts(None, load).backend == "slurm"
    assert read_facts(None, load).backend == "slurm"
    assert len(loads) == 2
    sources = tmp_path / "config-sources"
    sources.mkdir()
    (sources / "cluster.py").write_text("# v1\n")
    monkeypatch.setattr(clustercache, "_CONFIG_DIR", str(sources))
    read_facts(None, load)
    read_facts(None, load)
    assert len(loads) == 3
    (sources / "cluster.py").write_text("# v2, longer\n")        # dethpc's code changed
    read_facts(None, load)
    assert len(loads) == 4


def test_nothing_is_saved_without_a_file(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection may probe Slurm and say so each time: never answered from a copy."""
    from dethpc.config import locate

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(locate, "SYSTEM_PATH", tmp_path / "etc" / "cluster.yaml")
    loads: list[int] = []

    def load() -> ClusterConfig:
        loads.append(1)
        return load_cluster_config(None)

    for _ in range(2):
        assert read_facts(None, load).backend == "local"
    assert len(loads) == 2 and not (tmp_path / "cache").exists()
