"""Determined 0.38's Core API and launchers on dethpc: the import, the API's spellings
and semantics, the TCP star behind ``DistributedContext``, and the entrypoint rewrite."""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import dethpc.core as core
from dethpc.common.errors import DethpcError, SubmitError
from dethpc.core import CheckpointContext, DistributedContext, TrainContext
from dethpc.core._train import MetricsWriter
from dethpc.jobs.render import entrypoint_argv
from dethpc.launch._common import Target, parse_launcher_args
from dethpc.launch._determined import from_determined

PY = "/venv/bin/python"


# --------------------------------------------------------------------- the import
def test_import_dethpc_as_det_gives_determined_names_lazily() -> None:
    code = ("import sys, dethpc as det\n"
            "assert 'dethpc.core' not in sys.modules, 'dethpc.core loaded eagerly'\n"
            "assert det.LOG_FORMAT == '%(levelname)s: [%(process)s] %(name)s: %(message)s'\n"
            "assert det.get_cluster_info() is None\n"
            "assert callable(det.core.init) and det.core.DistributedContext\n"
            "assert det.pytorch.Batch(3).value == 3 and 'torch' not in sys.modules\n"
            "assert det.ClusterInfo and det.TrialInfo\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, check=False)
    assert out.returncode == 0, out.stderr


# -------------------------------------------------------------- get_cluster_info
def _trial(tmp_path: Path) -> Path:
    trial = tmp_path / "exp" / "trials" / "7"
    trial.mkdir(parents=True)
    (trial / "hparams.json").write_text(json.dumps({"lr": 0.5, "global_batch_size": 8}))
    (tmp_path / "exp" / "config.yaml").write_text("data: {url: x}\nsearcher: {name: single}\n")
    return trial


def _env(trial: Path) -> dict[str, str]:
    return {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_TRIAL_ID": "7",
            "DETHPC_EXPERIMENT_ID": "2", "DETHPC_TRIAL_SEED": "9", "DETHPC_RUN_ID": "1",
            "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "1"}


def test_get_cluster_info_off_cluster_is_none() -> None:
    assert core.get_cluster_info(env={}) is None


def test_get_cluster_info_in_a_trial(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    info = core.get_cluster_info(env=_env(trial))
    assert info is not None and info.latest_checkpoint is None
    assert info.task_type == "TRIAL"
    assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (7, 2, 9)
    assert info.trial.hparams == {"lr": 0.5, "global_batch_size": 8}
    assert info.trial._trial_run_id == 2  # DETHPC_RUN_ID=1: the second run (from 1)
    assert info.user_data == {"url": "x"}
    assert info.container_addrs == ["n1", "n2"] and info.container_rank == 1
    assert info.allocation_id == "2.7.2"
    ckpt = CheckpointContext(trial / "checkpoints", DistributedContext())
    with ckpt.store_path({"steps_completed": 4}) as (path, uuid):
        (path / "w").write_text("x")
    # a fresh look finds it, without any collective (any rank may ask alone)
    again = core.get_cluster_info(env=_env(trial))
    assert again is not None and again.latest_checkpoint == uuid


# ------------------------------------------------------------ train / checkpoint
def test_report_progress_and_other_metric_groups(tmp_path: Path) -> None:
    train = TrainContext(MetricsWriter(tmp_path / "m.jsonl"), DistributedContext())
    train.report_progress(0.25)
    train.report_metrics("training", steps_completed=2, metrics={"loss": 1.0})
    train.report_metrics("inference", steps_completed=2, metrics={"x": 3})
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in lines] == ["progress", "training", "metrics"]
    assert lines[0]["progress"] == 0.25 and lines[2]["group"] == "inference"
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(DethpcError, match="between 0 and 1"):
            train.report_progress(bad)  # type: ignore[arg-type]
    with pytest.raises(DethpcError, match="without '.'"):
        train.report_metrics("a.b", 1, {})


def test_checkpoint_metadata_upload_download(tmp_path: Path) -> None:
    ckpt = CheckpointContext(tmp_path / "ck", DistributedContext())
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    uuid = ckpt.upload(src, {"steps_completed": 3, "note": "n"},
                       selector=lambda rel: rel != "a.txt")
    assert ckpt.get_metadata(uuid) == {"steps_completed": 3, "note": "n"}
    ckpt.download(uuid, tmp_path / "dst")
    # as Determined's: metadata.json comes along, holding the metadata given to upload
    assert sorted(p.name for p in (tmp_path / "dst").rglob("*") if p.is_file()) == [
        "b.txt", "metadata.json"]
    assert json.loads((tmp_path / "dst" / "metadata.json").read_text()) == {
        "steps_completed": 3, "note": "n"}
    ckpt.download(uuid, tmp_path / "dst2", selector=lambda rel: rel != "metadata.json")
    assert not (tmp_path / "dst2" / "metadata.json").exists()
    with ckpt.restore_path(uuid, core.DownloadMode.NoSharedDownload) as path:
        assert (path / "sub" / "b.txt").read_text() == "b"
    rank1 = CheckpointContext(tmp_path / "ck", DistributedContext(rank=1, size=2))
    with pytest.raises(DethpcError, match="shard=True"), \
            rank1.store_path({"steps_completed": 1}):
        pass
    with pytest.raises(DethpcError, match="steps_completed"), ckpt.store_path():
        pass


def test_searcher_operations_without_max_length_says_why(tmp_path: Path) -> None:
    with core.init(env={"DETHPC_TRIAL_DIR": str(_trial(tmp_path))},
                   preempt_mode=core.PreemptMode.ExplicitOnly) as ctx:
        with pytest.raises(DethpcError, match="searcher.max_length"):
            list(ctx.searcher.operations(core.SearcherMode.WorkersAskChief))
        ctx.searcher.acknowledge_out_of_ops()


def test_init_accepts_determined_keywords(tmp_path: Path) -> None:
    with core.init(env={}, checkpoint_storage=str(tmp_path / "store"),
                   tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _):
            (path / "f").write_text("1")
    assert len(list((tmp_path / "store").iterdir())) == 1
    with pytest.raises(DethpcError, match="not supported"), \
            core.init(env={}, checkpoint_storage="s3://bucket/x"):
        pass


# ----------------------------------------------------- DistributedContext's star
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, size: int, env: dict[str, str], out: Any, how: str) -> None:
    try:
        if how == "torch":
            dist = DistributedContext.from_torch_distributed(env={**env, "RANK": str(rank)})
        elif how == "deepspeed":
            dist = DistributedContext.from_deepspeed(env={**env, "RANK": str(rank)})
        else:
            dist = DistributedContext(rank=rank, size=size, local_rank=rank, local_size=size,
                                      cross_rank=0, cross_size=1, env=env)
        gathered = dist.allgather({"rank": rank})
        told = dist.broadcast(f"from {rank}")
        chief = dist.gather(rank * 10)
        dist.barrier()
        dist.close()
        out.put((rank, gathered, told, chief, dist.cross_size))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put((rank, repr(exc), None, None, None))


@pytest.mark.parametrize("how", ["ctor", "torch", "deepspeed"])
def test_star_collectives_across_processes(how: str) -> None:
    size = 3
    env = {"DETHPC_CORE_PORT": str(_free_port()), "DETHPC_CORE_CONNECT_TIMEOUT": "30",
           "WORLD_SIZE": str(size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(size),
           "LOCAL_SIZE": str(size), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
           "CROSS_RANK": "0", "CROSS_SIZE": "1"}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, size, env, out, how)) for r in range(size)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank, gathered, told, chief, cross in results:
        assert gathered == [{"rank": 0}, {"rank": 1}, {"rank": 2}], (rank, gathered)
        assert told == "from 0"
        assert chief == ([0, 10, 20] if rank == 0 else None)
        assert cross == 1


