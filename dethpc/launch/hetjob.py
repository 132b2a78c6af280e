"""Heterogeneous Slurm jobs: a trial plus components (servers, caches) of their own shape.

Owns: the step entry points of a het trial (docs/launchers.md, "Heterogeneous
jobs"), ``component_env`` (every part learns the others' hosts, address and
port from ``SLURM_JOB_NODELIST_HET_GROUP_<i>``), the readiness checks (a TCP
port, or a ready file the component creates) and their waits.

- ``python -m dethpc.launch.hetjob --component NAME -- argv`` runs one task of
  a component (started by the trial script with ``srun --het-group=i``): it
  exports the env below and runs argv with ``[NAME rank=N]`` output prefixes.
- ``python -m dethpc.launch.hetjob --trial [--wait NAME:CHECK:TIMEOUT]... -- argv``
  runs in the trial's own part: it waits until every listed component is
  ready, then replaces itself with argv (so signals reach the trial directly).

Group 0 is the trial itself; ``DETHPC_HET_COMPONENTS`` ("trial,server,...")
names the groups in order and ``DETHPC_HET_JOB_ID`` is the job id both sides
derive ports from (the trial script exports both).
Must not: submit anything (the daemon does) or choose shapes (the config does).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dethpc.common.hostlist import expand_hostlist
from dethpc.common.jobenv import (
    ENV_COMPONENT,
    ENV_COMPONENT_PREFIX,
    ENV_HET_COMPONENTS,
    ENV_HET_JOB_ID,
    ENV_READY_FILE,
    ENV_TRIAL_DIR,
)
from dethpc.launch._common import PORT_SPAN, LaunchError, derive_port
from dethpc.launch._procs import launcher_main, log, run_one

#: component ports sit half the port range away from the job's own rendezvous port,
#: so the next job ids' launchers on the same node do not collide with them
COMPONENT_PORT_OFFSET = PORT_SPAN // 2
CHECKS = ("port", "file", "none")


@dataclass(frozen=True)
class Wait:
    """``NAME:CHECK:TIMEOUT``: what the trial waits for before it starts."""

    name: str
    check: str
    timeout_s: float

    def arg(self) -> str:
        return f"{self.name}:{self.check}:{self.timeout_s:g}"

    @classmethod
    def parse(cls, text: str) -> Wait:
        parts = text.split(":")
        if len(parts) != 3 or parts[1] not in CHECKS:
            raise LaunchError(f"--wait {text!r}: expected NAME:CHECK:TIMEOUT with CHECK one "
                              f"of {', '.join(CHECKS)}")
        try:
            return cls(parts[0], parts[1], float(parts[2]))
        except ValueError:
            raise LaunchError(f"--wait {text!r}: the timeout is not a number") from None


def _key(name: str) -> str:
    return f"{ENV_COMPONENT_PREFIX}{name.upper()}"


def het_job_id(env: Mapping[str, str]) -> str:
    return (env.get(ENV_HET_JOB_ID) or env.get("SLURM_JOB_ID_HET_GROUP_0")
            or env.get("SLURM_JOB_ID") or "0")


def ready_file(env: Mapping[str, str], name: str) -> str:
    """The file component ``name`` creates when it is up; unique per job run, so a
    requeued job never sees the file of its previous run."""
    trial_dir = env.get(ENV_TRIAL_DIR, ".")
    run = env.get("SLURM_RESTART_COUNT", "0") or "0"
    return str(Path(trial_dir) / f"ready-{name}-{het_job_id(env)}-{run}")


def component_env(env: Mapping[str, str]) -> dict[str, str]:
    """``DETHPC_COMPONENT_<NAME>_HOSTS/_ADDR/_PORT/_READY_FILE`` for every part of the job."""
    names = [n for n in env.get(ENV_HET_COMPONENTS, "").split(",") if n]
    job = het_job_id(env)
    out: dict[str, str] = {}
    for index, name in enumerate(names):
        nodelist = env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{index}", "")
        hosts = expand_hostlist(nodelist) if nodelist else []
        key = _key(name)
        out[f"{key}_HOSTS"] = ",".join(hosts)
        out[f"{key}_ADDR"] = hosts[0] if hosts else ""
        out[f"{key}_PORT"] = str(derive_port(int(job) if job.isdigit() else 0,
                                             offset=COMPONENT_PORT_OFFSET + index))
        out[f"{key}_READY_FILE"] = ready_file(env, name)
    return out


def wait_for_port(
    host: str, port: int, timeout_s: float,
    connect: Callable[[tuple[str, int]], object] = lambda a: socket.create_connection(a, 2),
) -> None:
    """Return once ``host:port`` accepts a TCP connection; ``LaunchError`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = connect((host, port))
            close = getattr(conn, "close", None)
            if close:
                close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LaunchError(f"{host}:{port} did not accept connections within "
                                  f"{timeout_s:.0f}s ({exc}); is the component up?") from exc
            time.sleep(0.2)


def wait_for_file(path: str, timeout_s: float,
                  exists: Callable[[str], bool] = os.path.exists) -> None:
    """Return once ``path`` exists; ``LaunchError`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not exists(path):
        if time.monotonic() > deadline:
            raise LaunchError(f"ready file {path} did not appear within {timeout_s:.0f}s; "
                              "the component must create it when it is up")
        time.sleep(0.2)


