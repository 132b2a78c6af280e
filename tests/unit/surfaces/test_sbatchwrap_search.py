"""``dethpc sbatch --search``: the search file, the refused sbatch options, the array
script a SCRIPT experiment submits and the per-trial exports of its wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.common.errors import ConfigError
from dethpc.config.model import AshaVariant
from dethpc.surfaces.sbatchwrap.search import (
    REFUSED_OPTIONS,
    SearchOptionError,
    parse_search_config,
    refuse_options,
)

SCRIPT = Path("/home/u/proj/train.sh")
DETERMINED = Path(__file__).parents[1] / "data" / "determined" / "examples"
ASHA = {"name": "adaptive_asha", "metric": "loss", "max_trials": 8,
        "max_length": {"batches": 40}, "max_concurrent_trials": 4}
HP = {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}}


def search(**fields: Any) -> dict[str, Any]:
    return {"searcher": ASHA, "hyperparameters": HP, **fields}


# ------------------------------------------------------------------ good files
GOOD = [
    ("asha", search()),
    ("async_halving", search(searcher={"name": "async_halving", "metric": "loss",
                                       "num_rungs": 3, "max_trials": 6,
                                       "max_length": {"batches": 30}})),
    ("single no hparams", {"searcher": {"name": "single", "metric": "loss"}}),
    ("grid", search(searcher={"name": "grid", "metric": "loss"},
                    hyperparameters={"lr": {"type": "categorical", "vals": [0.1, 0.01]},
                                     "opt": {"kind": "sgd", "momentum": {
                                         "type": "double", "minval": 0, "maxval": 1,
                                         "count": 2}}})),
    ("random", search(searcher={"name": "random", "metric": "acc", "max_trials": 3,
                                "smaller_is_better": False})),
    ("metadata", search(name="lr sweep", description="d", labels=["a", "b"],
                        max_restarts=2, reproducibility={"experiment_seed": 7})),
    ("pool and GC", search(resources={"resource_pool": "low"},
                           checkpoint_storage={"save_trial_best": 2, "save_trial_latest": 1,
                                               "save_experiment_best": 0})),
    ("ignored Determined fields", search(workspace="w", project="p")),
]


@pytest.mark.parametrize("raw", [r for _, r in GOOD], ids=[n for n, _ in GOOD])
def test_good_search_files(raw: dict[str, Any]) -> None:
    cfg = parse_search_config(raw, SCRIPT, ["--epochs", "3"])
    assert cfg.entrypoint == ("train.sh", "--epochs", "3")
    assert cfg.raw["entrypoint"] == ["train.sh", "--epochs", "3"]
    assert "entrypoint" not in raw          # the user's dict is not changed


def test_values_reach_the_config() -> None:
    cfg = parse_search_config(search(max_restarts=2, resources={"resource_pool": "low"}),
                              SCRIPT)
    assert cfg.max_restarts == 2 and cfg.resources.resource_pool == "low"
    assert cfg.searcher.name == "adaptive_asha" and cfg.searcher.max_trials == 8
    assert cfg.searcher.variant == AshaVariant.STOPPING


def test_a_search_opts_its_scripts_into_the_watchdog() -> None:
    """A script has no heartbeat: its trials are watched only with ``output: true``."""
    plain = parse_search_config(search(), SCRIPT).slurm.watchdog
    assert not plain.watches(wrapped_script=True)
    cfg = parse_search_config(search(slurm={"watchdog": {"output": True, "max_idle_s": 600}}),
                              SCRIPT)
    assert cfg.slurm.watchdog.watches(wrapped_script=True)
    assert cfg.slurm.watchdog.max_idle_s == 600


# ------------------------------------------------------------------ bad files
BAD = [
    ("entrypoint", search(entrypoint="python3 train.py"), "entrypoint",
     "the script is the entrypoint"),
    ("slurm section", search(slurm={"sbatch_args": ["-N2"]}), "slurm.sbatch_args",
     "#SBATCH"),
    ("slurm section, beside the watchdog",
     search(slurm={"watchdog": {"output": True}, "time": "10"}), "slurm.time",
     "allowed: 'watchdog'"),
    ("slurm, a bad watchdog", search(slurm={"watchdog": {"output": "on"}}),
     "slurm.watchdog.output", "expected true or false"),
    ("environment", search(environment={"environment_variables": ["A=1"]}), "environment",
     "--export"),
    ("slots", search(resources={"slots_per_trial": 2}), "resources.slots_per_trial",
     "allowed: 'resource_pool'"),
    ("storage type", search(checkpoint_storage={"type": "shared_fs", "host_path": "/x"}),
     "checkpoint_storage.type", "dethpc report checkpoint"),
    ("unknown", search(searchr={"name": "single"}), "searchr", "did you mean 'searcher'"),
    ("promotion", search(searcher={**ASHA, "variant": "promotion"}), "searcher.variant",
     "allowed: 'stopping'"),
    ("no searcher", {"hyperparameters": HP}, "searcher", "required"),
    ("bad searcher", search(searcher={"name": "nope", "metric": "m"}), "searcher.name",
     "allowed:"),
    ("bad hparam", search(hyperparameters={"lr": {"type": "log", "minval": 1}}),
     "hyperparameters.lr", ""),
    ("bad restarts", search(max_restarts=-1), "max_restarts", ""),
    ("not a mapping", ["searcher"], "<root>", "expected a mapping"),
]


@pytest.mark.parametrize(("raw", "path", "words"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_search_files(raw: Any, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_search_config(raw, SCRIPT, source="search.yaml")
    text = str(exc.value)
    assert text.startswith("search.yaml is invalid")
    assert f"  - {path}" in text, text
    assert words in text, text
    assert exc.value.exit_code != 0


def test_hparam_variable_clash_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_search_config(search(hyperparameters={"lr-a": 0.1, "lr_a": 0.2}), SCRIPT)
    assert "DETHPC_HP_LR_A" in str(exc.value)


def test_dethpc_submit_still_requires_an_entrypoint() -> None:
    """The synthetic entrypoint is the search's: ``dethpc submit`` validation is unchanged."""
    from dethpc.config import parse_experiment_config

    with pytest.raises(ConfigError, match="entrypoint: required"):
        parse_experiment_config(search())


