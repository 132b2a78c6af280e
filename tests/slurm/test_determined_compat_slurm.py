"""examples/determined_compat through the daemon on the dev cluster: code written for
Determined 0.38.1's Core API (only the import changed) gets what Determined gives.

- plain submit: ``invalid_hp.yaml`` (the trial that raised ``det.InvalidHP`` ends
  COMPLETED with reason ``invalid_hp``, the random search draws a replacement: 4 trials,
  3 counted), ``early_stop.yaml`` (``report_early_exit``: COMPLETED early with its
  reason) and ``served.yaml`` (metadata in describe, the deleted checkpoint DELETED and
  gone, the alert an event, the TensorBoard path served, ``DET_EXPERIMENT_CONFIG``
  byte-exact with quotes in ``data:``, ``ClusterInfo`` from Slurm);
- ``served.yaml`` with Determined's torch launcher on 4 slots, 2 per node: the node-local
  collectives return each node's own two ranks on two nodes;
- both in a worker pool (``slurm.workers``): the records come through the pool's runs;
- ``served.yaml`` inside the dev cluster's Charliecloud image (built from this checkout
  by scripts/test.sh before pytest; a checkout whose image is another's must rebuild it,
  ``python -m dethpc.devcluster image``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.common.hostlist import expand_hostlist
from dethpc.config import parse_stored
from dethpc.launch.detenv import config_json
from dethpc.surfaces import views
from dethpc.surfaces.tasks.derive import Deriver, Source
from tests.slurm.fixtures.harness import DaemonHarness, job_log

COMPAT = Path(__file__).resolve().parents[2] / "examples" / "determined_compat"
LAUNCHER = "python3 -m determined.launch.torch_distributed python3 served.py"


@pytest.fixture
def harness(tmp_path: Path, slurm_cluster: Any) -> Iterator[DaemonHarness]:
    h = DaemonHarness.create(tmp_path / "dethpc", slots_per_node=2)
    yield h
    h.cancel_all_experiments()


def raw(name: str, **changes: Any) -> dict[str, Any]:
    out = yaml.safe_load((COMPAT / name).read_text())
    out.update(changes)
    return out


def submit(h: DaemonHarness, config: dict[str, Any]) -> int:
    return h.submit(config, context=COMPAT)


def wait_all(h: DaemonHarness, exps: list[int], timeout: float = 360.0) -> None:
    h.wait(f"experiments {exps} to end", lambda: all(
        h.experiment(e).state in ("COMPLETED", "ERROR", "CANCELED") for e in exps),
        timeout=timeout)


def logs(h: DaemonHarness, exp: int) -> str:
    run_dir = Path(h.experiment(exp).run_dir)
    return "".join(job_log(d) for d in sorted((run_dir / "trials").iterdir()))


def assert_completed(h: DaemonHarness, exps: list[int]) -> None:
    for e in exps:
        assert h.experiment(e).state == "COMPLETED", (e, h.events(e), logs(h, e)[-4000:])


def check_invalid_hp(h: DaemonHarness, exp: int) -> None:
    trials = views.describe_experiment(h.store, exp)["trials"]
    ragged = [t for t in trials if t["hparams"]["layout"] == "ragged"]
    dense = [t for t in trials if t["hparams"]["layout"] == "dense"]
    assert len(trials) == 4 and len(ragged) == 1 and len(dense) == 3, trials
    assert (ragged[0]["state"], ragged[0]["exit_reason"], ragged[0]["searcher_status"]) == \
        ("COMPLETED", "invalid_hp", "invalid"), ragged
    assert all(t["exit_reason"] == "completed" for t in dense), dense


def check_early_stop(h: DaemonHarness, exp: int) -> None:
    (trial,) = views.describe_experiment(h.store, exp)["trials"]
    assert (trial["state"], trial["exit_reason"]) == ("COMPLETED", "user_requested_stop")
    assert trial["steps_completed"] < 20


def check_served(h: DaemonHarness, exp: int, tmp_path: Path, *, ranks_per_node: list[int],
                 node_names: list[str]) -> dict[str, Any]:
    """What served.py saw and what dethpc made of it; its report."""
    desc = views.describe_experiment(h.store, exp)
    (trial,) = desc["trials"]
    report = views.trial_detail(h.store, trial["id"])["metadata"]["compat"]
    # node-local collectives: each node's own ranks, in local order
    assert [[p["local_rank"] for p in node] for node in report["nodes"]] == \
        [list(range(n)) for n in ranks_per_node], report["nodes"]
    assert [{p["node"] for p in node} for node in report["nodes"]] == \
        [{i} for i in range(len(ranks_per_node))], report["nodes"]
    # ClusterInfo from Slurm: one agent per node, a slot id per local rank
    job = views.trial_detail(h.store, trial["id"])["jobs"][-1]
    agents = [c["agent_id"] for c in report["cluster"]]
    assert len(set(agents)) == len(ranks_per_node) and set(agents) <= set(node_names), agents
    if not str(job["ref"]).startswith("pool:"):   # a pool's item names its worker there
        assert sorted(agents) == sorted(expand_hostlist(job["nodes"])), (agents, job)
    assert [len(c["slot_ids"]) for c in report["cluster"]] == ranks_per_node, report["cluster"]
    assert all(c["slot_ids"] == c["det_slot_ids"] for c in report["cluster"])
    assert all(c["task_id"] == f"{exp}.{trial['id']}" for c in report["cluster"])
    # DET_EXPERIMENT_CONFIG byte-exact, quotes in data: intact
    expected = config_json(parse_stored(h.experiment(exp).config_yaml).raw)
    assert report["config"]["sha256"] == hashlib.sha256(expected.encode()).hexdigest()
    assert report["config"]["data"] == raw("served.yaml")["data"]
    # the deleted checkpoint: DELETED, its files gone, the latest is the newest kept
    ckpts = {c["uuid"]: c["state"] for c in views.checkpoints_of(h.store, exp)}
    stored, deleted = report["checkpoints"]["stored"], report["checkpoints"]["deleted"]
    assert ckpts == {u: "DELETED" if u == deleted else "COMPLETED" for u in stored}, ckpts
    assert not list(h.ckpt_dir(exp).glob(f"*{deleted}"))
    assert trial["latest_checkpoint"] == stored[2]
    # the alert
    alerts = [e for e in views.events_of(h.store, exp) if e["kind"] == "alert"]
    assert [a["data"]["title"] for a in alerts] == ["compat"], alerts
    # get_tensorboard_path(): served by dethpc tensorboard
    run_dir = Path(h.experiment(exp).run_dir)
    deriver = Deriver(tmp_path / "tb", [Source(exp, run_dir, "batches")])
    try:
        deriver.refresh()
    finally:
        deriver.close()
    marker = tmp_path / "tb" / f"exp{exp}" / f"trial{trial['id']}" / "tensorboard" \
        / "compat-marker.txt"
    assert marker.read_text() == "written by served.py\n"
    return report


def test_plain_submit(harness: DaemonHarness, tmp_path: Path, slurm_cluster: Any) -> None:
    h = harness
    exps = [submit(h, raw("invalid_hp.yaml")), submit(h, raw("early_stop.yaml")),
            submit(h, raw("served.yaml"))]
    wait_all(h, exps)
    assert_completed(h, exps)
    check_invalid_hp(h, exps[0])
    check_early_stop(h, exps[1])
    check_served(h, exps[2], tmp_path, ranks_per_node=[1],
                 node_names=slurm_cluster.nodes)


def test_two_nodes_distributed(harness: DaemonHarness, tmp_path: Path,
                               slurm_cluster: Any) -> None:
    h = harness
    exp = submit(h, raw("served.yaml", entrypoint=LAUNCHER,
                        resources={"slots_per_trial": 4, "resource_pool": "debug"}))
    wait_all(h, [exp])
    assert_completed(h, [exp])
    report = check_served(h, exp, tmp_path, ranks_per_node=[2, 2],
                          node_names=slurm_cluster.nodes)
    assert [[p["rank"] for p in node] for node in report["nodes"]] == [[0, 1], [2, 3]]
    assert all(len(c["container_addrs"]) == 2 for c in report["cluster"])


def test_in_a_worker_pool(harness: DaemonHarness, tmp_path: Path, slurm_cluster: Any) -> None:
    h = harness
    pool = {"workers": {"count": 1, "preload": ["dethpc.core"]}}
    exps = [submit(h, raw("invalid_hp.yaml", slurm=pool)),
            submit(h, raw("served.yaml", slurm=pool))]
    wait_all(h, exps)
    assert_completed(h, exps)
    check_invalid_hp(h, exps[0])
    check_served(h, exps[1], tmp_path, ranks_per_node=[1],
                 node_names=slurm_cluster.nodes)


@pytest.fixture(scope="module")
def image(slurm_cluster: Any) -> Path:
    """The dev cluster's image (scripts/test.sh builds it from this checkout before
    pytest; tests/slurm/test_containers_slurm.py runs in it too)."""
    from dethpc.devcluster.image import ensure_image

    return ensure_image().path


def test_in_the_container(tmp_path: Path, slurm_cluster: Any, image: Path) -> None:
    from dethpc.devcluster.image import IMAGE_PYTHON

    h = DaemonHarness.create(tmp_path / "dethpc", containers={
        "runtime": "charliecloud", "python": IMAGE_PYTHON})
    try:
        exp = submit(h, raw("served.yaml", environment={"image": str(image)}))
        wait_all(h, [exp], timeout=480)
        script = (h.trial_dir(exp) / "job.sbatch").read_text()
        assert "ch-run" in script and str(image) in script
        assert_completed(h, [exp])
        check_served(h, exp, tmp_path, ranks_per_node=[1],
                 node_names=slurm_cluster.nodes)
    finally:
        h.cancel_all_experiments()
