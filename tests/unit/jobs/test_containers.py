"""Container wrapping (dethpc/jobs/containers.py): the ``exec`` argv, its shell quoting in a
rendered job script, and the SIF cache's pull-once-under-a-lock rule.

No Apptainer/Singularity runtime is installable on this project's machines, so the
runtime here is a stand-in: a small shell script named ``apptainer``/``singularity``
that the tests write onto ``PATH``. It records the argv (and environment) it was
called with and, for ``pull``, writes the destination file or fails like a registry
error. It proves dethpc's logic around the runtime (argv, quoting, locking, partial
files, error messages), not that containers run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dethpc.common.errors import DethpcError, SubmitError
from dethpc.common.paths import ExperimentPaths
from dethpc.common.runner import CommandRunner
from dethpc.config import parse_experiment_config
from dethpc.config.model import BindMount, ClusterConfig, ContainerSettings, ResourcePool
from dethpc.jobs.containers import ensure_sif, exec_argv, sif_path
from dethpc.jobs.jobscript import trial_script

REPO = Path(__file__).resolve().parents[3]

STANDIN = r"""#!/bin/sh
# Stand-in for apptainer/singularity (tests/unit/jobs/test_containers.py): records its argv
# and environment; proves dethpc's logic around the runtime, not that containers run.
printf '%s\0' "$@" > "$STANDIN_DIR/argv.$$"
echo "$$ $1" >> "$STANDIN_DIR/calls"
case "$1" in
  pull)  # pull --force DEST URI
    : > "$STANDIN_DIR/pulling.$$"
    n=0
    while [ -n "${STANDIN_HOLD:-}" ] && [ ! -e "$STANDIN_DIR/go" ]; do
      n=$((n + 1))
      if [ "$n" -gt 12000 ]; then echo "stand-in: never released" >&2; exit 3; fi
      sleep 0.01
    done
    if [ -n "${STANDIN_FAIL:-}" ]; then
      printf 'half a SIF' > "$3"
      echo "FATAL: While making image from oci registry: manifest unknown" >&2
      exit 255
    fi
    printf 'SIF of %s\n' "$4" > "$3"
    ;;
  exec)
    env -0 > "$STANDIN_DIR/env.$$"
    ;;