def determined_blocks() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DETERMINED.glob("*/*.yaml")):
        raw = yaml.safe_load(path.read_text())
        block = {k: raw[k] for k in ("searcher", "hyperparameters", "name", "description",
                                     "labels", "max_restarts", "reproducibility")
                 if raw.get(k) is not None}
        out.append((f"{path.parent.name}/{path.name}", block))
    return out


@pytest.mark.parametrize("raw", [b for _, b in determined_blocks()],
                         ids=[n for n, _ in determined_blocks()])
def test_determined_example_search_blocks(raw: dict[str, Any]) -> None:
    """Every Determined example's searcher + hyperparameters block is a search file."""
    cfg = parse_search_config(raw, SCRIPT)
    assert cfg.searcher.name


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("option", sorted(REFUSED_OPTIONS))
def test_refused_options(option: str) -> None:
    with pytest.raises(SearchOptionError) as exc:
        refuse_options([("--partition", "command line"), (option, "script line 4")])
    assert f"{option} (script line 4) cannot be used with --search" in str(exc.value)
    assert exc.value.exit_code == 2


def test_array_refusal_says_the_search_makes_its_own() -> None:
    with pytest.raises(SearchOptionError, match="the search makes its own array"):
        refuse_options([("--array", "command line")])


def test_plain_options_pass() -> None:
    refuse_options([("--partition", "command line"), ("--time", "script line 2"),
                    ("--output", "script line 3"), ("--signal", "SBATCH_SIGNAL")])


