"""Several dev clusters on one host (dethpc.devcluster.lanes): lane 1 is today's
cluster, unchanged; every other lane differs from it in everything a cluster owns
(names, ports, directories, slurm.conf, accounting database) and shares only what
the host's clusters share (MariaDB, munged, the image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.devcluster import image, lanes
from dethpc.devcluster.layout import DevClusterLayout, render_configs

BASE = Path("/x/state")


def test_lane_one_is_the_cluster_at_etc_slurm() -> None:
    one = lanes.lane_layout(1, BASE)
    assert one == DevClusterLayout(state_dir=BASE)
    assert (one.slurm_conf, one.cluster_name, one.node_names, one.nodelist) == (
        Path("/etc/slurm/slurm.conf"), "devcluster", ["n1", "n2", "n3", "n4"], "n[1-4]")
    assert (one.ctld_port, one.dbd_port, [n.port for n in one.nodes], one.db_name) == (
        6817, 6819, [7001, 7002, 7003, 7004], "slurm_acct_db")
    assert one.shared == BASE and one.site.gres.nodes == ("n1", "n2")


def test_lane_two_owns_its_names_ports_dirs_and_database() -> None:
    one, two = lanes.lane_layout(1, BASE), lanes.lane_layout(2, BASE)
    assert two.lane == 2 and two.cluster_name == "devcluster2"
    assert two.node_names == ["l2n1", "l2n2", "l2n3", "l2n4"] and two.nodelist == "l2n[1-4]"
    assert (two.ctld_port, two.dbd_port, [n.port for n in two.nodes]) == (
        6827, 6829, [7011, 7012, 7013, 7014])
    assert two.slurm_conf == Path("/etc/slurm-lane2/slurm.conf")
    assert two.state_dir == Path("/x/state-lane2") and two.db_name == "slurm_acct_db_lane2"
    assert two.site.gres.nodes == ("l2n1", "l2n2")
    # nothing a cluster owns is shared: ports, node names, files, directories
    ports = {one.ctld_port, one.dbd_port, *(n.port for n in one.nodes)}
    assert not ports & {two.ctld_port, two.dbd_port, *(n.port for n in two.nodes)}
    assert not set(one.node_names) & set(two.node_names)
    for path in ("slurm_conf", "gres_conf", "slurmdbd_conf", "run_dir", "log_dir", "dev_dir",
                 "lock_file"):
        assert getattr(one, path) != getattr(two, path), path
    assert not str(two.state_dir).startswith(f"{one.state_dir}/")  # `down` sweeps by prefix
    assert one.owner_marker != two.owner_marker
    # what the host's clusters share
    for path in ("mysql_dir", "mysql_socket", "db_password_file", "shared_lock_file"):
        assert getattr(one, path) == getattr(two, path), path
    assert one.db_port == two.db_port and one.pid_file("mariadbd") == two.pid_file("mariadbd")
    assert image.image_path(two) == image.image_path(one) == BASE / "images" / image.IMAGE_NAME


def test_lane_two_renders_its_own_config() -> None:
    two = lanes.lane_layout(2, BASE)
    confs = {p: text for p, text in render_configs(two, "pw").items()}
    conf = confs[Path("/etc/slurm-lane2/slurm.conf")]
    lines = conf.splitlines()
    assert "ClusterName=devcluster2" in lines and "SlurmctldPort=6827" in lines
    assert "AccountingStoragePort=6829" in lines
    assert "SlurmdSpoolDir=/x/state-lane2/spool/%n" in lines
    assert ("NodeName=l2n1 NodeHostname=" in conf and "Port=7011" in conf
            and "Gres=gpu:a100:2" in conf)
    assert "PartitionName=low Nodes=l2n[1-4]" in conf
    assert "NodeName=l2n1,l2n2 Name=gpu Type=a100 File=/x/state-lane2/dev/nvidia[0-1]" in \
        confs[Path("/etc/slurm-lane2/gres.conf")]
    dbd = confs[Path("/etc/slurm-lane2/slurmdbd.conf")].splitlines()
    assert "DbdPort=6829" in dbd and "StorageLoc=slurm_acct_db_lane2" in dbd
    assert "StoragePort=13306" in dbd and "PidFile=/x/state-lane2/run/slurmdbd.pid" in dbd


def test_the_lane_of_a_process_and_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # a worker bound to the 25.11 lane may run this test once its lane is done
    monkeypatch.delenv(lanes.LANE_ENV, raising=False)
    monkeypatch.delenv(lanes.RELEASE_ENV, raising=False)
    monkeypatch.setenv("DETHPC_DEVCLUSTER_DIR", str(BASE))
    assert lanes.current_lane() == 1 and lanes.current_layout() == lanes.lane_layout(1, BASE)
    monkeypatch.setenv(lanes.LANE_ENV, "2")
    assert lanes.current_layout() == lanes.lane_layout(2, BASE)
    assert lanes.lane_env(lanes.current_layout()) == {
        "SLURM_CONF": "/etc/slurm-lane2/slurm.conf", lanes.LANE_ENV: "2",
        lanes.RELEASE_ENV: "22.05", lanes.NODES_ENV: "l2n1,l2n2,l2n3,l2n4"}
    for bad in ("0", "x", str(lanes.MAX_LANES + 1)):
        monkeypatch.setenv(lanes.LANE_ENV, bad)
        with pytest.raises(ValueError):
            lanes.current_lane()


def test_lane_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    assert lanes.lane_count() == lanes.DEFAULT_LANES == 3
    monkeypatch.setenv(lanes.LANES_ENV, "3")
    assert lanes.lane_count() == 3 and lanes.lane_count(1) == 1


def test_existing_lanes(tmp_path: Path) -> None:
    base = tmp_path / "dc"
    assert lanes.existing_lanes(base) == []
    base.mkdir()
    Path(f"{base}-lane3").mkdir()
    assert lanes.existing_lanes(base) == [1, 3]
