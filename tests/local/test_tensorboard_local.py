"""TensorBoard as a task (issue 17 items 1 and 5): ``dethpc tensorboard start`` derives
event files from a small experiment's metrics.jsonl (a trial requeued and resumed from
an older checkpoint), serves them with the real tensorboard package on an owner-only
Unix socket, refreshes while it runs, and ``stop`` / an idle timeout end the process.
The scalars are read back through TensorBoard's HTTP API over the socket; another Unix
user's connect fails with EACCES."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from dethpc.store import Store
from dethpc.store.models import Experiment, Trial
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.main import main
from dethpc.surfaces.tasks import registry
from dethpc.surfaces.tasks.tensorboard import get
from tests.local.conftest import wait_for

pytest.importorskip("tensorboard")

CONFIG = ("name: tb\nentrypoint: python3 train.py\nsearcher: {name: random, metric: "
          "validation_loss, max_trials: 2, max_length: {batches: 8}}\n")


def line(kind: str, steps: int, t: float, **metrics: float) -> str:
    return json.dumps({"kind": kind, "steps": steps, "time": t, "metrics": metrics}) + "\n"


def _fresh_env() -> None:
    ENV.cluster_path = None
    for name in ("cluster", "store", "backend"):
        ENV.__dict__.pop(name, None)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, world):  # type: ignore[no-untyped-def]
    """``dethpc ARGS`` in this process (``main()``, as the console script runs it):
    (exit code, stdout, stderr); a failure the test did not expect fails it."""
    def run(*args: object, check: bool = True) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dethpc", *map(str, args)])
        code: int | str | None = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        rc = code if isinstance(code, int) else 1
        assert rc == 0 or not check, (args, rc, out, err)
        return rc, out, err
    return run


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, object]]:
    """A DETHPC_HOME others may traverse (so only the task's own 0700 directory can
    refuse them), one experiment of two trials with metrics on disk; the module's tests
    share it (a fresh database costs seconds)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _world(monkeypatch)


def _world(monkeypatch: pytest.MonkeyPatch,
           backend: str = "local") -> Iterator[dict[str, object]]:
    """The world, its cluster config's backend ``backend`` (where a ``--slurm`` job goes)."""
    home = Path(tempfile.mkdtemp(prefix="dethpc-tb-"))
    home.chmod(0o755)
    (home / "cluster.yaml").write_text(yaml.safe_dump(
        {"backend": backend, "runs_root": str(home / "runs")}))
    monkeypatch.setenv("DETHPC_HOME", str(home))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(home / "cluster.yaml"))
    _fresh_env()
    run_dir = home / "runs" / "exp"
    with Store().session() as s:
        exp = Experiment(name="tb", config_yaml=CONFIG, run_dir=str(run_dir),
                         owner=os.environ.get("USER") or _me())
        s.add(exp)
        s.flush()
        trials = [Trial(experiment_id=exp.id or 0, request_id=i) for i in range(2)]
        s.add_all(trials)
        s.flush()
        ids = [exp.id, *(t.id for t in trials)]
    exp_id, a, b = ids
    (run_dir / "trials" / str(a)).mkdir(parents=True)
    (run_dir / "trials" / str(b)).mkdir(parents=True)
    # trial a: run 1 reports batches 1..6 and validates at 4; requeued, run 2 resumes
    # from the checkpoint at 4 and reports 5, 6 again (other values), then 7, 8
    first = [line("training", s, 100 + s, loss=10.0 - s) for s in range(1, 7)]
    first.insert(4, line("validation", 4, 104.5, validation_loss=0.4))
    second = [line("training", s, 200 + s, loss=20.0 + s) for s in range(5, 9)]
    second.append(line("validation", 8, 208.5, validation_loss=0.3))
    (run_dir / "trials" / str(a) / "metrics.jsonl").write_text("".join(first + second))
    (run_dir / "trials" / str(b) / "metrics.jsonl").write_text(
        "".join(line("training", s, 300 + s, loss=float(s)) for s in (1, 2, 3)))
    yield {"home": home, "exp": exp_id, "a": a, "b": b, "run_dir": run_dir}
    for task in registry.tasks(Store()):
        registry.kill(Store(), task.id or 0, grace_s=5)
    _fresh_env()
    shutil.rmtree(home, ignore_errors=True)


def _me() -> str:
    import getpass

    return getpass.getuser()


def scalars(sock: Path, run: str, tag: str) -> list[tuple[int, float]]:
    status, body = get(sock, f"/data/plugin/scalars/scalars?run={quote(run)}&tag={quote(tag)}")
    assert status == 200, body
    return [(int(step), value) for _wall, step, value in json.loads(body)]