# ------------------------------------------------------------------ submit environment
MERGE = [
    # (export, expected keys taken from the submitter)
    (None, {"PATH": "/venv/bin", "FOO": "x", "BASH_FUNC_module%%": "() {  echo m\n}"}),
    ("ALL", {"PATH": "/venv/bin", "FOO": "x", "BASH_FUNC_module%%": "() {  echo m\n}"}),
    ("ALL,EXTRA=1", {"PATH": "/venv/bin", "FOO": "x",
                     "BASH_FUNC_module%%": "() {  echo m\n}"}),
    ("NONE", {}),
    ("NIL", {}),
    ("FOO,BAR=2", {"FOO": "x"}),
    ("PATH", {"PATH": "/venv/bin"}),
]
SUBMITTED = {"PATH": "/venv/bin", "FOO": "x", "SLURM_JOB_ID": "7", "SBATCH_PARTITION": "p",
             "CUDA_VISIBLE_DEVICES": "0,1", "DETHPC_TRIAL_ID": "3", "PWD": "/submit",
             "BASH_FUNC_module%%": "() {  echo m\n}"}
JOB = {"PATH": "/usr/bin", "SLURM_JOB_ID": "99", "CUDA_VISIBLE_DEVICES": "3",
       "DAEMON_ONLY": "d", "PWD": "/work"}


@pytest.mark.parametrize(("export", "taken"), MERGE, ids=[str(m[0]) for m in MERGE])
def test_submit_env_merge(export: str | None, taken: dict[str, str]) -> None:
    from dethpc.launch.submitenv import merge

    out = merge(JOB, SUBMITTED, export)
    assert out == {**JOB, **taken}
    # Slurm's per-job values always win
    assert out["SLURM_JOB_ID"] == "99" and out["CUDA_VISIBLE_DEVICES"] == "3"
    assert out["PWD"] == "/work" and "SBATCH_PARTITION" not in out


