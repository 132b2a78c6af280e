"""Determined's CLI habits work with dethpc (issue 12, item 5).

Spellings (``e``/``t`` apps, ``e ls/lt/lc``, ``checkpoint list/download``,
``create CONFIG CONTEXT --follow``, ``--config k=v``), Determined's meanings
(``experiment list --all`` = every user's; ``experiment logs`` = the first trial's
log), the cluster ``--test`` config, and bad input: a message naming the
option or field, exit 2, no traceback. Through typer's CliRunner against a
private store, and through ``main()`` (what the console script runs) where the
exit code and the absence of a traceback are the point.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dethpc.config import parse_experiment_config
from dethpc.config.testrun import make_test_config
from dethpc.control.experiments import current_user
from dethpc.store.models import Checkpoint, CheckpointState, Experiment, Trial
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.main import app, main

CONFIG = {
    "name": "habits", "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1},
                        "model": {"width": {"type": "int", "minval": 8, "maxval": 64}},
                        "opt": "sgd"},
    "searcher": {"name": "random", "metric": "val_loss", "smaller_is_better": True,
                 "max_trials": 4, "max_length": {"epochs": 3}},
    "resources": {"slots_per_trial": 2},
    "environment": {"environment_variables": ["A=1"]},
    "min_checkpoint_period": {"batches": 50},
    "max_restarts": 5,
}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def run_main(args: list[str], capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``dethpc ARGS`` as the console script runs it (``main()``: the one place an expected
    failure becomes a message and an exit code); any other exception fails the test."""
    monkeypatch.setattr(sys, "argv", ["dethpc", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def seed_store(run_dir: Path) -> dict[str, Any]:
    """Two experiments (mine and someone else's), a trial with a log, a checkpoint."""
    ENV.cluster_path = None
    store = ENV.store
    cfg_yaml = yaml.safe_dump(CONFIG)
    with store.session() as s:
        mine = Experiment(name="mine", config_yaml=cfg_yaml, run_dir=str(run_dir),
                          owner=current_user())
        theirs = Experiment(name="theirs", config_yaml=cfg_yaml, run_dir=str(run_dir),
                            owner="someone-else")
        s.add(mine)
        s.add(theirs)
        s.flush()
        trial = Trial(experiment_id=mine.id, request_id=0, hparams={"lr": 0.1})
        s.add(trial)
        s.flush()
        ckpt_dir = run_dir / "ckpt" / "u-1"
        ckpt_dir.mkdir(parents=True)
        (ckpt_dir / "state.json").write_text('{"step": 7}')
        s.add(Checkpoint(uuid="u-1", experiment_id=mine.id, trial_id=trial.id,
                         steps_completed=7, state=CheckpointState.COMPLETED,
                         path=str(ckpt_dir)))
        ids = {"mine": mine.id, "theirs": theirs.id, "trial": trial.id}
        s.commit()
    trial_dir = run_dir / "trials" / str(ids["trial"])
    trial_dir.mkdir(parents=True)
    (trial_dir / "slurm-5_0.out").write_text("line 1\nline 2\nline 3\n")
    return ids


# ---------------------------------------------------------------- spellings
@pytest.mark.parametrize(("short", "long"), [
    (["e", "list", "--json"], ["experiment", "list", "--json"]),
    (["e", "ls", "--json"], ["experiment", "list", "--json"]),
    (["e", "lt", "{mine}", "--json"], ["experiment", "list-trials", "{mine}", "--json"]),
    (["e", "lc", "{mine}", "--json"], ["experiment", "list-checkpoints", "{mine}", "--json"]),
    (["checkpoint", "list", "{mine}", "--json"],
     ["experiment", "list-checkpoints", "{mine}", "--json"]),
    (["t", "logs", "{trial}"], ["trial", "logs", "{trial}"]),
    (["t", "describe", "{trial}", "--json"], ["trial", "describe", "{trial}", "--json"]),
    (["e", "logs", "{mine}"], ["trial", "logs", "{trial}"]),
])
def test_determined_spellings_give_the_same_output(home: Path, short: list[str],
                                                   long: list[str]) -> None:
    ids = seed_store(home / "runs" / "1")
    a = invoke(*[x.format(**ids) for x in short])
    b = invoke(*[x.format(**ids) for x in long])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    assert a.stdout == b.stdout and a.stdout.strip()


def test_experiment_logs_is_the_first_trials_log(home: Path) -> None:
    ids = seed_store(home / "runs" / "1")
    assert invoke("e", "logs", str(ids["mine"])).stdout == "line 1\nline 2\nline 3\n"
    assert invoke("e", "logs", str(ids["mine"]), "--tail", "1").stdout == "line 3\n"
    # the event log moved to `experiment events` (Determined has no such verb)
    out = invoke("experiment", "events", str(ids["mine"]), "--json")
    assert out.exit_code == 0 and json.loads(out.stdout) == []


def test_list_shows_mine_and_all_shows_everyones(home: Path) -> None:
    seed_store(home / "runs" / "1")
    names = {flags: [r["name"] for r in json.loads(invoke("e", "list", "--json", *flags).stdout)]
             for flags in [(), ("--all",), ("-a",), ("--all", "--active")]}
    assert names[()] == ["mine"]
    assert names[("--all",)] == names[("-a",)] == ["mine", "theirs"]
    assert names[("--all", "--active")] == ["mine", "theirs"]  # neither has ended


def test_checkpoint_download_copies_the_files(home: Path, tmp_path: Path) -> None:
    seed_store(home / "runs" / "1")
    out = invoke("checkpoint", "download", "u-1", "-o", str(tmp_path / "dl"))
    assert out.exit_code == 0, out.output
    assert (tmp_path / "dl" / "state.json").read_text() == '{"step": 7}'


def test_create_takes_determined_flags() -> None:
    import typer

    group = typer.main.get_command(app)
    for path in (["experiment", "create"], ["e", "create"], ["submit"]):
        cmd = group
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        flags = {opt for p in cmd.params for opt in p.opts}
        assert {"--follow", "--follow-first-trial", "-f", "--config", "-c", "--local",
                "--test", "--test-mode", "-t", "--paused"} <= flags, (path, flags)


def test_create_paused_then_unpause_and_config(home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    out = invoke("e", "create", str(cfg), str(ctx), "--paused", "--no-daemon", "--json",
                 "--config", "name=renamed")
    assert out.exit_code == 0, out.output
    exp_id = str(json.loads(out.stdout)["id"])
    assert json.loads(invoke("e", "describe", exp_id, "--json").stdout)["state"] == "PAUSED"
    assert invoke("e", "unpause", exp_id).stdout.strip() == f"experiment {exp_id}: ACTIVE"
    shown = yaml.safe_load(invoke("e", "config", exp_id).stdout)
    assert shown["name"] == "renamed" and shown["searcher"] == CONFIG["searcher"]


# ---------------------------------------------------------------- --test config
def test_test_config_is_one_batch_of_one_trial_with_its_hparams() -> None:
    hp = {"lr": 0.01, "model": {"width": 16}, "opt": "sgd"}
    raw = make_test_config(CONFIG, hp)
    assert raw["searcher"] == {"name": "single", "metric": "val_loss",
                               "smaller_is_better": True, "max_length": {"batches": 1}}
    assert raw["max_restarts"] == 0 and raw["min_validation_period"] == {"batches": 1}
    assert "min_checkpoint_period" not in raw
    assert raw["resources"] == CONFIG["resources"]  # same allocation as the real run
    assert raw["environment"]["environment_variables"] == ["A=1", "DETHPC_TEST_MODE=1"]
    assert raw["labels"] == ["test-mode"] and raw["description"] == "[test-mode] habits"
    assert CONFIG["searcher"]["name"] == "random"  # the caller's dict is untouched
    cfg = parse_experiment_config(raw)
    assert cfg.searcher.name == "single"
    from dethpc.searchers.base import Create
    from dethpc.searchers.factory import make_searcher

    creates = [a for a in make_searcher(cfg.searcher, cfg.hyperparameters,
                                        cfg.experiment_seed).initial() if isinstance(a, Create)]
    assert [c.hparams for c in creates] == [hp] and creates[0].length == 1


@pytest.mark.parametrize(("env", "expected"), [
    (None, ["DETHPC_TEST_MODE=1"]),
    (["A=1", "DETHPC_TEST_MODE=0"], ["A=1", "DETHPC_TEST_MODE=1"]),
    ({"cpu": ["A=1"], "cuda": ["B=2"]},
     {"cpu": ["A=1", "DETHPC_TEST_MODE=1"], "cuda": ["B=2", "DETHPC_TEST_MODE=1"]}),
])
def test_test_config_sets_test_mode_for_every_device(env: Any, expected: Any) -> None:
    raw = {**CONFIG, "environment": {} if env is None else {"environment_variables": env}}
    assert make_test_config(raw, {"lr": 1})["environment"]["environment_variables"] == expected


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("args", "words"), [
    (["--local", "--wait"], ["--local", "--wait"]),
    (["--local", "--follow"], ["--local", "--follow"]),
    (["--test-mode", "--paused"], ["--paused", "--test"]),
    (["--paused", "-f"], ["--paused", "--follow"]),
    (["--config", "searcher.max_trials=abc"], ["searcher.max_trials", "abc"]),
    (["--config", "searcher.name=bogus"], ["searcher.name", "bogus", "random"]),
    (["--config", "nokey"], ["nokey", "key.sub=value"]),
])
def test_bad_create_input_exits_2_without_traceback(
        home: Path, tmp_path: Path, args: list[str], words: list[str],
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    code, err = run_main(["experiment", "create", str(cfg), str(ctx), *args], capsys,
                         monkeypatch)
    assert code == 2, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)
    assert not (home / "runs").exists()  # nothing was recorded
