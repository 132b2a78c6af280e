"""The scale profile (dethpc.devcluster.profiles, pinning): one large cluster with typed
fake GPUs on every node, whose names, ports, directories and database no lane uses, whose
rendered config declares every GPU, with users free of QoS limits, and daemons that can be
pinned to CPUs. The lanes stay exactly as they were."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dethpc.devcluster import lanes, profiles
from dethpc.devcluster.__main__ import main
from dethpc.devcluster.layout import DevClusterLayout, render_configs
from dethpc.devcluster.pinning import CpuPinning, DaemonRole, cpu_list, parse_cpus
from dethpc.devcluster.releases import SlurmRelease
from dethpc.devcluster.site import AccountingState, plan_accounting

BASE = Path("/x/state")


def _confs(layout: DevClusterLayout) -> dict[str, str]:
    return {p.name: text for p, text in render_configs(layout, "pw").items()}


def _declared_gpus(slurm_conf: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"^NodeName=\S+ .*Gres=gpu:a100:(\d+)",
                                                     slurm_conf, re.M))


def test_the_default_scale_cluster_is_16_nodes_of_4_typed_gpus() -> None:
    lay = profiles.scale_layout(base=BASE)
    assert profiles.ScaleSpec().gpus == 64
    assert (lay.cluster_name, lay.node_names[0], lay.node_names[-1], lay.nodelist) == (
        "devscale", "g1", "g16", "g[1-16]")
    assert (lay.ctld_port, lay.dbd_port, lay.nodes[0].port, lay.nodes[-1].port) == (
        6717, 6719, 7201, 7216)
    assert lay.slurm_conf == Path("/etc/slurm-scale/slurm.conf")
    assert lay.state_dir == Path("/x/state-scale") and lay.shared == BASE
    assert lay.db_name == "slurm_acct_db_scale"
    assert [d.name for d in lay.gpu_devices()] == ["nvidia0", "nvidia1", "nvidia2", "nvidia3"]
    confs = _confs(lay)
    conf = confs["slurm.conf"]
    assert len(re.findall(r"^NodeName=g\d+ ", conf, re.M)) == 16
    assert _declared_gpus(conf) == 64
    lines = conf.splitlines()
    assert "ClusterName=devscale" in lines and "SlurmctldPort=6717" in lines
    assert "AccountingStoragePort=6719" in lines and "GresTypes=gpu" in lines
    assert "PartitionName=debug Nodes=g[1-16] Default=YES" in conf
    assert "PartitionName=high Nodes=g[1-16]" in conf
    nodes = ",".join(f"g{i}" for i in range(1, 17))
    assert f"NodeName={nodes} Name=gpu Type=a100 File=/x/state-scale/dev/nvidia[0-3]" in \
        confs["gres.conf"].splitlines()
    assert "StorageLoc=slurm_acct_db_scale" in confs["slurmdbd.conf"].splitlines()


def test_128_gpus_and_other_types_are_one_spec_away() -> None:
    lay = profiles.scale_layout(profiles.ScaleSpec(nodes=32, gpus_per_node=4), BASE)
    assert _declared_gpus(_confs(lay)["slurm.conf"]) == 128
    h100 = profiles.scale_layout(profiles.ScaleSpec(nodes=2, gpus_per_node=8,
                                                    gpu_type="h100"), BASE)
    assert "Gres=gpu:h100:8" in _confs(h100)["slurm.conf"]
    assert h100.gpu_devices()[-1].name == "nvidia7"


@pytest.mark.parametrize("kw", [{"nodes": 0}, {"nodes": profiles.MAX_NODES + 1},
                                {"gpus_per_node": 0}, {"gpus_per_node": 9},
                                {"gpu_type": "a100; rm"}])
def test_a_shape_out_of_range_is_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="scale"):
        profiles.ScaleSpec(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("release", list(SlurmRelease))
def test_the_scale_cluster_shares_nothing_a_lane_owns(release: SlurmRelease) -> None:
    scale = profiles.scale_layout(profiles.ScaleSpec(nodes=profiles.MAX_NODES), BASE, release)
    lane_layouts = [lanes.lane_layout(k, BASE, r) for r in SlurmRelease
                    for k in range(1, lanes.MAX_LANES + 1)]
    others = [profiles.scale_layout(profiles.ScaleSpec(nodes=profiles.MAX_NODES), BASE, r)
              for r in SlurmRelease if r is not release]
    ports = {scale.ctld_port, scale.dbd_port, *(n.port for n in scale.nodes)}
    assert max(ports) < 15000  # below the launchers' rendezvous ports
    for other in lane_layouts + others:
        assert not ports & {other.ctld_port, other.dbd_port, *(n.port for n in other.nodes)}
        assert not set(scale.node_names) & set(other.node_names)
        assert scale.cluster_name != other.cluster_name and scale.db_name != other.db_name
        for path in ("slurm_conf", "state_dir", "run_dir", "dev_dir", "lock_file"):
            assert getattr(scale, path) != getattr(other, path), path
        assert not str(scale.state_dir).startswith(f"{other.state_dir}/")
        assert scale.owner_marker != other.owner_marker
    # what every cluster of the host shares
    one = lanes.lane_layout(1, BASE)
    assert (scale.mysql_socket, scale.db_password_file, scale.db_port) == (
        one.mysql_socket, one.db_password_file, one.db_port)


def test_the_lanes_are_unchanged_by_the_profile() -> None:
    one = lanes.lane_layout(1, BASE)
    assert one.pinning == CpuPinning() and one.site.unlimited_users == ()
    assert one.site.gres.node_gres == "gpu:a100:2" and one.site.gres.nodes == ("n1", "n2")


def test_the_fault_injector_and_background_users_have_no_qos_limits() -> None:
    site = profiles.scale_layout(base=BASE).site
    assert site.unlimited_users == (profiles.FAULT_USER, *profiles.BACKGROUND_USERS,
                                    profiles.SYSTEM_USER)
    plan = plan_accounting(site, "devscale", AccountingState({}, ()), site.unlimited_users)
    adds = {(c[2], c[3]): c for c in plan if c[:2] == ["add", "user"]}
    for user in site.unlimited_users:
        # default account dethpc, whose default QoS is `normal` (no per-user limits)
        assert adds[(user, "account=dethpc")][-1] == "defaultaccount=dethpc"
    assert site.account("dethpc").default_qos == "normal"
    normal = next(q for q in site.qos if q.name == "normal")
    assert normal.max_jobs_per_user is None and normal.max_submit_jobs_per_user is None


def test_the_shape_is_recorded_for_status_and_down(tmp_path: Path) -> None:
    spec = profiles.ScaleSpec(nodes=3, gpus_per_node=2, pinning=CpuPinning(login=(0,)))
    assert profiles.saved_spec(tmp_path) is None
    profiles.save_spec(profiles.scale_layout(spec, tmp_path), spec)
    assert profiles.saved_spec(tmp_path) == spec
    assert profiles.saved_spec(tmp_path, SlurmRelease.V25_11) is None


# ------------------------------------------------------------------ pinning
@pytest.mark.parametrize(("text", "cpus"), [("0", (0,)), ("0-2", (0, 1, 2)),
                                            ("3,0-1", (0, 1, 3)), ("1,1", (1,))])
def test_cpu_lists(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpus(text, available=range(8)) == cpus
    assert parse_cpus(cpu_list(cpus), available=range(8)) == cpus


@pytest.mark.parametrize("text", ["", "a", "2-1", "0-", "-1", "9"])
def test_bad_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="CPU list"):
        parse_cpus(text, available=range(8))


def test_a_pinned_role_starts_under_taskset_and_an_unpinned_one_as_is() -> None:
    pins = CpuPinning(login=(0,), nodes=None)
    assert pins.argv(DaemonRole.LOGIN, ["slurmctld"]) == ["taskset", "-c", "0", "slurmctld"]
    assert pins.argv(DaemonRole.NODE, ["slurmd", "-N", "g1"]) == ["slurmd", "-N", "g1"]
    assert CpuPinning().argv(DaemonRole.LOGIN, ["slurmdbd"]) == ["slurmdbd"]


def test_a_process_on_other_cpus_differs() -> None:
    mine = tuple(sorted(os.sched_getaffinity(0)))
    assert not CpuPinning(login=mine).differs(DaemonRole.LOGIN, os.getpid())
    assert not CpuPinning().differs(DaemonRole.LOGIN, os.getpid())
    other = CpuPinning(login=(max(mine) + 1,))
    assert other.differs(DaemonRole.LOGIN, os.getpid())


def test_the_command_refuses_a_cpu_the_machine_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--profile", "scale", "--login-cpus", "4096"]) == 2
    assert "CPU list" in capsys.readouterr().err