def _dying_worker(port: int) -> None:
    DistributedContext(rank=1, size=2, local_size=2, env={"DETHPC_CORE_PORT": str(port)})\
        .allgather("hi")  # then the process ends without the second collective


def test_a_dead_peer_is_an_error_not_a_hang() -> None:
    port = _free_port()
    ctx = mp.get_context("spawn")
    worker = ctx.Process(target=_dying_worker, args=(port,))
    worker.start()
    chief = DistributedContext(rank=0, size=2, local_size=2,
                               env={"DETHPC_CORE_PORT": str(port),
                                    "DETHPC_CORE_CONNECT_TIMEOUT": "30"})
    assert chief.allgather("me") == ["me", "hi"]
    worker.join(timeout=30)
    with pytest.raises(DethpcError, match="rank 1 closed the connection"):
        chief.allgather("again")
    chief.close()


def test_from_env_names_what_is_missing() -> None:
    with pytest.raises(DethpcError, match="LOCAL_SIZE"):
        DistributedContext.from_deepspeed(env={"RANK": "0", "WORLD_SIZE": "2",
                                               "LOCAL_RANK": "0"})
    one = DistributedContext.from_torch_distributed(env={
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert (one.size, one.cross_size, one.allgather(5)) == (1, 1, [5])


# --------------------------------------------------------- Determined's launchers
@pytest.mark.parametrize(("entrypoint", "argv"), [
    ("python3 -m determined.launch.torch_distributed python3 model_def_distributed.py",
     ["python3", "-m", "dethpc.launch.torch_distributed", "python3",
      "model_def_distributed.py"]),
    ("python3 -m determined.launch.torch_distributed -- --trial model_def:MnistTrial",
     ["python3", "-m", "dethpc.launch.torch_distributed", "--", "--trial",
      "model_def:MnistTrial"]),
    ("python3 -m determined.launch.torch_distributed --rdzv_endpoint=h:1 -- train.py --lr 1",
     ["python3", "-m", "dethpc.launch.torch_distributed", "--mode", "torchrun",
      "--rdzv_endpoint=h:1", "--", "train.py", "--lr", "1"]),
    ("python3 -m determined.launch.deepspeed --trial model_def:DSTrial",
     ["python3", "-m", "dethpc.launch.deepspeed", "--trial", "model_def:DSTrial"]),
    ("python3 -m determined.launch.horovod --autohorovod --trial model_def:T",
     ["python3", "-m", "dethpc.launch.horovod", "--trial", "model_def:T"]),
    ("dlprof --mode=simple python3 -m determined.launch.horovod -- train.py",
     ["dlprof", "--mode=simple", "python3", "-m", "dethpc.launch.horovod", "--", "train.py"]),
    # untouched: no Determined launcher, or one named only as an argument
    ("python3 train.py --lr 1", ["python3", "train.py", "--lr", "1"]),
    ("echo -m determined.launch.horovod", ["echo", "-m", "determined.launch.horovod"]),
])
def test_determined_launcher_entrypoints_map(entrypoint: str, argv: list[str]) -> None:
    assert entrypoint_argv(entrypoint, PY) == argv


@pytest.mark.parametrize(("entrypoint", "match"), [
    ("python3 -m determined.launch.tensorflow -- train.py", "no TensorFlow launcher"),
    ("python3 -m determined.launch.horovod --fusion-threshold-mb 1 -- train.py",
     "horovodrun flags"),
    ("python3 -m determined.launch.autohorovod train.py", "no launcher named"),
])
def test_determined_launchers_without_counterpart_are_refused(entrypoint: str,
                                                             match: str) -> None:
    with pytest.raises(SubmitError, match=match):
        entrypoint_argv(entrypoint, PY)


def test_mapped_argv_parses_as_dethpc_launcher_args() -> None:
    argv = from_determined(["python3", "-m", "determined.launch.torch_distributed",
                            "--nnodes=1", "--", "python3", "train.py", "--epochs", "2"])
    args = parse_launcher_args(argv[3:], ("--mode",))
    assert args.options == {"mode": "torchrun"} and args.overrides == ("--nnodes=1",)
    assert args.target == Target("file", "train.py", ("--epochs", "2"))


@pytest.mark.parametrize(("tokens", "target"), [
    (["python3", "train.py", "--a"], Target("file", "train.py", ("--a",))),
    (["python3.11", "-m", "pkg.main"], Target("module", "pkg.main", ())),
    (["/usr/bin/python", "x.py"], Target("file", "x.py", ())),
    (["python3", "-c", "print(1)"], Target("command", "python3", ("-c", "print(1)"))),
    (["pythonista", "x.py"], Target("command", "pythonista", ("x.py",))),
])
def test_python_script_targets_run_under_the_exit_guard(tokens: list[str],
                                                        target: Target) -> None:
    assert parse_launcher_args(tokens, ()).target == target


def test_from_horovod_reads_the_module() -> None:
    class Hvd:
        def rank(self) -> int: return 0
        def size(self) -> int: return 1
        def local_rank(self) -> int: return 0
        def local_size(self) -> int: return 1
        def cross_rank(self) -> int: return 0
        def cross_size(self) -> int: return 1

    d = DistributedContext.from_horovod(Hvd())
    assert (d.rank, d.size, d.get_num_agents(), d.broadcast("x")) == (0, 1, 1, "x")


def test_should_preempt_auto_ack_false_waits_for_the_acknowledgement(tmp_path: Path) -> None:
    trial = _trial(tmp_path)
    with core.init(env={"DETHPC_TRIAL_DIR": str(trial)}, exit_on_preempt=False) as ctx:
        (trial / "stop").write_text("pause")
        assert ctx.preempt.should_preempt(auto_ack=False) is True
        assert ctx.preempt.exit_code() is None
        ctx.preempt.acknowledge_preemption_signal()
        assert ctx.preempt.exit_code() == 81


# ------------------------------------------------------------ examples/core_api
CORE_API = Path(__file__).resolve().parents[3] / "examples" / "core_api"
CONFIGS = sorted(CORE_API.glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_core_api_examples_validate_and_run_dethpc_commands(path: Path) -> None:
    from dethpc.config import load_experiment_config

    cfg = load_experiment_config(path)
    argv = entrypoint_argv(cfg.entrypoint, PY)
    assert not any(a.startswith("determined.") for a in argv), argv
    assert cfg.searcher.max_length is None or cfg.searcher.name == "adaptive_asha"
    source = "".join(p.read_text() for p in CORE_API.glob("model_def*.py"))
    assert "import dethpc as det" in source and "from dethpc" not in source


def test_submit_refuses_a_determined_launcher_without_counterpart(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """On the local backend too (no sbatch --test-only renders the script there)."""
    import yaml

    from dethpc.surfaces.cli import main as cli_main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "tf", "entrypoint": "python3 -m determined.launch.tensorflow -- train.py",
        "searcher": {"name": "single", "metric": "loss"}}))
    monkeypatch.setattr(sys, "argv", ["dethpc", "experiment", "create", str(cfg),
                                      str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        cli_main.main()
    err = " ".join(capsys.readouterr().err.split())
    assert exc.value.code == 2 and "Traceback" not in err
    assert "determined.launch.tensorflow" in err and "no TensorFlow launcher" in err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_stray_connection_does_not_take_a_ranks_place() -> None:
    import threading

    from dethpc.core._ipc import StarChief, StarWorker

    port = _free_port()
    got: list[Any] = []

    def peers() -> None:
        deadline = time.monotonic() + 20
        while True:  # a stranger first: connects, sends junk, hangs up
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(b"\x00\x00\x00\x00\x00\x00\x00\x03abc")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        worker = StarWorker(1, "127.0.0.1", port, timeout_s=20)
        got.append(worker.allgather("w"))
        worker.close()

    thread = threading.Thread(target=peers)
    thread.start()
    chief = StarChief(2, port, timeout_s=20)
    assert chief.allgather("c") == ["c", "w"]
    thread.join(timeout=20)
    chief.close()
    assert got == [["c", "w"]]


def test_trial_info_in_a_trial_dir_without_ids(tmp_path: Path) -> None:
    """``--local --test`` runs the entrypoint in a throw-away trial directory."""
    info = core.get_cluster_info(env={"DETHPC_TRIAL_DIR": str(_trial(tmp_path))})
    assert info is not None and info.trial.trial_id == 0
    assert info.trial.hparams["lr"] == 0.5
