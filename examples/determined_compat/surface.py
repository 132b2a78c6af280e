"""The rest of Determined's Core API, called as a Determined 0.38 user calls it and checked
against what Determined gives: the searcher's operations, every kind of metric, progress
and status, the experiment's best validation, checkpoint upload and download, the
preemption context, the profiler and experimental contexts, ``ClusterInfo``'s master-only
fields, the enums and helpers. Only the import differs from Determined's.

It runs twice per trial: first off-cluster, in a child process without the job's
variables (``core.init()`` then gives Determined's Dummy contexts, as on a laptop), then
on the cluster with one process per slot under the launcher named by ``--launcher``
(``torch``: ``determined.launch.torch_distributed``; ``deepspeed``:
``determined.launch.deepspeed``). A check that fails ends the trial with an error naming
what Determined would have given; what the script saw becomes the trial's metadata
(``surface``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import dethpc as det
from dethpc.common import util


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"determined-compat check failed: {what}")


def distributed(d: det.core.DistributedContext) -> dict[str, Any]:
    """The rank getters and the collectives (every rank)."""
    check((d.get_rank(), d.get_size(), d.get_local_rank()) == (d.rank, d.size, d.local_rank),
          "get_rank/get_size/get_local_rank agree with rank/size/local_rank")
    check(d.get_num_agents() == d.cross_size, "get_num_agents() is the number of nodes")
    ranks = d.allgather(d.rank)
    check(ranks == list(range(d.size)), f"allgather: every rank in order, got {ranks}")
    gathered = d.gather(d.rank)
    check(gathered == ranks if d.rank == 0 else gathered is None,
          f"gather: the list on the chief, None elsewhere; got {gathered}")
    check(d.broadcast(f"from {d.rank}") == "from 0", "broadcast: the chief's value")
    local = d.allgather_local(d.local_rank)
    check(local == list(range(d.local_size)), f"allgather_local: got {local}")
    check(d.gather_local(d.local_rank) == (local if d.local_rank == 0 else None),
          "gather_local: the node's list on its chief")
    check(d.broadcast_local(d.local_rank) == 0, "broadcast_local: the local chief's value")
    return {"rank": d.rank, "size": d.size, "local_size": d.local_size,
            "cross_rank": d.cross_rank, "cross_size": d.cross_size}


def searcher_loop(ctx: det.core.Context, units: Any) -> dict[str, Any]:
    """Determined's (deprecated) operations loop: train to each op's length, report
    progress and the searcher metric, acknowledge the end. ``units``: what
    get_configured_units() answers (the config's in a job; EPOCHS off-cluster, as
    Determined's DummySearcherContext)."""
    check(ctx.searcher.get_configured_units() == units,
          f"get_configured_units(): {units}, got {ctx.searcher.get_configured_units()}")
    lengths = []
    for op in ctx.searcher.operations(det.core.SearcherMode.WorkersAskChief):
        for batch in range(1, op.length + 1):
            if batch % 2 == 0 or batch == op.length:
                ctx.train.report_training_metrics(steps_completed=batch,
                                                  metrics={"loss": 1.0 / batch})
            if ctx.distributed.rank == 0:
                op.report_progress(batch)
        loss = 1.0 / op.length
        ctx.train.report_validation_metrics(steps_completed=op.length,
                                            metrics={"val_loss": loss})
        if ctx.distributed.rank == 0:
            op.report_completed(loss)
        lengths.append(op.length)
    if ctx.distributed.rank == 0:
        ctx.searcher.acknowledge_out_of_ops()
    return {"lengths": lengths, "modes": [m.name for m in det.core.SearcherMode]}


def train_reports(ctx: det.core.Context, steps: int) -> dict[str, Any]:
    ctx.train.report_metrics("inference", steps, {"latency_ms": 3.5})
    ctx.train.report_progress(0.5)
    ctx.train.set_status("checking the surface")
    best = ctx.train.get_experiment_best_validation()
    ctx.train.upload_tensorboard_files(lambda p: p.suffix == ".txt")
    tb = ctx.train.get_tensorboard_path()
    if ctx.distributed.rank == 0:   # the chief keeps the trial's metadata
        ctx.train.set_metadata({"phase": "reports"})
        check(ctx.train.get_metadata() == {"phase": "reports"},
              "get_metadata after set_metadata")
    return {"best": best, "tensorboard": str(tb)}


def checkpoints(ctx: det.core.Context, scratch: Path) -> dict[str, Any]:
    """upload() a directory on the chief, download() it on every rank, get_metadata()."""
    uuid = None
    if ctx.distributed.rank == 0:
        src = scratch / "to-upload"
        (src / "sub").mkdir(parents=True)
        (src / "model.txt").write_text("weights\n")
        (src / "sub" / "skip.log").write_text("not chosen\n")
        uuid = ctx.checkpoint.upload(src, {"steps_completed": 4},
                                     selector=lambda rel: not rel.endswith(".log"))
    uuid = ctx.distributed.broadcast(uuid)
    dst = scratch / f"download-{ctx.distributed.rank}"
    ctx.checkpoint.download(uuid, dst, det.core.DownloadMode.NoSharedDownload)
    # as Determined's: the files the upload's selector chose, and the metadata.json
    # every upload writes
    check(sorted(p.name for p in dst.rglob("*") if p.is_file()) == ["metadata.json",
                                                                    "model.txt"],
          f"download(): the uploaded files the selector chose, got {list(dst.rglob('*'))}")
    with ctx.checkpoint.restore_path(uuid, det.core.DownloadMode.LocalWorkersShareDownload) \
            as path:
        check((path / "model.txt").read_text() == "weights\n", "restore_path of an upload")
    check(ctx.checkpoint.get_metadata(uuid)["steps_completed"] == 4, "get_metadata()")
    ctx.experimental.report_task_using_checkpoint(uuid)
    ctx.experimental.report_task_using_model_version(None)
    return {"uploaded": uuid}


def preemption(ctx: det.core.Context) -> bool:
    ctx.preempt.start()
    with ctx.preempt as p:
        asked = p.should_preempt(auto_ack=False)
        p.acknowledge_preemption_signal()   # a no-op when nothing was asked
    check(asked is False, "should_preempt() is False when nothing asked")
    return asked


def helpers(scratch: Path) -> dict[str, Any]:
    """The module-level names Determined users import."""
    pkg = scratch / "plugins"
    pkg.mkdir()
    (pkg / "surface_plugin.py").write_text("ANSWER = 42\n")
    with det.import_from_path(pkg):
        import surface_plugin  # type: ignore[import-not-found]
    check(surface_plugin.ANSWER == 42, "import_from_path: the module in that directory")
    merged = det.util.merge_dicts({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4})
    check(merged == {"a": {"b": 1, "c": 3}, "d": 4}, f"merge_dicts: got {merged}")
    text = util.yaml_safe_dump({"k": [1, 2]})
    check(util.yaml_safe_load(text) == {"k": [1, 2]}, "yaml_safe_load(yaml_safe_dump(x))")
    check(util.safe_load_yaml_with_exceptions("x: 1\n") == {"x": 1},
          "safe_load_yaml_with_exceptions")
    check(issubclass(det.errors.EnterpriseOnlyError, Exception), "EnterpriseOnlyError")
    check(det.InvalidHP("too big").msg == "too big", "InvalidHP(msg).msg")
    return {"version": det.__version__, "log_format": bool(det.LOG_FORMAT),
            "reasons": [r.value for r in (det.core.EarlyExitReason.INVALID_HP,
                                          det.core.EarlyExitReason.USER_REQUESTED_STOP)],
            "units": [u.name for u in (det.core.Unit.BATCHES, det.core.Unit.EPOCHS,
                                       det.core.Unit.RECORDS)],
            "preempt_modes": [m.name for m in (det.core.PreemptMode.WorkersAskChief,
                                               det.core.PreemptMode.ChiefOnly,
                                               det.core.PreemptMode.WorkersAskMaster)],
            "tensorboard_modes": [det.core.TensorboardMode.AUTO.name,
                                  det.core.TensorboardMode.MANUAL.name]}


def off_cluster(scratch: Path) -> dict[str, Any]:
    """``core.init()`` without a cluster: Determined's Dummy contexts."""
    check(det.get_cluster_info() is None, "get_cluster_info() is None off-cluster")
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                       "LOCAL_SIZE": "1", "CROSS_RANK": "0", "CROSS_SIZE": "1"})
    for make in (det.core.DummyDistributedContext.from_torch_distributed,
                 det.core.DummyDistributedContext.from_deepspeed):
        made = make()
        check(made.size == 1, f"{make.__name__}(): one process")
        made.close()
    with det.core.init(checkpoint_storage=str(scratch / "ckpt"),
                       tensorboard_mode=det.core.TensorboardMode.MANUAL) as ctx:
        kinds = {name: type(getattr(ctx, name)).__name__
                 for name in ("distributed", "train", "checkpoint", "preempt", "searcher",
                              "profiler", "experimental")}
        check(all(k.startswith("Dummy") for k in kinds.values()),
              f"off-cluster core.init() gives the Dummy contexts, got {kinds}")
        out = {"kinds": kinds, "distributed": distributed(ctx.distributed),
               "searcher": searcher_loop(ctx, det.core.Unit.EPOCHS)}
        out["reports"] = train_reports(ctx, 1)
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "w.txt").write_text("w\n")
        out["checkpoints"] = checkpoints(ctx, scratch)
        ctx.checkpoint.delete(uuid)
        ctx.train.report_early_exit(det.core.EarlyExitReason.USER_REQUESTED_STOP)
        ctx.profiler.on()
        ctx.profiler.off()
        out["preempted"] = preemption(ctx)
        ctx.distributed.close()
    out["missing"] = searcher_missing()
    return out