esac
"""


# ------------------------------------------------------------------ exec argv (pure)
APPTAINER = ContainerSettings(runtime="apptainer", sif_cache=Path("/cache"), cleanenv=False)
SINGULARITY = ContainerSettings(runtime="singularity", sif_cache=Path("/shared/sif"),
                                binds=("/scratch", "/opt/site:/site:ro"), cleanenv=False)
RO = BindMount("/data/set 1", "/data", read_only=True)
RW = BindMount("/home/u/out", "/out")
CACHED = str(sif_path(Path("/cache"), "pytorch/pytorch:2.3"))


@pytest.mark.parametrize(("settings", "image", "kw", "expected"), [
    (APPTAINER, "pytorch/pytorch:2.3", {},
     ["apptainer", "exec", CACHED, "python3", "t.py"]),
    (APPTAINER, "pytorch/pytorch:2.3", {"gpu": True},
     ["apptainer", "exec", "--nv", CACHED, "python3", "t.py"]),
    (APPTAINER, "pytorch/pytorch:2.3", {"binds": ["/runs/7"], "mounts": [RO, RW]},
     ["apptainer", "exec", "--bind", "/runs/7", "--bind", "/data/set 1:/data:ro",
      "--bind", "/home/u/out:/out:rw", CACHED, "python3", "t.py"]),
    # the site's binds come first and are passed as written (options included)
    (SINGULARITY, "/images/mine.sif", {"binds": ["/runs/7"], "gpu": True},
     ["singularity", "exec", "--nv", "--bind", "/scratch", "--bind", "/opt/site:/site:ro",
      "--bind", "/runs/7", "/images/mine.sif", "python3", "t.py"]),
    # an image URI is cached under a name derived from the whole URI
    (SINGULARITY, "docker://nvcr.io/nvidia/pytorch:24.01-py3", {},
     ["singularity", "exec", "--bind", "/scratch", "--bind", "/opt/site:/site:ro",
      str(sif_path(Path("/shared/sif"), "docker://nvcr.io/nvidia/pytorch:24.01-py3")),
      "python3", "t.py"]),
])
def test_exec_argv(settings: ContainerSettings, image: str, kw: dict,
                   expected: list[str]) -> None:
    assert exec_argv(settings, image, ["python3", "t.py"], **kw) == expected


def test_without_cleanenv_the_host_environment_goes_in() -> None:
    """``cleanenv: false``: the job script's exports reach the container only because the
    runtime passes the host environment in, so no option may cut it off."""
    argv = exec_argv(SINGULARITY, "img", ["x"], binds=["/r"], mounts=[RO], gpu=True)
    runtime_opts = argv[: argv.index(str(sif_path(Path("/shared/sif"), "img")))]
    assert not {"--cleanenv", "-e", "--containall", "-C", "--contain", "-c"} & set(runtime_opts)
    assert argv[0] == "singularity"


PASS = ["/bin/sh", "-c"]


@pytest.mark.parametrize(("settings", "gpu", "runtime_part"), [
    (ContainerSettings(runtime="apptainer", sif_cache=Path("/c")), True,
     ["apptainer", "exec", "--nv", "--cleanenv", "--bind", "/runs/7",
      str(sif_path(Path("/c"), "img")), "python3", "t.py"]),
    (ContainerSettings(runtime="singularity", sif_cache=Path("/c"), containall=True), False,
     ["singularity", "exec", "--containall", "--workdir", "@WORKDIR@", "--bind", "/runs/7",
      str(sif_path(Path("/c"), "img")), "python3", "t.py"]),
    (ContainerSettings(runtime="charliecloud"), True,     # no --nv: the image brings its own
     ["ch-run", "--cd=@CWD@", "--unset-env=*", "--env-no-expand", "--set-env=@ENVFILE@",
      "--bind=/runs/7", "img", "--", "python3", "t.py"]),
    (ContainerSettings(runtime="charliecloud", containall=True, cleanenv=False), False,
     ["ch-run", "--cd=@CWD@", "--private-tmp", "--bind=/runs/7", "img", "--", "python3", "t.py"]),
])
def test_cleanenv_and_containall(settings: ContainerSettings, gpu: bool,
                                 runtime_part: list[str]) -> None:
    argv = exec_argv(settings, "img", ["python3", "t.py"], binds=["/runs/7"], gpu=gpu,
                     env_names=["MY_VAR"])
    if not (settings.cleanenv or settings.containall) and settings.runtime != "charliecloud":
        assert argv == runtime_part
        return
    assert argv[:2] == PASS and argv[3] == "dethpc-pass-env"
    assert argv[4:] == runtime_part
    program = argv[2]
    assert "DETHPC_*|DET_*|SLURM_*" in program and "|MY_VAR)" in program
    prefix = {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}.get(
        settings.runtime)
    assert (f'export "{prefix}$n=$v"' in program) is (prefix is not None)


@pytest.mark.parametrize("runtime", ["apptainer", "charliecloud"])
def test_pass_env_program_passes_the_chosen_variables_per_task(tmp_path: Path,
                                                               runtime: str) -> None:
    """The sh program run before the runtime: the chosen variables with their values
    (quotes, spaces, ``$`` intact; a multi-line value left out), none other; the
    placeholders replaced by the task's own file and directory; then the runtime."""
    settings = ContainerSettings(runtime=runtime, sif_cache=tmp_path,  # type: ignore[arg-type]
                                 containall=True, pass_env=("SITE_*",))
    argv = exec_argv(settings, "/img", ["python3", "t.py"], env_names=["MY_VAR"])
    head = argv[:4]
    rest = argv[4:]
    show = [sys.executable, "-c", "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
            "'env': dict(os.environ)}))"]
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "DETHPC_TRIAL_ID": "2",
           "MY_VAR": "a b; $(x) 'q'", "SITE_X": "1", "SECRET": "no", "MULTI": "a\nb",
           "SLURM_PROCID": "3", "SLURM_JOB_ID": "9"}
    out = subprocess.run([*head, *show, *rest], env=env, capture_output=True, text=True,
                         check=True, timeout=30, cwd=tmp_path)
    got = json.loads(out.stdout)
    task_dir = next(tmp_path.glob("dethpc-ct.9.b.3.*"))
    assert (task_dir / "tmp").is_dir()
    lines = dict(line.split("=", 1) for line in (task_dir / "env").read_text().splitlines())
    # USER: set from id -un when the job has none (ch-run needs it), and passed
    assert lines == {"DETHPC_TRIAL_ID": "2", "MY_VAR": "a b; $(x) 'q'", "SITE_X": "1",
                     "SLURM_PROCID": "3", "SLURM_JOB_ID": "9",
                     "USER": __import__("pwd").getpwuid(os.getuid()).pw_name}
    assert not {"@ENVFILE@", "@WORKDIR@", "@CWD@"} & set(" ".join(got["argv"]).split("="))
    if runtime == "apptainer":
        assert got["argv"][got["argv"].index("--workdir") + 1] == str(task_dir)
        assert got["env"]["APPTAINERENV_MY_VAR"] == "a b; $(x) 'q'"
        assert "APPTAINERENV_SECRET" not in got["env"] and "APPTAINERENV_MULTI" not in got["env"]
    else:
        assert f"--set-env={task_dir}/env" in got["argv"]
        assert f"--cd={tmp_path}" in got["argv"]
    assert got["argv"][-2:] == ["python3", "t.py"]