def wait_ready(waits: Sequence[Wait], env: Mapping[str, str]) -> None:
    for wait in waits:
        key = _key(wait.name)
        if f"{key}_ADDR" not in env:
            raise LaunchError(f"--wait {wait.name!r}: no such component in "
                              f"{ENV_HET_COMPONENTS}={env.get(ENV_HET_COMPONENTS, '')!r}")
        start = time.monotonic()
        if wait.check == "port":
            wait_for_port(env[f"{key}_ADDR"], int(env[f"{key}_PORT"]), wait.timeout_s)
        elif wait.check == "file":
            wait_for_file(env[f"{key}_READY_FILE"], wait.timeout_s)
        log.info("component %s is up (%s, %.1fs)", wait.name, wait.check,
                 time.monotonic() - start)


def parse_args(argv: Sequence[str]) -> tuple[str | None, list[Wait], list[str]]:
    """(component name or None for ``--trial``, waits, command)."""
    args = list(argv)
    if "--" not in args or not args[args.index("--") + 1 :]:
        raise LaunchError("usage: -m dethpc.launch.hetjob (--component NAME | --trial "
                          "[--wait NAME:CHECK:TIMEOUT]...) -- argv")
    cut = args.index("--")
    opts, command = args[:cut], args[cut + 1 :]
    component: str | None = None
    waits: list[Wait] = []
    trial = False
    i = 0
    while i < len(opts):
        flag = opts[i]
        if flag == "--trial":
            trial, i = True, i + 1
        elif flag in ("--component", "--wait") and i + 1 < len(opts):
            if flag == "--component":
                component = opts[i + 1]
            else:
                waits.append(Wait.parse(opts[i + 1]))
            i += 2
        else:
            raise LaunchError(f"unknown or incomplete option {flag!r}")
    if trial == (component is not None):
        raise LaunchError("give exactly one of --trial and --component NAME")
    if waits and not trial:
        raise LaunchError("--wait belongs to --trial")
    return component, waits, command


def main(argv: Sequence[str] | None = None) -> int:
    component, waits, command = parse_args(sys.argv[1:] if argv is None else argv)
    env = {**os.environ, **component_env(os.environ), "PYTHONUNBUFFERED": "1"}
    if component is None:
        wait_ready(waits, env)
        os.execvpe(command[0], command, env)  # noqa: S606 - argv list, no shell
    env[ENV_COMPONENT] = component
    env[ENV_READY_FILE] = ready_file(env, component)
    rank = int(env.get("SLURM_PROCID", "0"))
    return run_one(command, env, rank=rank, label=component)


if __name__ == "__main__":
    sys.exit(launcher_main(main))
