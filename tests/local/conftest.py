"""Fixtures for end-to-end tests on the local backend: a private DETHPC_HOME and cluster config."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "fixtures" / "toy"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    cluster = {"backend": "local", "runs_root": str(h / "runs"), "local_max_concurrent": 4,
               "tick_min_s": 0.1, "tick_max_s": 0.5}
    (h / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    monkeypatch.setenv("DETHPC_HOME", str(h))
    monkeypatch.setenv("DETHPC_CLUSTER_CONFIG", str(h / "cluster.yaml"))
    monkeypatch.delenv("DETHPC_FAULT_POINT", raising=False)
    yield h
    subprocess.run([sys.executable, "-m", "dethpc.surfaces.entry", "daemon", "stop"],
                   capture_output=True, timeout=60)


def write_config(path: Path, **overrides) -> Path:
    raw = {
        "name": "toy", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                            "step_time": 0.02},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 4,
                     "max_concurrent_trials": 2, "max_length": {"batches": 10}},
        "max_restarts": 1,
        "reproducibility": {"experiment_seed": 7},
    }
    for key, value in overrides.items():
        raw[key] = value
    path.write_text(yaml.safe_dump(raw))
    return path


def cli(*args, check=True, env=None, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dethpc {' '.join(map(str, args))} -> {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def wait_for(predicate, timeout=120, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def env_without_fault():
    env = dict(os.environ)
    env.pop("DETHPC_FAULT_POINT", None)
    return env


def dethpc_processes(home: Path) -> dict[int, str]:
    """The live supervisor and daemon processes whose DETHPC_HOME is ``home``:
    pid -> 'supervisor' | 'daemon'.

    A child that the daemon (or the supervisor) has forked and not yet exec'd shows its
    parent's argv in /proc for that instant (the local backend starts jobs, the
    supervisor its daemon): it is the parent's fork, not a second daemon, so a process
    whose parent has the same argv is left out (f45 counted one as a second daemon). A
    real second daemon is started by a supervisor, whose argv differs."""
    seen: dict[int, tuple[list[bytes], int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] == "Z" or f"DETHPC_HOME={home}".encode() not in env:
            continue
        seen[int(proc.name)] = (argv, int(fields[1]))
    found = {}
    for pid, (argv, ppid) in seen.items():
        if ppid in seen and seen[ppid][0] == argv:
            continue                    # a fork of its parent, before its exec
        if b"dethpc.common.supervisor" in argv:
            found[pid] = "supervisor"
        elif b"daemon" in argv and b"run" in argv:
            found[pid] = "daemon"
    return found