@pytest.mark.parametrize(("image", "path"), [
    ("/abs/my.sif", Path("/abs/my.sif")),
    ("rel/my.sif", Path("rel/my.sif")),
    ("oras://reg/x/img.sif", None),  # a URI ending in .sif is still pulled
])
def test_sif_path_local_files_are_used_as_is(image: str, path: Path | None) -> None:
    got = sif_path(Path("/cache"), image)
    if path is not None:
        assert got == path
    else:
        assert got.parent == Path("/cache") and got.suffix == ".sif"


def test_sif_path_is_distinct_per_image_and_safe() -> None:
    images = ["a/b:1", "a/b:2", "a_b:1", "docker://a/b:1", "x" * 200 + ":latest"]
    paths = [sif_path(Path("/c"), i) for i in images]
    assert len(set(paths)) == len(images)
    for p in paths:
        assert p.parent == Path("/c") and p.suffix == ".sif"
        assert all(c.isalnum() or c in "._-" for c in p.name), p.name
        assert len(p.name) <= 60 + 1 + 16 + 4


def test_runtime_none_is_a_clear_error(tmp_path: Path) -> None:
    none = ContainerSettings(runtime="none", sif_cache=tmp_path)
    with pytest.raises(SubmitError, match=r"containers\.runtime: none"):
        exec_argv(none, "img", ["x"])
    with pytest.raises(SubmitError, match=r"containers\.runtime: none"):
        ensure_sif(none, "img", CommandRunner())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("kw", "message"), [
    ({"binds": ["/runs/a,b"]}, "bind path '/runs/a,b' contains ','"),
    ({"binds": ["/runs/a:b"]}, "bind path '/runs/a:b' contains ':'"),
    ({"mounts": [BindMount("/d:x,y", "/d")]},
     r"bind_mounts\[0\].host_path '/d:x,y' contains ',' and ':'"),
    ({"mounts": [RW, BindMount("/d", "/in:side")]},
     r"bind_mounts\[1\].container_path '/in:side' contains ':'"),
])
def test_bind_paths_the_runtime_cannot_express_are_refused(kw: dict, message: str) -> None:
    with pytest.raises(SubmitError, match=message):
        exec_argv(APPTAINER, "img", ["x"], **kw)


# ------------------------------------------------- the rendered job script, run by bash
@pytest.fixture
def standin(tmp_path: Path) -> Path:
    """A directory with the stand-in runtime as ``apptainer`` and ``singularity``;
    its records go to ``<dir>/log``."""
    bin_dir = tmp_path / "standin-bin"
    (bin_dir / "log").mkdir(parents=True)
    for name in ("apptainer", "singularity"):
        exe = bin_dir / name
        exe.write_text(STANDIN)
        exe.chmod(0o755)
    return bin_dir


def standin_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_DIR": str(bin_dir / "log"), **extra}


def records(bin_dir: Path, prefix: str) -> list[list[str]]:
    """The stand-in's NUL-separated records named ``<prefix>.<pid>``, one per call."""
    return [p.read_bytes().decode().split("\0")[:-1]
            for p in sorted((bin_dir / "log").glob(f"{prefix}.*"))]


def calls(bin_dir: Path) -> list[str]:
    f = bin_dir / "log" / "calls"
    return [line.split(" ", 1)[1] for line in f.read_text().splitlines()] if f.exists() else []