def alive(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def test_scalars_through_tensorboard_one_curve_per_trial_refreshed_and_stopped(world, cli):
    exp, a, b = world["exp"], world["a"], world["b"]
    out = json.loads(cli("tensorboard", "start", exp, "--refresh", "0.5", "--json")[1])
    sock, pid = Path(out["endpoint"]), out["pid"]
    assert out["ssh"] == f"ssh -N -L 6006:{sock} {_me()}@{out['host']}"
    assert sock.parent.stat().st_mode & 0o777 == 0o700 and alive(pid)

    # one run per trial; steps once each; the first value of a repeated step stays
    assert json.loads(get(sock, "/data/runs")[1]) == [f"exp{exp}/trial{a}",
                                                     f"exp{exp}/trial{b}"]
    assert scalars(sock, f"exp{exp}/trial{a}", "training/loss") == [
        (1, 9.0), (2, 8.0), (3, 7.0), (4, 6.0), (5, 5.0), (6, 4.0), (7, 27.0), (8, 28.0)]
    assert scalars(sock, f"exp{exp}/trial{a}", "validation/validation_loss") == [
        (4, pytest.approx(0.4)), (8, pytest.approx(0.3))]
    assert scalars(sock, f"exp{exp}/trial{b}", "training/loss") == [(1, 1.0), (2, 2.0),
                                                                   (3, 3.0)]
    tags = json.loads(get(sock, "/data/plugin/scalars/tags")[1])
    assert "x: batches" in tags[f"exp{exp}/trial{a}"]["training/loss"]["description"]

    # refreshed while it runs: a new report appears, a repeated step does not
    with open(world["run_dir"] / "trials" / str(b) / "metrics.jsonl", "a") as f:
        f.write(line("training", 3, 400, loss=99.0) + line("training", 4, 401, loss=4.0))
    wait_for(lambda: len(scalars(sock, f"exp{exp}/trial{b}", "training/loss")) == 4,
             timeout=60, interval=0.5, what="the refreshed point")
    assert scalars(sock, f"exp{exp}/trial{b}", "training/loss")[2:] == [(3, 3.0), (4, 4.0)]

    # another Unix user cannot connect (the 0700 directory), though it reaches the home
    if os.geteuid() == 0:
        other = _other_user()
        probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n"
                 " s.connect(sys.argv[1]); print('connected')\n"
                 "except OSError as e: print(e.errno)\n")
        res = subprocess.run(other.as_user(["/usr/bin/python3", "-c", probe, str(sock)]),
                             capture_output=True, text=True, timeout=60)
        assert res.stdout.strip() == str(errno.EACCES), res
        res = subprocess.run(other.as_user(["ls", str(world["home"])]), capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0 and "tasks" in res.stdout, res

    listed = json.loads(cli("tensorboard", "list", "--json")[1])
    assert [(t["id"], t["state"], t["experiments"]) for t in listed] == [
        (out["id"], "running", [exp])]
    cli("tensorboard", "stop", out["id"])
    assert not alive(pid) and not sock.exists()
    assert json.loads(cli("tensorboard", "list", "--json")[1]) == []
    ended = json.loads(cli("task", "list", "--all", "--json")[1])
    assert [(t["id"], t["state"]) for t in ended] == [(out["id"], "ended")]


def _other_user():  # type: ignore[no-untyped-def]
    from dethpc.common.errors import DethpcError
    from dethpc.devcluster.users import ensure_user

    try:
        return ensure_user()
    except DethpcError as exc:
        pytest.skip(f"no second Unix user: {exc}")


def test_idle_timeout_ends_the_process_and_the_task(world, cli):
    started = time.monotonic()
    out = json.loads(cli("tensorboard", "start", world["exp"], "--trial", world["b"],
                         "--idle-timeout", "0.05", "--json")[1])
    sock = Path(out["endpoint"])
    assert json.loads(get(sock, "/data/runs")[1]) == [f"exp{world['exp']}/trial{world['b']}"]
    wait_for(lambda: not alive(out["pid"]), timeout=90, interval=0.2,
             what="the idle TensorBoard to exit")
    assert time.monotonic() - started >= 3.0     # not before its 3 s without a request
    assert not sock.exists()
    # the list reads the process from /proc itself: once (a loaded two-lane run on
    # 2026-11-27) it still listed the task as running just after the pid stopped
    # answering above; the cause was not found, so the list gets a margin to agree
    wait_for(lambda: json.loads(cli("task", "list", "--json")[1]) == [], timeout=30,
             interval=0.5, what="`task list` to drop the ended TensorBoard")
    log = (Path(out["endpoint"]).parent / "server.log").read_text()
    assert "no request for 3 s" in log


BAD_INPUT = [
    (["tensorboard", "start", "9999"], "experiment 9999 does not exist"),
    (["tensorboard", "start", "EXP", "--trial", "9999"], "--trial 9999: not a trial"),
    (["tensorboard", "start", "EXP", "--idle-timeout", "-1"], "--idle-timeout: -1"),
    (["tensorboard", "start", "EXP", "--refresh", "0"], "--refresh: 0 is not positive"),
    (["tensorboard", "stop", "9999"], "task 9999 does not exist"),
    (["task", "kill", "9999"], "task 9999 does not exist"),
]


def test_bad_input_is_one_line(world, cli):
    for args, words in BAD_INPUT:
        rc, _out, err = cli(*[world["exp"] if a == "EXP" else a for a in args], check=False)
        assert rc != 0 and "Traceback" not in err, (args, err)
        assert words in err and len(err.strip().splitlines()) == 1, (args, err)


def test_the_job_form_runs_on_the_local_backend(world, cli):
    """``--slurm`` with a cluster config of ``backend: local``: the same job script goes
    to the local backend (issue 46 item 1); it serves on its socket, its output goes to
    ``server.log``, the task lists its backend, and ``tensorboard stop`` ends the job."""
    exp, a = world["exp"], world["a"]
    out = json.loads(cli("tensorboard", "start", exp, "--trial", a, "--slurm", "--json")[1])
    sock, task_id = Path(out["endpoint"]), out["id"]
    assert out["backend"] == "local" and out["job"] and out["pid"] == 0
    assert json.loads(get(sock, "/data/runs")[1]) == [f"exp{exp}/trial{a}"]
    assert (sock.parent / "server.log").stat().st_size > 0
    live = json.loads(cli("task", "list", "--json")[1])
    assert [(r["id"], r["backend"], r["job"]) for r in live] == [(task_id, "local",
                                                                   out["job"])]
    cli("tensorboard", "stop", task_id)
    assert json.loads(cli("task", "list", "--json")[1]) == []
    assert not registry.job_alive(registry.get(Store(), task_id))
