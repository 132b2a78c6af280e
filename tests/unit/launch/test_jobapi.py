"""The shell-level job API (dethpc.launch.jobapi, issue 13 item 3): pure pieces by tables,
every verb over a temporary trial directory, and what the verbs write read back by
the daemon's reconciler (metrics and checkpoints in the store)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from dethpc.common.paths import ExperimentPaths
from dethpc.jobs.script_jobs import hparam_exports as search_hparam_env
from dethpc.launch.jobapi import hparam_env
from dethpc.launch.jobapi._cli import run
from dethpc.launch.jobapi._values import (
    JobApiError,
    StopWhy,
    current_run,
    parse_pairs,
    parse_value,
    stop_reason,
)
from dethpc.store import Store
from dethpc.store.models import Checkpoint, Experiment, Metric, Trial
from tests.unit.control.test_reconcile_store import new_experiment, tick

# ------------------------------------------------------------------ pure pieces


@pytest.mark.parametrize(("raw", "value"), [
    ("0.5", 0.5), ("3", 3), ("-2e-3", -2e-3), ("true", True), ("false", False),
    ("null", None), ("[1, 2]", [1, 2]), ('{"a": 1}', {"a": 1}), ('"quoted"', "quoted"),
    ("hello", "hello"), ("a b", "a b"), ("", ""), ("True", "True"), ("0x10", "0x10"),
    ("1,5", "1,5"),
])
def test_parse_value(raw: str, value: Any) -> None:
    assert parse_value(raw) == value
    assert type(parse_value(raw)) is type(value)


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity"])
def test_non_finite_values_are_floats_that_the_writer_turns_into_null(raw: str) -> None:
    assert not math.isfinite(parse_value(raw))


@pytest.mark.parametrize(("words", "out"), [
    (["loss=0.5"], {"loss": 0.5}),
    (["loss=0.5", "tag=a=b"], {"loss": 0.5, "tag": "a=b"}),
    (["empty="], {"empty": ""}),
    (["a.b=1"], {"a.b": 1}),
])
def test_parse_pairs(words: list[str], out: dict[str, Any]) -> None:
    assert parse_pairs(words, "metric") == out


@pytest.mark.parametrize(("words", "says"), [
    (["loss"], "'loss' is not key=value"),
    (["=1"], "'=1' is not key=value"),
    (["loss=1", "loss=2"], "'loss' is given twice"),
])
def test_bad_pairs(words: list[str], says: str) -> None:
    with pytest.raises(JobApiError, match=says) as exc:
        parse_pairs(words, "metric")
    assert exc.value.exit_code == 2


HPARAM_CASES: list[tuple[dict[str, Any], dict[str, str]]] = [
    ({"lr": 0.01}, {"DETHPC_HP_LR": "0.01"}),
    ({"name": "a b'$x"}, {"DETHPC_HP_NAME": "a b'$x"}),
    ({"opt": {"name": "adam", "beta-1": 0.9}},
     {"DETHPC_HP_OPT_NAME": "adam", "DETHPC_HP_OPT_BETA_1": "0.9"}),
    ({"flag": True, "none": None, "layers": [1, 2], "n": 3},
     {"DETHPC_HP_FLAG": "true", "DETHPC_HP_NONE": "null", "DETHPC_HP_LAYERS": "[1, 2]",
      "DETHPC_HP_N": "3"}),
    ({"a": {"b": {"c": "x"}}}, {"DETHPC_HP_A_B_C": "x"}),
    ({}, {}),
]


@pytest.mark.parametrize(("hparams", "env"), HPARAM_CASES)
def test_hparam_env(hparams: dict[str, Any], env: dict[str, str]) -> None:
    assert hparam_env(hparams) == env
    # the search wrapper's own copy of the rule names the same variables
    assert search_hparam_env(hparams) == env


@pytest.mark.parametrize(("env", "run_id"), [
    ({}, 0), ({"SLURM_RESTART_COUNT": "2"}, 2), ({"DETHPC_RUN_ID": "3"}, 3),
    ({"DETHPC_RUN_ID": "1", "SLURM_RESTART_COUNT": "4"}, 1),
    ({"DETHPC_RUN_ID": " ", "SLURM_RESTART_COUNT": "4"}, 4),
])
def test_current_run(env: dict[str, str], run_id: int) -> None:
    assert current_run(env) == run_id


def test_a_run_number_that_is_no_number_is_an_error() -> None:
    with pytest.raises(JobApiError, match="DETHPC_RUN_ID='x'"):
        current_run({"DETHPC_RUN_ID": "x"})


@pytest.mark.parametrize(("run_id", "signal", "stop", "why"), [
    (0, None, None, None),
    (0, {"signal": "USR2", "run": 0, "time": 1}, None, StopWhy.SIGNAL),
    (1, {"signal": "USR2", "run": 0, "time": 1}, None, None),     # an earlier run's signal
    (1, {"signal": "USR2", "run": 0, "time": 1}, "stop\n", StopWhy.STOP),
    (0, None, "pause", StopWhy.PAUSE),
    (0, None, "PAUSE\n", StopWhy.PAUSE),
    (0, None, "", StopWhy.STOP),
    (0, {"signal": "USR2", "run": 0}, "pause", StopWhy.SIGNAL),    # signal first, as core
    (0, {"run": "0"}, None, None),
    (0, {"run": False}, None, None),
    (0, ["not", "an", "object"], None, None),
])
def test_stop_reason(run_id: int, signal: Any, stop: str | None, why: StopWhy | None) -> None:
    assert stop_reason(run_id, signal, stop) is why


def test_stop_words() -> None:
    assert [w.word for w in StopWhy] == ["preempt", "stop", "pause"]


# ------------------------------------------------------------------ verbs


@pytest.fixture
def trial(tmp_path: Path) -> Path:
    root = tmp_path / "trial"
    root.mkdir()
    return root


def call(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, str]:
    code = run(argv, env)
    return code, capsys.readouterr().out


def records(trial: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("argv", "kind", "steps", "metrics"), [
    (["report", "metrics", "--step", "3", "loss=0.5"], "training", 3, {"loss": 0.5}),
    (["report", "metrics", "--training", "--step", "0", "loss=1", "tag=x"], "training", 0,
     {"loss": 1, "tag": "x"}),
    (["report", "metrics", "--validation", "--step", "7", "acc=0.9", "best=true", "x=nan"],
     "validation", 7, {"acc": 0.9, "best": True, "x": None}),
])
def test_report_metrics_writes_what_train_context_writes(
        trial: Path, capsys: pytest.CaptureFixture[str], argv: list[str], kind: str,
        steps: int, metrics: dict[str, Any]) -> None:
    assert call(argv, {"DETHPC_TRIAL_DIR": str(trial)}, capsys) == (0, "")
    (rec,) = records(trial)
    assert {k: v for k, v in rec.items() if k != "time"} == {
        "kind": kind, "steps": steps, "metrics": metrics}
    assert isinstance(rec["time"], float)


@pytest.mark.parametrize(("argv", "says"), [
    (["report", "metrics", "loss=1"], "required: --step"),
    (["report", "metrics", "--step", "-1", "loss=1"], "--step -1 is negative"),
    (["report", "metrics", "--step", "two", "loss=1"], "--step 'two' is not a whole number"),
    (["report", "metrics", "--step", "1"], "required: key=value"),
    (["report", "metrics", "--step", "1", "loss"], "'loss' is not key=value"),
    (["report", "metrics", "--step", "1", "--validation", "--training", "a=1"],
     "not allowed with"),
    (["report", "checkpoint", "/nonexistent/ckpt"], "does not exist"),
    (["report", "checkpoint", "PATH", "--meta", "steps_completed=3"], "is reserved"),
    (["report"], "required"),
    (["hparams", "--json", "--env"], "not allowed with"),
])
def test_bad_input_is_one_line_and_exit_2(trial: Path, argv: list[str], says: str) -> None:
    (trial / "PATH").write_text("x")
    argv = [str(trial / "PATH") if a == "PATH" else a for a in argv]
    with pytest.raises(JobApiError, match=says) as exc:
        run(argv, {"DETHPC_TRIAL_DIR": str(trial)})
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    assert not (trial / "metrics.jsonl").exists()


@pytest.mark.parametrize(("argv", "code", "out"), [
    (["report", "metrics", "--step", "1", "a=1"], 2, ""),
    (["report", "checkpoint", "x"], 2, ""),
    (["should-stop"], 1, ""),
    (["latest-checkpoint"], 1, ""),
    (["hparams"], 0, "{}\n"),
    (["hparams", "--env"], 0, ""),
])
def test_outside_any_trial(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                           argv: list[str], code: int, out: str) -> None:
    from dethpc.launch.jobapi import main

    for name in list(os.environ):
        if name.startswith(("DETHPC_", "SLURM_")):
            monkeypatch.delenv(name)
    assert main(argv) == code
    captured = capsys.readouterr()
    assert captured.out == out
    if code == 2:
        assert captured.err == ("dethpc: error: dethpc report: not inside a dethpc trial or a "
                                "Slurm job (DETHPC_TRIAL_DIR is unset and this is no Slurm job "
                                "that could register itself)\n")


def acks(trial: Path) -> list[dict[str, Any]]:
    path = trial / "stop-acks.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_should_stop_answers_the_current_run_and_acks_each_yes(
        trial: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"DETHPC_TRIAL_DIR": str(trial), "DETHPC_RUN_ID": "1"}
    assert call(["should-stop"], env, capsys) == (1, "")
    (trial / "signal.json").write_text('{"signal": "USR2", "run": 0, "time": 5}\n')
    assert call(["should-stop"], env, capsys) == (1, "")      # run 0's signal: not this run
    assert acks(trial) == []
    (trial / "signal.json").write_text('{"signal": "USR2", "run": 1, "time": 6}\n')
    assert call(["should-stop"], env, capsys) == (0, "preempt\n")
    assert call(["should-stop", "-q"], env, capsys) == (0, "")
    (trial / "signal.json").unlink()
    (trial / "stop").write_text("pause\n")
    assert call(["should-stop"], {**env, "DETHPC_RUN_ID": "", "SLURM_RESTART_COUNT": "2"},
                capsys) == (0, "pause\n")
    (trial / "stop").write_text("stop\n")
    assert call(["should-stop"], env, capsys) == (0, "stop\n")
    got = acks(trial)
    assert [(a["run"], a["why"]) for a in got] == [
        (1, "signal"), (1, "signal"), (2, "pause"), (1, "stop")]
    assert all(sorted(a) == ["run", "time", "why"] and isinstance(a["time"], int) for a in got)
    # the wrapper greps these lines: `"run": N,` and `"time": <digits>`
    assert '"run": 1, "why": "signal", "time": ' in (trial / "stop-acks.jsonl").read_text()


def test_hparams_json_and_env(trial: Path, capsys: pytest.CaptureFixture[str],
                              tmp_path: Path) -> None:
    hp = {"lr": 0.01, "opt": {"name": "a b'\"$x"}, "flag": True}
    (trial / "hparams.json").write_text(json.dumps(hp))
    env = {"DETHPC_TRIAL_DIR": str(trial)}
    code, out = call(["hparams"], env, capsys)
    assert code == 0 and json.loads(out) == hp
    assert json.loads(call(["hparams", "--json"], env, capsys)[1]) == hp
    code, out = call(["hparams", "--env"], env, capsys)
    shown = subprocess.run(["bash", "-c", out + 'printf "%s\\n" "$DETHPC_HP_LR" '
                            '"$DETHPC_HP_OPT_NAME" "$DETHPC_HP_FLAG"'],
                           capture_output=True, text=True, check=True).stdout
    assert shown == "0.01\na b'\"$x\ntrue\n"
    other = tmp_path / "search-hparams.json"
    other.write_text('{"lr": 0.5}')
    assert call(["hparams", "--env"], {**env, "DETHPC_HPARAMS": str(other)}, capsys) == (
        0, "export DETHPC_HP_LR=0.5\n")
    (trial / "hparams.json").write_text("[1]")
    with pytest.raises(JobApiError, match="must hold a JSON object"):
        run(["hparams"], env)


def test_checkpoint_of_a_directory_is_hard_linked_and_resumable(
        trial: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"DETHPC_TRIAL_DIR": str(trial)}
    src = tmp_path / "step-4"
    (src / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(b"weights")
    (src / "sub" / "opt.bin").write_bytes(b"state")
    assert call(["latest-checkpoint"], env, capsys) == (1, "")
    call(["report", "metrics", "--validation", "--step", "4", "loss=1"], env, capsys)
    code, out = call(["report", "checkpoint", str(src), "--meta", "note=best one"], env, capsys)
    stored = Path(out.strip())
    assert code == 0 and stored.name == "step-4" and stored.parent.parent == trial / "checkpoints"
    assert (stored / "model.bin").read_bytes() == b"weights"
    assert os.path.samefile(stored / "model.bin", src / "model.bin")     # hard link
    assert (src / "model.bin").read_bytes() == b"weights" and src.is_dir()  # untouched
    meta = json.loads((stored.parent / "metadata.json").read_text())
    assert meta["steps_completed"] == 4                   # the most steps reported so far
    assert sorted(meta["files"]) == ["step-4/model.bin", "step-4/sub/opt.bin"]
    assert meta["metadata"] == {"note": "best one", "steps_completed": 4,
                                "dethpc_path": "step-4"}
    rec = records(trial)[-1]
    assert (rec["kind"], rec["steps"], rec["uuid"]) == ("checkpoint", 4, stored.parent.name)
    assert call(["latest-checkpoint"], env, capsys) == (0, f"{stored}\n")
    # a later one with more steps wins; --step overrides the metrics
    single = tmp_path / "model.pt"
    single.write_bytes(b"later")
    code, out = call(["report", "checkpoint", str(single), "--step", "9", "--copy"], env, capsys)
    later = Path(out.strip())
    assert later.name == "model.pt" and not os.path.samefile(later, single)   # --copy
    assert call(["latest-checkpoint"], env, capsys) == (0, f"{later}\n")
    # a corrupt one is never resumed from
    later.write_bytes(b"changed")
    assert call(["latest-checkpoint"], env, capsys) == (0, f"{stored}\n")


def test_checkpoint_across_filesystems_is_copied(trial: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or \
            shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second writable filesystem (/dev/shm) here")
    src = shm / f"dethpc-jobapi-{os.getpid()}.bin"
    src.write_bytes(b"x" * 1000)
    try:
        code, out = call(["report", "checkpoint", str(src), "--step", "1"],
                         {"DETHPC_TRIAL_DIR": str(trial)}, capsys)
        stored = Path(out.strip())
        assert code == 0 and stored.read_bytes() == src.read_bytes()
        assert stored.stat().st_ino != src.stat().st_ino and src.stat().st_nlink == 1
    finally:
        src.unlink()


def test_a_python_api_checkpoint_resumes_from_its_uuid_dir(
        trial: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dethpc.core import CheckpointContext, DistributedContext

    ctx = CheckpointContext(trial / "checkpoints", DistributedContext())
    with ctx.store_path({"steps_completed": 2}) as (path, uuid):
        (path / "state").write_text("s")
    assert call(["latest-checkpoint"], {"DETHPC_TRIAL_DIR": str(trial)}, capsys) == (
        0, f"{trial / 'checkpoints' / uuid}\n")


# ------------------------------------------------------------------ the daemon reads it


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db.sqlite'}")


def test_the_daemon_ingests_what_the_verbs_write(store: Store, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    exp_id, trial_id, _ = new_experiment(store, tmp_path)
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        trial = ExperimentPaths(Path(exp.run_dir)).trial(trial_id).ensure().root
    env = {"DETHPC_TRIAL_DIR": str(trial)}
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "w").write_text("w")
    call(["report", "metrics", "--step", "10", "loss=0.7"], env, capsys)
    call(["report", "metrics", "--validation", "--step", "20", "loss=0.25"], env, capsys)
    code, out = call(["report", "checkpoint", str(src)], env, capsys)
    assert code == 0
    tick(store, exp_id, {})
    with store.session() as s:
        got = sorted((m.kind, m.steps, m.metrics["loss"]) for m in s.exec(select(Metric)))
        assert got == [("training", 10, 0.7), ("validation", 20, 0.25)]
        (ck,) = s.exec(select(Checkpoint)).all()
        row = s.get(Trial, trial_id)
        assert row is not None
        assert (ck.steps_completed, ck.validation_metric) == (20, 0.25)
        assert Path(ck.path) == Path(out.strip()).parent
        assert row.latest_checkpoint == ck.uuid and row.steps_completed == 20
        assert row.best_validation == 0.25


# ------------------------------------------------------------------ the light entry point


def test_the_console_script_runs_the_job_api_without_the_cli(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "dethpc"
    if not script.exists():
        pytest.skip("the dethpc console script is not installed in this environment")
    env = {**os.environ, "DETHPC_TRIAL_DIR": str(tmp_path)}
    (tmp_path / "stop").write_text("stop")
    done = subprocess.run([sys.executable, "-X", "importtime", str(script), "should-stop"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout) == (0, "stop\n")
    loaded = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
    assert "dethpc.launch.jobapi" in loaded
    heavy = {m for m in loaded
             if m.split(".")[0] in {"typer", "rich", "sqlalchemy", "sqlmodel", "jinja2", "yaml",
                                    "click", "pydantic"} or m.startswith("dethpc.surfaces.cli")}
    assert heavy == set()
    # any other word goes to the full CLI
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip()