@pytest.mark.parametrize("pool_gres", [None, "gpu"])
def test_rendered_script_passes_every_argument_intact(tmp_path: Path, standin: Path,
                                                      pool_gres: str | None) -> None:
    """bash runs the rendered script as a backend would; the runtime gets exactly the
    argv ``exec_argv`` built, paths with spaces and quotes included, and the job's
    environment (dethpc's contract and the user's variables)."""
    weird = tmp_path / "runs dir" / "it's \"7\""
    paths = ExperimentPaths(weird).ensure()
    paths.context.mkdir()
    paths.trial(2).root.mkdir(parents=True)
    mount = tmp_path / "data set" / "o'k"
    cfg = parse_experiment_config({
        "name": "c", "entrypoint": ["python3", "it's a \"test\".py", "$(touch pwned)"],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "environment": {"image": {"cpu": "org/cpu:1", "cuda": "org/cuda:1"},
                        "environment_variables": ["MY_VAR=a b; $(touch pwned) 'q'"]},
        "bind_mounts": [{"host_path": str(mount), "container_path": "/data",
                         "read_only": True}]})
    cache = tmp_path / "sif cache"
    cluster = ClusterConfig(
        pools={"default": ResourcePool(name="default", gres=pool_gres, slots_per_node=1)},
        containers=ContainerSettings(runtime="apptainer", sif_cache=cache,
                                     binds=("/site data:/site",)))
    text = trial_script(cfg, cluster, backend="local", python=sys.executable,
                        run_dir=paths.root, exp_id=1, trial_id=2)
    script = paths.trial(2).root / "job.sbatch"
    script.write_text(text)
    proc = subprocess.run(["bash", str(script)], env=standin_env(standin), timeout=60,
                          cwd=tmp_path, capture_output=True, text=True)
    log = "".join(p.read_text() for p in paths.trial(2).root.glob("slurm-*.out"))
    assert proc.returncode == 0, log
    image = "org/cuda:1" if pool_gres else "org/cpu:1"
    assert records(standin, "argv") == [
        ["exec", *(["--nv"] if pool_gres else []), "--cleanenv",
         "--bind", "/site data:/site", "--bind", str(paths.root),
         "--bind", f"{mount}:/data:ro", str(sif_path(cache, image)),
         "python3", "it's a \"test\".py", "$(touch pwned)"]]
    (env_record,) = records(standin, "env")
    env = dict(line.split("=", 1) for line in env_record)
    assert env["MY_VAR"] == "a b; $(touch pwned) 'q'"
    # cleanenv (the default): what the container gets, passed explicitly
    assert env["APPTAINERENV_MY_VAR"] == "a b; $(touch pwned) 'q'"
    assert env["APPTAINERENV_DETHPC_TRIAL_ID"] == "2"
    assert "APPTAINERENV_PATH" not in env
    assert env["DETHPC_TRIAL_ID"] == "2" and env["DETHPC_EXPERIMENT_ID"] == "1"
    assert env["DETHPC_TRIAL_DIR"] == str(paths.trial(2).root)
    assert not list(tmp_path.rglob("pwned"))
    exit_record = json.loads((paths.trial(2).root / "exits.jsonl").read_text())
    assert exit_record["reason"] == "completed"


# ------------------------------------------------------------ SIF cache: pull once
def settings(cache: Path, runtime: str = "apptainer") -> ContainerSettings:
    return ContainerSettings(runtime=runtime, sif_cache=cache)  # type: ignore[arg-type]


def runner(bin_dir: Path, **extra: str) -> CommandRunner:
    return CommandRunner(env=standin_env(bin_dir, **extra), retries=0)


def leftovers(cache: Path) -> list[str]:
    """Everything in the cache but SIFs and lock files."""
    return sorted(p.name for p in cache.iterdir() if p.suffix not in (".sif", ".lock"))


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_pull_once_then_reuse(tmp_path: Path, standin: Path, runtime: str) -> None:
    cache = tmp_path / "shared sif"
    got = ensure_sif(settings(cache, runtime), "org/img:1", runner(standin))
    assert got == sif_path(cache, "org/img:1")
    assert got.read_text() == "SIF of docker://org/img:1\n"
    (argv,) = records(standin, "argv")
    assert argv[:2] == ["pull", "--force"] and argv[3] == "docker://org/img:1"
    assert Path(argv[2]).parent == cache and argv[2].endswith(".partial")
    # a second caller, and a later daemon, find it: no second pull
    assert ensure_sif(settings(cache, runtime), "org/img:1", runner(standin)) == got
    assert calls(standin) == ["pull"]
    assert leftovers(cache) == []


def test_uri_is_pulled_as_given(tmp_path: Path, standin: Path) -> None:
    got = ensure_sif(settings(tmp_path), "oras://reg.io/x/img:2", runner(standin))
    assert got.read_text() == "SIF of oras://reg.io/x/img:2\n"


def test_existing_sif_is_not_pulled_again(tmp_path: Path, standin: Path) -> None:
    target = sif_path(tmp_path, "org/img:1")
    target.write_text("pulled by an earlier daemon")
    assert ensure_sif(settings(tmp_path), "org/img:1", runner(standin)) == target
    assert target.read_text() == "pulled by an earlier daemon"
    assert calls(standin) == []