def test_submit_env_roundtrip_and_exec(tmp_path: Path) -> None:
    """The file keeps any byte but NUL (newlines, '=', odd encodings); the runner
    execs the command in the merged environment."""
    import subprocess
    import sys

    from dethpc.launch import submitenv

    env = {"A": "x=y\nz", "B": "", "C": "\udcff caf\u00e9 $HOME 'q' \"d\""}
    f = tmp_path / "submit-env"
    submitenv.save(f, env)
    assert submitenv.load(f.read_bytes()) == env
    assert f.stat().st_mode & 0o777 == 0o600
    out = subprocess.run(
        [sys.executable, "-I", "-S", submitenv.__file__, str(f), "-", "--",
         sys.executable, "-c", "import os; print(repr(os.environ['A']), os.environ['SLURM_X'])"],
        env={"SLURM_X": "job", "A": "daemon"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "'x=y\\nz' job"


# ------------------------------------------------------------------ recording and the array
def record(tmp_path: Path, options: list[tuple[str, str]], search_raw: dict[str, Any],
           env: dict[str, str] | None = None) -> tuple[Any, int, Any]:
    from dethpc.backends.local import LocalBackend
    from dethpc.config.model import ClusterConfig, ResourcePool
    from dethpc.store import Store
    from dethpc.surfaces.sbatchwrap.search import submit_search

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=5\necho hi\n")
    script.chmod(0o755)
    search_file = tmp_path / "search.yaml"
    search_file.write_text(yaml.safe_dump(search_raw))
    cluster = ClusterConfig(runs_root=tmp_path / "runs", pools={
        "default": ResourcePool(name="default"),
        "low": ResourcePool(name="low", partition="low", qos="lowq", signal="USR1",
                            signal_grace_s=45, default_time="30", sbatch_args=("--nice=5",))})
    store = Store(f"sqlite:///{tmp_path}/db.sqlite")
    exp_id = submit_search(store, cluster, LocalBackend(tmp_path / "spool"),
                           search_file=search_file, script=script, args=["--lr-scale", "a b"],
                           options=options, submit_dir=tmp_path / "sub",
                           environ=env or {"PATH": "/venv/bin:/usr/bin"})
    return store, exp_id, cluster


def test_recorded_as_script_experiment(tmp_path: Path) -> None:
    from dethpc.common.kinds import ExperimentKind
    from dethpc.common.paths import ExperimentPaths
    from dethpc.control.experiments import get_experiment
    from dethpc.jobs.script_jobs import SearchSubmission
    from dethpc.launch.submitenv import load

    store, exp_id, _ = record(tmp_path, [("--time=5", "script line 2"),
                                         ("-p high", "command line")],
                              search(name="sweep", labels=["x"]))
    exp = get_experiment(store, exp_id)
    assert exp.kind == ExperimentKind.SCRIPT and exp.name == "sweep"
    paths = ExperimentPaths(Path(exp.run_dir))
    assert paths.script.read_text().startswith("#!/bin/bash")
    assert paths.script.stat().st_mode & 0o100    # the copy runs like the original
    sub = SearchSubmission.from_json(paths.submission.read_text())
    assert sub.directives == ("--time=5", "-p high")
    assert sub.args == ("--lr-scale", "a b") and sub.script_name == "train.sh"
    assert sub.submit_dir == str((tmp_path / "sub").resolve())
    assert load(paths.submit_env.read_bytes()) == {"PATH": "/venv/bin:/usr/bin"}
    assert yaml.safe_load(exp.config_yaml)["entrypoint"] == ["train.sh", "--lr-scale", "a b"]


def test_refused_option_records_nothing(tmp_path: Path) -> None:
    from sqlmodel import select

    from dethpc.store import Store
    from dethpc.store.models import Experiment

    with pytest.raises(SearchOptionError, match=r"--array \(script line 3\)"):
        record(tmp_path, [("--array=0-3", "script line 3")], search())
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    with Store(f"sqlite:///{tmp_path}/db.sqlite").session() as s:
        assert list(s.exec(select(Experiment))) == []


def test_bad_search_file_records_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="searcher.variant"):
        record(tmp_path, [], search(searcher={**ASHA, "variant": "promotion"}))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize(("chdir", "expected"), [
    (None, "sub"), ("-D elsewhere", "sub/elsewhere"), ("--chdir=/abs/dir", "/abs/dir")])
def test_jobs_start_in_the_submit_dir_or_chdir(chdir: str | None, expected: str) -> None:
    from dethpc.jobs.script_jobs import SearchSubmission

    sub = SearchSubmission(script_name="t.sh", script_path="/x/t.sh", args=(),
                           submit_dir="/home/u/sub", directives=(
                               ("--time=5",) + ((chdir,) if chdir else ())))
    assert sub.workdir == Path("/home/u") / expected


ARRAYS = [
    # (search extras, user directives, expected directives in order)
    ({}, ["--time=5", "--partition=high"],
     ["--time=5", "--partition=high", "--requeue", "--signal=B:USR2@120"]),
    ({}, ["--no-requeue", "--signal=USR1@30"], ["--no-requeue", "--signal=USR1@30"]),
    ({"resources": {"resource_pool": "low"}}, ["-p high"],
     ["--partition=low", "--qos=lowq", "--time=30", "--nice=5", "-p high", "--requeue",
      "--signal=B:USR1@45"]),
]


@pytest.mark.parametrize(("extra", "user", "expected"), ARRAYS)
def test_array_script_directives(tmp_path: Path, extra: dict[str, Any], user: list[str],
                                 expected: list[str]) -> None:
    """The pool's placement (when named) first, the user's lines in their order (the
    later wins in sbatch), dethpc's --requeue and early signal unless the user set them."""
    from dethpc.common.kinds import ExperimentKind
    from dethpc.control.experiments import get_experiment
    from dethpc.jobs.kinds import jobs_for

    store, exp_id, cluster = record(tmp_path, [(d, "command line") for d in user],
                                    search(**extra))
    exp = get_experiment(store, exp_id)
    from dethpc.control.reconcile import load_config

    jobs = jobs_for(ExperimentKind.SCRIPT, Path(exp.run_dir))
    text = jobs.array_script(load_config(exp), cluster, run_dir=Path(exp.run_dir),
                             exp_id=exp_id, batch_id=3, tasks=[(0, Path("/r/t 1/job.sbatch"))])
    lines = text.splitlines()
    assert [ln.removeprefix("#SBATCH ") for ln in lines if ln.startswith("#SBATCH ")] == expected
    assert "  0) exec " in text and "-- /bin/bash '/r/t 1/job.sbatch' ;;" in text
    assert jobs.workdir(Path(exp.run_dir)) == (tmp_path / "sub").resolve()


# ------------------------------------------------------------------ the trial wrapper
ODD = {"lr": 0.01, "name": "a b 'c' \"d\" $HOME `x` \\ \n e", "opt": {"kind": "sgd"},
       "layers": [1, 2], "flag": True}
PRINT_ENV = """#!/bin/bash
python3 - "$@" <<'PY'
import json, os, sys
keys = sorted(k for k in os.environ if k.startswith("DETHPC_"))
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(),
                  "env": {k: os.environ[k] for k in keys}}))
PY
if [ -n "${ACK:-}" ]; then
  printf '{"run": 0, "why": "%s", "time": %s.25}\\n' "$ACK" "${ACK_TIME:-$(date +%s)}" \\
    >>"$DETHPC_TRIAL_DIR/stop-acks.jsonl"
fi
exit "${RC:-0}"
"""


def run_wrapper(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any],
                                                                          list[dict[str, Any]]]:
    import json
    import os
    import subprocess
    import sys

    from dethpc.common.paths import ExperimentPaths
    from dethpc.config.model import ClusterConfig, ResourcePool
    from dethpc.jobs.protocol import TrialJob
    from dethpc.jobs.script_jobs import ScriptJobs, SearchSubmission

    paths = ExperimentPaths(tmp_path / "run").ensure()
    paths.context.mkdir()
    paths.script.write_text(PRINT_ENV)
    paths.script.chmod(0o755)
    sub = SearchSubmission(script_name="train.sh", script_path="/x/train.sh",
                           args=("--x", "a b", "$y"), submit_dir=str(tmp_path),
                           directives=())
    cfg = parse_search_config(search(), SCRIPT)
    cluster = ClusterConfig(runs_root=tmp_path, pools={"default": ResourcePool(name="default")})
    tp = paths.trial(5).ensure()
    tp.hparams.write_text(json.dumps(ODD))
    text = ScriptJobs(sub, paths).trial_script(
        cfg, cluster, backend="local", python=sys.executable, run_dir=paths.root,
        trial=TrialJob(exp_id=2, trial_id=5, hparams=ODD, target_length=40, unit="batches"))
    tp.job_script.write_text(text)
    subprocess.run(["bash", "-n", str(tp.job_script)], check=True)
    proc = subprocess.run(["bash", str(tp.job_script)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=60)
    assert proc.stdout == "", proc.stdout   # local: the output goes to the trial dir
    (log,) = tp.root.glob("slurm-*.out")
    seen = json.loads(log.read_text().splitlines()[0])
    exits = [json.loads(ln) for ln in tp.exit_log.read_text().splitlines()]
    return seen, exits


def test_wrapper_exports_hparams_exactly(tmp_path: Path) -> None:
    """Odd values (spaces, quotes, $, backquotes, backslash, newline) reach the script
    byte for byte; arguments too; the trial's files and target are exported."""
    seen, exits = run_wrapper(tmp_path)
    env = seen["env"]
    assert env["DETHPC_HP_NAME"] == ODD["name"]
    assert env["DETHPC_HP_LR"] == "0.01" and env["DETHPC_HP_OPT_KIND"] == "sgd"
    assert env["DETHPC_HP_LAYERS"] == "[1, 2]" and env["DETHPC_HP_FLAG"] == "true"
    assert env["DETHPC_HPARAMS"] == str(tmp_path / "run" / "trials" / "5" / "hparams.json")
    assert env["DETHPC_TRIAL_ID"] == "5" and env["DETHPC_EXPERIMENT_ID"] == "2"
    assert env["DETHPC_TARGET_LENGTH"] == "40" and env["DETHPC_TARGET_UNIT"] == "batches"
    assert env["DETHPC_RUN_ID"] == "0"
    assert seen["argv"] == ["--x", "a b", "$y"] and seen["cwd"] == str(tmp_path)
    assert [e["reason"] for e in exits] == ["completed"]


@pytest.mark.parametrize(("env", "reason"), [
    ({"ACK": "stop"}, "stopped"), ({"ACK": "pause"}, "stopped"), ({"RC": "3"}, "error"),
    ({}, "completed"),
    # an answer given to an earlier job of the trial (also run 0) is not this run's
    ({"ACK": "stop", "ACK_TIME": "1000"}, "completed")])
def test_wrapper_exit_records(tmp_path: Path, env: dict[str, str], reason: str) -> None:
    """Exit 0 after `dethpc should-stop` said yes to a searcher stop is ``stopped``."""
    _, exits = run_wrapper(tmp_path, env)
    assert [(e["reason"], e["restart"]) for e in exits] == [(reason, 0)]


# ------------------------------------------------------------------ the command
def test_command_line_parsing() -> None:
    from dethpc.surfaces.sbatchwrap.search_cli import parse_command

    cmd = parse_command(["--search", "s.yaml", "-p", "high", "--time", "5", "--parsable",
                         "--requeue", "-N2", "--config", "searcher.max_trials=2",
                         "--exclusive", "train.sh", "--lr", "-x", "a b"])
    assert cmd.search_file == Path("s.yaml") and cmd.parsable
    assert cmd.options == ["-p high", "--time=5", "--requeue", "-N2", "--exclusive"]
    assert cmd.overrides == ["searcher.max_trials=2"]
    assert cmd.script == Path("train.sh") and cmd.args == ["--lr", "-x", "a b"]


def test_script_header_and_env_precedence() -> None:
    from dethpc.surfaces.sbatchwrap.search_cli import SearchCommand, submission_options

    text = ("#!/bin/bash\n#SBATCH --time=5 -p low\n# plain comment\n\n"
            "#SBATCH --job-name \"a b\"  # trailing comment\n#SBATCHX --nope\n"
            "echo hi\n#SBATCH --ignored-after-code\n")
    opts = submission_options(SearchCommand(options=["-p high"]), text,
                              {"SBATCH_PARTITION": "mid", "SBATCH_REQUEUE": "1", "HOME": "/h"})
    assert opts == [("--time=5", "script line 2"), ("-p low", "script line 2"),
                    ("--job-name=a b", "script line 5"), ("--partition=mid", "SBATCH_PARTITION"),
                    ("--requeue", "SBATCH_REQUEUE"), ("-p high", "command line")]


def cli_search(home: Path, tmp_path: Path, *args: str, script: str = "#!/bin/bash\necho\n",
               raw: dict[str, Any] | None = None) -> Any:
    import os

    from typer.testing import CliRunner

    from dethpc.surfaces.cli.main import app

    (tmp_path / "train.sh").write_text(script)
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(raw or search()))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(app, ["sbatch", "--no-daemon", *args])
    finally:
        os.chdir(old)


