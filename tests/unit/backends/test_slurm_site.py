"""Pure pieces of ``dethpc.backends.slurm_site``: MaxArraySize and accounting from
``scontrol show config``, the partition and QoS checks of ``check_pool``, when the
user's limits are read (again), and the QoS names sacctmgr lists."""

from __future__ import annotations

import pytest

from dethpc.backends.slurm_limits import parse_qos_names
from dethpc.backends.slurm_parse import NodeGroup, Partition
from dethpc.backends.slurm_site import (
    accounting_on,
    array_limit,
    check_partition,
    check_qos,
    limits_due,
)
from dethpc.common.errors import SubmitError


@pytest.mark.parametrize(("config", "expected"), [
    ({"MaxArraySize": "5000"}, 5000),
    ({"MaxArraySize": "1"}, 1),
    ({}, 1001),                                  # Slurm's default
    ({"MaxArraySize": "abc"}, 1001),
    ({"MaxArraySize": ""}, 1001),
    ({"MaxArraySize": "-5"}, 1001),
])
def test_array_limit(config: dict[str, str], expected: int) -> None:
    assert array_limit(config) == expected


@pytest.mark.parametrize(("config", "expected"), [
    ({"AccountingStorageType": "accounting_storage/slurmdbd"}, True),
    ({"AccountingStorageType": "accounting_storage/none"}, False),
    ({"AccountingStorageType": ""}, False),
    ({}, False),
])
def test_accounting_on(config: dict[str, str], expected: bool) -> None:
    assert accounting_on(config) is expected


PARTS = {
    "debug": Partition("debug", (NodeGroup(2, 8, 2), NodeGroup(1, 16, 0)), 3600),
    "empty": Partition("empty", (), None),
}


@pytest.mark.parametrize(("partition", "nodes", "tasks", "gpus", "error"), [
    ("debug", 2, 8, 2, None),
    ("debug", 3, 8, 0, None),                    # both groups offer 8 CPUs
    ("debug", 1, 16, 0, None),
    ("debug", 3, 8, 2, "partition 'debug' cannot fit 3 node(s) x 8 task(s) with 2 GPU(s) "
                       "each: it has 2x(8 CPUs, 2 GPUs), 1x(16 CPUs, 0 GPUs), so at most 2 "
                       "such node(s), 16 task(s). Ask for at most 16 slots per trial (8 per "
                       "node), or use a pool on a bigger partition."),
    ("debug", 13, 8, 0, "it has 2x(8 CPUs, 2 GPUs), 1x(16 CPUs, 0 GPUs), so at most 3 such "
                        "node(s), 24 task(s). Ask for at most 24 slots per trial"),
    ("debug", 1, 17, 0, "cannot fit 1 node(s) x 17 task(s) with 0 GPU(s) each: it has 2x(8 "
                        "CPUs, 2 GPUs), 1x(16 CPUs, 0 GPUs), so no node holds 17 task(s) with "
                        "0 GPU(s). Ask for fewer slots per node or per trial, or use a pool "
                        "on a bigger partition."),
    ("empty", 1, 1, 0, "it has no nodes, so no node holds 1 task(s)"),
    ("nosuch", 1, 1, 0, "partition 'nosuch' does not exist on this cluster; existing "
                        "partitions: debug, empty. Fix the resource pool's `partition` in "
                        "the cluster config."),
])
def test_check_partition(partition: str, nodes: int, tasks: int, gpus: int,
                         error: str | None) -> None:
    if error is None:
        check_partition(PARTS, partition, nodes, tasks, gpus)
    else:
        with pytest.raises(SubmitError) as got:
            check_partition(PARTS, partition, nodes, tasks, gpus)
        assert error in str(got.value)


def test_check_partition_on_a_cluster_without_partitions() -> None:
    with pytest.raises(SubmitError, match=r"existing partitions: \(none\)"):
        check_partition({}, "debug", 1, 1, 0)


@pytest.mark.parametrize(("qos", "known", "error"), [
    ("normal", {"normal", "high"}, None),
    ("low", {"normal", "high"}, "QoS 'low' does not exist; existing QoS: high, normal. "
                                "Fix the pool's `qos`."),
    ("low", set(), "QoS 'low' does not exist; existing QoS: . Fix the pool's `qos`."),
])
def test_check_qos(qos: str, known: set[str], error: str | None) -> None:
    if error is None:
        check_qos(qos, known)
    else:
        with pytest.raises(SubmitError) as got:
            check_qos(qos, known)
        assert str(got.value) == error


@pytest.mark.parametrize(("read", "tried_at", "now", "retry_s", "due"), [
    (False, None, 5.0, 60.0, True),              # first call
    (True, None, 5.0, 60.0, False),              # read: never again
    (True, 0.0, 1000.0, 60.0, False),
    (False, 100.0, 159.9, 60.0, False),          # failed a moment ago
    (False, 100.0, 160.0, 60.0, True),           # a minute after the failure
    (False, 100.0, 100.0, 0.0, True),            # retry at once
])
def test_limits_due(read: bool, tried_at: float | None, now: float, retry_s: float,
                    due: bool) -> None:
    assert limits_due(read, tried_at, now, retry_s) is due


@pytest.mark.parametrize(("text", "names"), [
    ("normal\nlimited\n", {"normal", "limited"}),
    ("  normal \n\n \nhigh\n", {"normal", "high"}),
    ("", set()),
])
def test_parse_qos_names(text: str, names: set[str]) -> None:
    assert parse_qos_names(text) == names