def test_local_sif_is_used_as_is_and_a_missing_one_is_an_error(tmp_path: Path,
                                                               standin: Path) -> None:
    sif = tmp_path / "mine.sif"
    sif.write_text("local")
    assert ensure_sif(settings(tmp_path / "cache"), str(sif), runner(standin)) == sif
    with pytest.raises(SubmitError, match=r"SIF file '.*/gone\.sif' does not exist"):
        ensure_sif(settings(tmp_path / "cache"), str(tmp_path / "gone.sif"), runner(standin))
    assert calls(standin) == []


def test_failed_pull_is_a_clear_error_and_leaves_no_partial_sif(tmp_path: Path,
                                                               standin: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(DethpcError) as info:
        ensure_sif(settings(cache), "org/nope:1", runner(standin, STANDIN_FAIL="1"))
    assert isinstance(info.value, SubmitError)
    message = str(info.value)
    assert "cannot pull image 'org/nope:1' into the SIF cache" in message
    assert "FATAL: While making image from oci registry: manifest unknown" in message
    assert "exited with code 255" in message
    assert calls(standin) == ["pull"]
    assert not sif_path(cache, "org/nope:1").exists()
    assert leftovers(cache) == []
    # the next try pulls again (nothing half-written is taken for the image)
    assert ensure_sif(settings(cache), "org/nope:1", runner(standin)).read_text() == \
        "SIF of docker://org/nope:1\n"
    assert calls(standin) == ["pull", "pull"]


def test_missing_runtime_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    plain = CommandRunner(env={**os.environ, "PATH": str(empty)}, retries=0)
    with pytest.raises(SubmitError, match=r"cannot pull image 'org/img:1'.*"
                                          r"`apptainer pull .*` could not be started"):
        ensure_sif(settings(tmp_path / "cache"), "org/img:1", plain)
    assert leftovers(tmp_path / "cache") == []


def test_partial_of_a_killed_puller_is_removed(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    target = sif_path(cache, "org/img:1")
    stale = cache / f".{target.name}.othernode.4242.partial"
    stale.write_text("half")
    ensure_sif(settings(cache), "org/img:1", runner(standin))
    assert not stale.exists() and target.is_file()
    assert leftovers(cache) == []


CALLER = """
import sys
from pathlib import Path
from dethpc.config.model import ContainerSettings
from dethpc.jobs.containers import ensure_sif
from dethpc.common.runner import CommandRunner
s = ContainerSettings(runtime="apptainer", sif_cache=Path(sys.argv[1]))
print(ensure_sif(s, sys.argv[2], CommandRunner(retries=0)))
"""


def wait_until(pred: Callable[[], object], what: str, procs: list[subprocess.Popen]) -> None:
    """Wait for an event (a hang guard, not a timing assertion); fail early if a caller
    died."""
    deadline = time.monotonic() + 120
    while not pred():
        for p in procs:
            if p.poll() is not None and p.returncode != 0:
                pytest.fail(f"a caller exited with {p.returncode} while waiting for {what}: "
                            f"{p.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def blocked_on_flock(directory: Path) -> bool:
    """True when some process waits for an flock on a file in ``directory`` (a ``->``
    line of /proc/locks names the file by device:inode)."""
    inodes = {str(p.stat().st_ino) for p in directory.iterdir()} if directory.exists() else set()
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) > 6 and f[1] == "->" and f[2] == "FLOCK" and f[6].rsplit(":", 1)[-1] in inodes:
            return True
    return False


def test_two_concurrent_callers_pull_once(tmp_path: Path, standin: Path) -> None:
    """Caller A pulls (the stand-in holds the pull open); caller B comes while A pulls
    and must wait on the lock, then use A's SIF. Without the lock B pulls too."""
    cache = tmp_path / "cache"
    env = standin_env(standin, STANDIN_HOLD="1", PYTHONPATH=str(REPO))
    start = lambda: subprocess.Popen(  # noqa: E731
        [sys.executable, "-c", CALLER, str(cache), "org/big:1"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = standin / "log"
    a = start()
    try:
        wait_until(lambda: list(log.glob("pulling.*")), "caller A's pull", [a])
        b = start()
        try:
            wait_until(lambda: blocked_on_flock(cache) or len(list(log.glob("pulling.*"))) > 1,
                       "caller B to wait on the lock (or to pull as well)", [a, b])
            (log / "go").touch()
            outs = [p.communicate(timeout=120) for p in (a, b)]
        finally:
            b.kill()
    finally:
        a.kill()
    assert [a.returncode, b.returncode] == [0, 0], outs
    target = sif_path(cache, "org/big:1")
    assert [o.strip() for o, _ in outs] == [str(target), str(target)]
    assert calls(standin) == ["pull"]
    assert target.read_text() == "SIF of docker://org/big:1\n"
    assert leftovers(cache) == []
