"""``dethpc sbatch`` (plain mode), pure parts: array ids, what is added, the header the
wrapper re-emits, where the script comes from, what is printed, and the wrapper's text
(run with bash for its task dispatch). The real sbatch: tests/slurm/test_sbatch_wrap_slurm.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.common.errors import DethpcError
from dethpc.common.jsonlines import read_new_lines
from dethpc.common.paths import ExperimentPaths
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.surfaces.sbatchwrap import plain
from dethpc.surfaces.sbatchwrap.arrays import ArraySpecError, parse_array
from dethpc.surfaces.sbatchwrap.search_cli import parse_command

ARRAYS = [
    ("0-3", (0, 1, 2, 3), 0),
    ("1,3,5-7", (1, 3, 5, 6, 7), 0),
    ("0-15:4", (0, 4, 8, 12), 0),
    ("0-9%2", (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 2),
    ("7", (7,), 0),
    ("3,1,3", (1, 3), 0),
    ("0-2,1-4:2%1", (0, 1, 2, 3), 1),
]


@pytest.mark.parametrize(("spec", "ids", "throttle"), ARRAYS)
def test_array_ids(spec: str, ids: tuple[int, ...], throttle: int) -> None:
    got = parse_array(spec)
    assert (got.indices, got.throttle) == (ids, throttle)


@pytest.mark.parametrize(("spec", "words"), [
    ("", "no task ids"), ("a-b", "not a task id"), ("5-2", "empty range"),
    ("0-4:0", "empty range"), ("0-3%x", "after %"), ("0-2000", "MaxArraySize"),
    ("1,,2", "not a task id"),
])
def test_array_refused(spec: str, words: str) -> None:
    with pytest.raises(ArraySpecError, match=words):
        parse_array(spec)


CLUSTER = ClusterConfig(backend="slurm", runs_root=Path("/tmp/x"), pools={
    "default": ResourcePool(name="default", partition="debug", signal="USR1",
                            signal_grace_s=30),
    "spot": ResourcePool(name="spot", partition="low", signal="USR2", signal_grace_s=90)})

SCRIPT = """#!/bin/bash
#SBATCH --partition=debug
#SBATCH -t 5   # minutes