def searcher_missing() -> list[str]:
    """Determined's searcher context of a trial without ``searcher.max_length``: each call
    that needs the length says so; acknowledging does nothing."""
    missing = det.core.SearcherContextMissing()
    missing.acknowledge_out_of_ops()
    said = []
    for call in (missing.get_configured_units, lambda: next(missing.operations())):
        try:
            call()
        except det.errors.DethpcError as exc:
            said.append(str(exc))
    check(len(said) == 2 and all("searcher.max_length" in s for s in said),
          f"SearcherContextMissing names searcher.max_length, got {said}")
    return said


def dummy_in_a_child() -> dict[str, Any]:
    """This script off-cluster: a child process without Slurm's, dethpc's and
    Determined's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "DETHPC_", "DET_", "RANK", "WORLD_SIZE", "LOCAL_",
                                "GROUP_", "CROSS_", "MASTER_", "PMI", "OMPI"))}
    env.update({k: os.environ[k] for k in ("DETHPC_SURFACE_TRACE",) if k in os.environ})
    done = subprocess.run([sys.executable, __file__, "--off-cluster"], env=env,
                          capture_output=True, text=True, timeout=300)
    check(done.returncode == 0, f"off-cluster run: exit {done.returncode}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cluster_info() -> dict[str, Any]:
    info = det.get_cluster_info()
    check(info is not None, "get_cluster_info() on-cluster")
    assert info is not None
    check(info.master_url == "" and info.session_token == "", "no master: ''")
    check(info.master_cert_name is None and info.master_cert_file is None, "no master: None")
    check(info.trial.trial_seed == int(os.environ["DET_TRIAL_SEED"]), "trial_seed")
    check(info.user_data == {"team": "compat"}, f"user_data from data:, got {info.user_data}")
    check(isinstance(info.gpu_uuids, list), "gpu_uuids is a list")
    rendezvous = {"addrs": info.container_addrs, "rank": info.container_rank,
                  "slots": info.container_slot_counts}
    return {"cluster_id": info.cluster_id, "latest_checkpoint": info.latest_checkpoint,
            "gpu_uuids": info.gpu_uuids, "rendezvous": rendezvous,
            "trial_seed": info.trial.trial_seed}


def on_cluster(launcher: str) -> None:
    if launcher == "deepspeed":
        dist = det.core.DistributedContext.from_deepspeed()
    else:
        dist = det.core.DistributedContext.from_torch_distributed()
    report: dict[str, Any] = {}
    if dist.rank == 0:
        report["off_cluster"] = dummy_in_a_child()
    core_context = det.core.init(distributed=dist,
                                 preempt_mode=det.core.PreemptMode.WorkersAskChief,
                                 tensorboard_mode=det.core.TensorboardMode.MANUAL)
    core_context.start()     # Determined's form without `with`
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        report["distributed"] = distributed(core_context.distributed)
        report["searcher"] = searcher_loop(core_context, det.core.Unit.BATCHES)
        report["reports"] = train_reports(core_context, 2)
        report["checkpoints"] = checkpoints(core_context, scratch)
        report["preempted"] = preemption(core_context)
        core_context.profiler.on(sampling_interval=1, samples_per_report=10)
        core_context.profiler.off()
        report["cluster"] = cluster_info()
        if dist.rank == 0:
            report["helpers"] = helpers(scratch)
            core_context.train.set_metadata({"surface": report})
    core_context.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--off-cluster", action="store_true")
    parser.add_argument("--launcher", choices=("torch", "deepspeed"), default="torch")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    if args.off_cluster:
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            print(json.dumps(off_cluster(Path(tmp))))
    else:
        on_cluster(args.launcher)
