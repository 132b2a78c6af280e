"""The rest of Determined's Core API surface that has no tutorial stage, called and checked
against what Determined gives: trial metadata, deleting a checkpoint, alerts, the
TensorBoard path, the node-local collectives, ``ClusterInfo``'s fields and the
experiment config in ``DET_EXPERIMENT_CONFIG``. Written as for Determined 0.38; only
the import differs.

Every check that fails ends the trial with an error naming what Determined would have
given. What the script saw is set as the trial's metadata at the end (``compat``), so
``dethpc trial describe`` shows it. Run it with one process (``python3 served.py``) or
one per slot (``python3 -m determined.launch.torch_distributed python3 served.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from typing import Any

import dethpc as det


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"determined-compat check failed: {what}")


def distributed_context() -> det.core.DistributedContext | None:
    """torch.distributed under a launcher, as Determined's distributed tutorial."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return det.core.DistributedContext.from_torch_distributed()


def node_local(d: det.core.DistributedContext) -> list[list[dict[str, int]]]:
    """allgather_local, gather_local and broadcast_local on every rank; the per-node
    lists, as rank 0 gathers them."""
    me = {"rank": d.rank, "local_rank": d.local_rank, "node": d.cross_rank}
    here = d.allgather_local(me)
    check([p["local_rank"] for p in here] == list(range(d.local_size)),
          f"allgather_local on rank {d.rank}: one entry per local rank in order, got {here}")
    check({p["node"] for p in here} == {d.cross_rank},
          f"allgather_local on rank {d.rank}: only this node's ranks, got {here}")
    gathered = d.gather_local(me)
    check(gathered == here if d.local_rank == 0 else gathered is None,
          f"gather_local on rank {d.rank}: the node's list on its chief, None elsewhere; "
          f"got {gathered}")
    chief = d.broadcast_local(me if d.local_rank == 0 else None)
    check(chief == here[0], f"broadcast_local on rank {d.rank}: the local chief's, got {chief}")
    per_node = d.allgather(here if d.local_rank == 0 else None)
    return [n for n in per_node if n is not None]


def cluster_info(d: det.core.DistributedContext) -> list[dict[str, Any]]:
    """ClusterInfo as each node's chief sees it (rank 0 gets every node's)."""
    info = det.get_cluster_info()
    check(info is not None, "det.get_cluster_info() is None on-cluster")
    assert info is not None
    slot_ids = info.slot_ids
    check(isinstance(slot_ids, list) and all(isinstance(i, int) for i in slot_ids),
          f"ClusterInfo.slot_ids: a list of ints, got {slot_ids!r}")
    check(len(slot_ids) == d.local_size,
          f"ClusterInfo.slot_ids: one per slot of this node ({d.local_size}), got {slot_ids}")
    check(info.container_rank == d.cross_rank,
          f"ClusterInfo.container_rank {info.container_rank} != cross_rank {d.cross_rank}")
    check(len(info.container_addrs) == d.cross_size,
          f"ClusterInfo.container_addrs: one per node, got {info.container_addrs}")
    trial = info.trial
    check(info.task_id == f"{trial.experiment_id}.{trial.trial_id}",
          f"ClusterInfo.task_id {info.task_id!r}")
    mine = {"agent_id": info.agent_id, "slot_ids": slot_ids,
            "container_rank": info.container_rank, "container_addrs": info.container_addrs,
            "container_slot_counts": info.container_slot_counts,
            "task_id": info.task_id, "allocation_id": info.allocation_id,
            "task_type": info.task_type, "trial_id": trial.trial_id,
            "experiment_id": trial.experiment_id, "hparams": trial.hparams,
            "det_slot_ids": json.loads(os.environ["DET_SLOT_IDS"])}
    return [n for n in d.allgather(mine if d.local_rank == 0 else None) if n is not None]


def experiment_config() -> dict[str, Any]:
    """DET_EXPERIMENT_CONFIG: the whole config as JSON, as Determined's tasks get it."""
    raw = os.environ["DET_EXPERIMENT_CONFIG"]
    config = json.loads(raw)
    check(isinstance(config.get("data"), dict), "DET_EXPERIMENT_CONFIG has the config's data:")
    return {"sha256": hashlib.sha256(raw.encode()).hexdigest(), "data": config["data"],
            "entrypoint": config.get("entrypoint")}


def checkpoints(core_context: det.core.Context) -> dict[str, Any]:
    """Three checkpoints; the middle one deleted (CheckpointContext.delete)."""
    uuids = []
    for steps in (1, 2, 3):
        with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, uuid):
            (path / "weights.txt").write_text(f"weights after {steps}\n")
        uuids.append(uuid)
    doomed = uuids[1]
    check(core_context.checkpoint.get_metadata(doomed)["steps_completed"] == 2,
          "get_metadata of a stored checkpoint")
    core_context.checkpoint.delete(doomed)
    try:
        with core_context.checkpoint.restore_path(doomed):
            pass
        gone = False
    except det.errors.CheckpointNotFound:
        gone = True
    check(gone, f"restore_path({doomed}) after delete(): CheckpointNotFound")
    with core_context.checkpoint.restore_path(uuids[2]) as path:
        check((path / "weights.txt").read_text() == "weights after 3\n",
              "a kept checkpoint restores")
    return {"stored": uuids, "deleted": doomed}


def tensorboard(core_context: det.core.Context) -> str:
    """Something written where get_tensorboard_path() says (the user's own files)."""
    path = core_context.train.get_tensorboard_path()
    (path / "compat-marker.txt").write_text("written by served.py\n")
    return str(path)


def main(core_context: det.core.Context) -> None:
    d = core_context.distributed
    report: dict[str, Any] = {"nodes": node_local(d), "cluster": cluster_info(d)}
    if d.rank != 0:
        return
    report["config"] = experiment_config()
    report["tensorboard_path"] = tensorboard(core_context)
    first = {"phase": "start", "quotes": "it's \"quoted\""}
    core_context.train.set_metadata(first)
    check(core_context.train.get_metadata() == first,
          f"get_metadata() returns what set_metadata() set, got "
          f"{core_context.train.get_metadata()}")
    report["checkpoints"] = checkpoints(core_context)
    core_context.train.report_validation_metrics(steps_completed=3, metrics={"val_loss": 0.5})
    core_context.alert(title="compat", description="an alert from served.py, with \"quotes\"",
                       level="warn")
    core_context.train.set_metadata({"compat": report})   # replaces the first one
    check(core_context.train.get_metadata() == {"compat": report}, "set_metadata replaces")
    logging.info("every served name answered as Determined's: %s", json.dumps(report))


if __name__ == "__main__":
    argparse.ArgumentParser().parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init(distributed=distributed_context()) as core_context:
        main(core_context)