#SBATCH --job-name="my job"
# a comment
echo hello
#SBATCH --array=0-99
"""


def plan(argv: list[str], text: str = SCRIPT, environ: dict[str, str] | None = None,
         tmp: Path | None = None) -> plain.PlainJob:
    cwd = tmp or Path("/nonexistent")
    cmd = parse_command(argv)
    return plain.plan(cmd, CLUSTER, cwd=cwd, environ=environ or {},
                      stdin_text=text if cmd.script is None else None)


def write(tmp: Path, text: str = SCRIPT, name: str = "job.sh") -> Path:
    (tmp / name).write_text(text)
    return tmp / name


ADDITIONS = [
    # (command line, script, env) -> additions
    ([], SCRIPT, {}, ("--requeue", "--signal=B:USR1@30")),
    (["--no-requeue"], SCRIPT, {}, ("--signal=B:USR1@30",)),
    (["--requeue"], SCRIPT, {}, ("--signal=B:USR1@30",)),
    (["--signal=USR2@60"], SCRIPT, {}, ("--requeue",)),
    ([], SCRIPT.replace("-t 5", "--signal=B:TERM@20"), {}, ("--requeue",)),
    ([], SCRIPT, {"SBATCH_NO_REQUEUE": "1"}, ("--signal=B:USR1@30",)),
    ([], SCRIPT, {"SBATCH_SIGNAL": "B:USR2@10"}, ("--requeue",)),
    (["-p", "low"], SCRIPT, {}, ("--requeue", "--signal=B:USR2@90")),      # the spot pool's
    ([], SCRIPT.replace("=debug", "=low"), {}, ("--requeue", "--signal=B:USR2@90")),
    (["--partition=nowhere"], SCRIPT, {}, ("--requeue", "--signal=B:USR1@30")),  # default
]


@pytest.mark.parametrize(("argv", "text", "env", "want"), ADDITIONS)
def test_what_is_added(tmp_path: Path, argv: list[str], text: str, env: dict[str, str],
                       want: tuple[str, ...]) -> None:
    write(tmp_path, text)
    assert plan([*argv, "job.sh"], text, env, tmp_path).additions == want


def test_header_is_the_scripts_own_up_to_the_first_command() -> None:
    assert plain.header_of(SCRIPT) == (
        '#!/bin/bash\n#SBATCH --partition=debug\n#SBATCH -t 5   # minutes\n\n'
        '#SBATCH --job-name="my job"\n# a comment')
    # another interpreter: the wrapper is bash, the script keeps its own when it runs
    assert plain.header_of("#!/usr/bin/env python3\n#SBATCH -n 2\nimport os\n") == \
        "#!/bin/bash\n#SBATCH -n 2"


def test_words_for_sbatch_are_the_users_own(tmp_path: Path) -> None:
    write(tmp_path)
    job = plan(["-p", "low", "--time=3", "-N1", "--parsable", "-Q", "job.sh", "a b", "-x"],
               tmp=tmp_path)
    assert job.sbatch_words == ("-p", "low", "--time=3", "-N1")
    assert job.args == ("a b", "-x")
    assert (job.parsable, job.quiet) == (True, True)
    assert job.name == "my job"                     # the script's --job-name
    assert job.array is not None and job.array.indices == (0,) or True
    assert plain.sbatch_words(job, Path("/r/sbatch/job.sh")) == [
        "--parsable", "-p", "low", "--time=3", "-N1", "/r/sbatch/job.sh", "a b", "-x"]
    # the key a restarted daemon adopts the job by, unless the user set a comment
    assert plain.sbatch_words(job, Path("/r/sbatch/job.sh"), "dethpc:k")[:2] == [
        "--parsable", "--comment=dethpc:k"]
    theirs = plan(["--comment=mine", "job.sh"], tmp=tmp_path)
    assert plain.sbatch_words(theirs, Path("/r/sbatch/job.sh"), "dethpc:k") == [
        "--parsable", "--comment=mine", "/r/sbatch/job.sh"]


def test_array_comes_from_sbatchs_precedence(tmp_path: Path) -> None:
    text = SCRIPT.replace('# a comment', '#SBATCH --array=0-3%2')
    write(tmp_path, text)
    job = plan(["job.sh"], text, tmp=tmp_path)
    assert job.array is not None and job.array.indices == (0, 1, 2, 3)
    job = plan(["job.sh"], text, {"SBATCH_ARRAY_INX": "5,7"}, tmp_path)
    assert job.array is not None and job.array.indices == (5, 7)
    job = plan(["-a", "1-2", "job.sh"], text, {"SBATCH_ARRAY_INX": "5,7"}, tmp_path)
    assert job.array is not None and job.array.indices == (1, 2)
    # '#SBATCH --array=0-99' after the first command is not an option (sbatch's rule)
    write(tmp_path, SCRIPT)
    assert plan(["job.sh"], tmp=tmp_path).array is None


def test_sources_wrap_stdin_and_file(tmp_path: Path) -> None:
    job = plan(["--wrap", "python train.py --lr 0.1"], tmp=tmp_path)
    assert job.source.name == "wrap"
    assert job.source.text.endswith("\npython train.py --lr 0.1\n")
    assert "--wrap" not in " ".join(job.sbatch_words)
    job = plan(["-p", "debug"], "#!/bin/sh\necho from stdin\n", tmp=tmp_path)
    assert (job.source.name, job.name) == ("sbatch", "sbatch")
    with pytest.raises(plain.NotABatchScript, match="does not look like a batch script"):
        plan([], "echo no interpreter line\n", tmp=tmp_path)
    with pytest.raises(DethpcError, match="Unable to open file missing.sh"):
        plan(["missing.sh"], tmp=tmp_path)
    write(tmp_path)
    with pytest.raises(DethpcError, match="--wrap and a script"):
        plan(["--wrap=true", "job.sh"], tmp=tmp_path)


@pytest.mark.parametrize(("argv", "header", "want"), [
    ([], "", False), (["--forward-signal"], "", True),
    ([], "#DETHPC --forward-signal\n", True), ([], "#DETHPC --forward-signalx\n", False),
])
def test_forward_is_opt_in(tmp_path: Path, argv: list[str], header: str, want: bool) -> None:
    text = "#!/bin/bash\n" + header + "#SBATCH -t 1\nsleep 1\n"
    write(tmp_path, text)
    assert plan([*argv, "job.sh"], text, tmp=tmp_path).forward is want


@pytest.mark.parametrize(("argv", "header", "want"), [
    ([], "", None),
    (["--max-idle", "600"], "", 600.0), (["--max-idle=90.5"], "", 90.5),
    (["--max-idle", "auto"], "", "auto"),
    ([], "#DETHPC --max-idle 300\n", 300.0), ([], "#DETHPC --max-idle=auto\n", "auto"),
    (["--max-idle", "60"], "#DETHPC --max-idle 300\n", 60.0),     # the command line wins
    ([], "#DETHPC --max-idle 300\n#DETHPC --max-idle 200\n", 200.0),  # the last line
    (["--max-idle=60", "--requeue"], "#SBATCH --no-requeue\n", 60.0),  # the later wins
    ([], "#DETHPC --max-idlex 300\n", None),
])
def test_the_output_watchdog_is_opt_in(tmp_path: Path, argv: list[str], header: str,
                                       want: float | str | None) -> None:
    import yaml

    from dethpc.config.experiment import parse_experiment_config

    text = "#!/bin/bash\n" + header + "#SBATCH -t 1\nsleep 1\n"
    write(tmp_path, text)
    job = plan([*argv, "job.sh"], text, tmp=tmp_path)
    assert job.max_idle == want
    watchdog = parse_experiment_config(yaml.safe_load(plain.config_yaml(job))).slurm.watchdog
    # not opted in: a script is not watched (it has no heartbeat); opted in: its output
    assert watchdog.watches(wrapped_script=True) is (want is not None)
    if want is not None:
        assert watchdog.output and watchdog.max_idle_s == (None if want == "auto" else want)


@pytest.mark.parametrize(("argv", "header", "words"), [
    (["--max-idle", "soon"], "", "--max-idle (before the script): expected auto or a number "
                                 "of seconds > 0, got 'soon'"),
    (["--max-idle=0"], "", "got '0'"), (["--max-idle=-5"], "", "got '-5'"),
    (["--max-idle=inf"], "", "got 'inf'"),
    ([], "#DETHPC --max-idle\n", "'#DETHPC --max-idle' in job.sh: expected auto or a number"),
    ([], "#DETHPC --max-idle 10 20\n", "got '10 20'"),
    (["--max-idle=60", "--no-requeue"], "", "this job says --no-requeue"),
    (["--max-idle=60"], "#SBATCH --no-requeue\n", "this job says --no-requeue"),
])
def test_a_bad_max_idle_is_refused_with_where_and_what(
        tmp_path: Path, argv: list[str], header: str, words: str) -> None:
    from dethpc.surfaces.sbatchwrap.search_cli import UsageError

    text = "#!/bin/bash\n" + header + "#SBATCH -t 1\nsleep 1\n"
    write(tmp_path, text)
    with pytest.raises(UsageError) as err:
        plan([*argv, "job.sh"], text, tmp=tmp_path)
    assert words in str(err.value)


@pytest.mark.parametrize(("parsable", "quiet", "cluster", "want"), [
    (False, False, None, "Submitted batch job 42"),
    (True, False, None, "42"),
    (False, False, "c1", "Submitted batch job 42 on cluster c1"),
    (True, False, "c1", "42;c1"),
    (False, True, None, ""), (True, True, None, ""),
])
def test_announce_is_sbatchs_line(tmp_path: Path, parsable: bool, quiet: bool,
                                  cluster: str | None, want: str) -> None:
    write(tmp_path)
    argv = [*(["--parsable"] if parsable else []), *(["--quiet"] if quiet else []), "job.sh"]
    assert plain.announce(plan(argv, tmp=tmp_path), "42", cluster) == want


@pytest.mark.parametrize(("out", "want"), [("42\n", ("42", None)), ("42;c1\n", ("42", "c1"))])
def test_job_id_of(out: str, want: tuple[str, str | None]) -> None:
    assert plain.job_id_of(out) == want
    with pytest.raises(DethpcError):
        plain.job_id_of("sbatch: error\n")


@pytest.mark.parametrize(("argv", "want"), [
    (["--help"], True), (["--usage"], True), (["-V"], True), (["--version"], True),
    (["-p", "x", "job.sh", "--help"], False), (["job.sh"], False)])
def test_info_options_pass_through(argv: list[str], want: bool) -> None:
    assert plain.wants_info(argv) is want


@pytest.mark.parametrize(("array", "task", "trial"), [
    (True, "0", 11), (True, "4", 12), (True, "9", None), (False, None, 11)])
def test_wrapper_maps_tasks_to_trials_and_runs_the_script(
        tmp_path: Path, array: bool, task: str | None, trial: int | None) -> None:
    """The rendered wrapper, run by bash outside Slurm: the task's trial directory, the
    script's copy with the arguments, the exit record; an unknown task fails."""
    text = "#!/bin/sh\n#SBATCH -t 1\n" + ("#SBATCH --array=0,4\n" if array else "") + \
        'echo "args=$* trial=$DETHPC_TRIAL_ID"\n'
    write(tmp_path, text)
    job = plan(["job.sh", "a b", "c"], text, tmp=tmp_path)
    paths = ExperimentPaths(tmp_path / "run")
    pairs = [(0, 11), (4, 12)] if array else [(0, 11)]
    for _, tid in pairs:
        paths.trial(tid).root.mkdir(parents=True)
    paths.context.mkdir(parents=True)
    paths.script.write_text(text)
    paths.script.chmod(0o700)
    wrapper = plain.wrapper_script(job, experiment_id=5, paths=paths, trials=pairs,
                                   python=sys.executable)
    assert wrapper.startswith("#!/bin/bash\n#SBATCH -t 1\n")
    assert "#SBATCH --requeue\n#SBATCH --signal=B:USR1@30\n" in wrapper
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = "/usr/bin:/bin"
    if task is not None:
        env.update(SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_JOB_ID="77", SLURM_JOB_ID="78")
    else:
        env.update(SLURM_JOB_ID="77")
    (tmp_path / "w.sh").write_text(wrapper)
    res = subprocess.run(["bash", str(tmp_path / "w.sh"), "a b", "c"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if trial is None:
        assert res.returncode == 1 and "has no trial" in res.stderr
        return
    assert res.returncode == 0, res.stderr
    assert f"args=a b c trial={trial}" in res.stdout
    record = (paths.trial(trial).root / "exits.jsonl").read_text()
    assert '"reason": "completed"' in record
    assert f'"job": "{"77_" + task if task else "77"}"' in record


def test_recorded_config_is_a_valid_experiment_config(tmp_path: Path) -> None:
    import yaml

    from dethpc.config.experiment import parse_experiment_config

    write(tmp_path)
    cfg = parse_experiment_config(yaml.safe_load(plain.config_yaml(plan(["job.sh", "x"],
                                                                        tmp=tmp_path))))
    assert (cfg.name, cfg.max_restarts, cfg.searcher.name) == ("my job", 5, "single")


def test_a_cut_exit_record_does_not_swallow_the_next_one(tmp_path: Path) -> None:
    """A run killed mid-write left half a record without its newline: the next run's
    record starts on a line of its own, so the daemon reads it (and skips the cut one)."""
    text = "#!/bin/sh\n#SBATCH -t 1\necho ran\n"
    write(tmp_path, text)
    job = plan(["job.sh"], text, tmp=tmp_path)
    paths = ExperimentPaths(tmp_path / "run")
    paths.trial(11).root.mkdir(parents=True)
    paths.context.mkdir(parents=True)
    paths.script.write_text(text)
    paths.script.chmod(0o700)
    exits = paths.trial(11).root / "exits.jsonl"
    exits.write_text('{"reason": "completed", "code": 0, "restart": 0, "job": "70"}\n'
                     '{"reason": "canc')
    wrapper = plain.wrapper_script(job, experiment_id=5, paths=paths, trials=[(0, 11)],
                                   python=sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH="/usr/bin:/bin", SLURM_JOB_ID="77")
    (tmp_path / "w.sh").write_text(wrapper)
    res = subprocess.run(["bash", str(tmp_path / "w.sh")], env=env, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    records = read_new_lines(exits, 0).records
    assert [r["job"] for r in records] == ["70", "77"]


@pytest.mark.parametrize(("argv", "head"), [
    (["job.sh", "--no-daemon"], []),
    (["--no-daemon", "job.sh"], ["--no-daemon"]),
    (["--max-idle", "60", "--no-daemon", "job.sh"], ["--max-idle", "60", "--no-daemon"]),
    (["--search", "s.yaml", "--no-daemon", "-p", "debug", "job.sh"],
     ["--search", "s.yaml", "--no-daemon", "-p"]),
    (["--max-idle=60", "--no-daemon", "job.sh", "--max-idle"], ["--max-idle=60", "--no-daemon"]),
])
def test_dethpcs_own_flags_are_found_after_its_options_values(
        argv: list[str], head: list[str]) -> None:
    from dethpc.surfaces.cli.sbatch_cmd import dethpc_head

    assert dethpc_head(argv) == head