def test_cli_prints_the_experiment(home: Path, tmp_path: Path) -> None:
    out = cli_search(home, tmp_path, "--search", "search.yaml", "-J", "x", "train.sh", "a")
    assert out.exit_code == 0, out.output
    assert out.stdout == "Submitted experiment 1\n"
    out = cli_search(home, tmp_path, "--parsable", "--search", "search.yaml", "train.sh")
    assert out.exit_code == 0 and out.stdout == "2\n", out.output


@pytest.mark.parametrize(("args", "script", "words"), [
    (["--wrap", "echo hi"], "#!/bin/bash\n", "--wrap (command line) cannot be used"),
    (["--array=0-3", "train.sh"], "#!/bin/bash\n", "the search makes its own array"),
    (["train.sh"], "#!/bin/bash\n#SBATCH -a 0-3\necho\n", "--array (script line 2)"),
    (["-d", "afterok:1", "train.sh"], "#!/bin/bash\n", "--dependency (command line)"),
])
def test_cli_refuses_before_recording(home: Path, tmp_path: Path, args: list[str],
                                      script: str, words: str,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``main()`` (the console script): exit 2, the option, where it came from."""
    import sys

    from dethpc.surfaces.cli.main import main

    (tmp_path / "train.sh").write_text(script)
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(search()))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["dethpc", "sbatch", "--search", "search.yaml", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert words in " ".join(capsys.readouterr().err.split())
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
