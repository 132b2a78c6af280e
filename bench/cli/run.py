"""What the commonest ``dethpc`` commands cost on a login node, beside Slurm's own tools.

In one run, ``--calls`` rounds (default 15); each round runs every variant once, in
turn (interleaved, so load drift on a shared host hits all of them alike), and times
the whole process from fork to exit with ``time.perf_counter``:

- ``python_pass``: ``python -c pass`` (this Python's floor)
- ``dethpc_version``: ``dethpc --version``
- ``dethpc_help``: ``dethpc --help`` (its saved copy, filled before the rounds)
- ``dethpc_help_first``: ``dethpc --help`` with an empty cache directory (the CLI runs)
- ``dethpc_experiment_list``, ``dethpc_experiment_describe`` (the last experiment, its
  share of the trials), ``dethpc_trial_logs`` (the last trial, ``--tail 20`` of its 200
  lines): on a store at the current schema revision holding ``--experiments``
  experiments (default 1,000) and ``--trials`` trials (default 100,000), written once by
  ``make_store.py`` (bulk ``INSERT ... SELECT``)
- ``dethpc_fresh_home``: ``dethpc experiment list`` in an empty home (the store created)
- ``dethpc_submit``: ``dethpc submit examples/digits/adaptive.yaml examples/digits
  --no-daemon`` (the snapshot included; to "Created experiment N") in a home of its own
  whose store is at the current revision (one experiment more each call; no daemon
  started: ``service.start`` is the daemon's own start, not the submission)
- ``squeue``: ``squeue`` (only when it is on PATH and answers)
- ``det_version``: Determined's ``det --version`` (only when ``det`` is next to this
  Python or on PATH)

``--sbatch`` times instead, in the same interleaved rounds (Slurm must answer:
the dev cluster), ``python_pass``, ``sbatch job.sh`` itself (``sbatch``), ``dethpc sbatch
job.sh`` as a user runs it with the daemon already running (``dethpc_sbatch``: the light
path on the home's SQLite store at head) and the same with ``DETHPC_FAST_SBATCH=0``
(``dethpc_sbatch_full``: typer and the ORM, the path before issue 47's change). The job
script holds itself (``#SBATCH --hold``, a name of the run's own): nothing runs on the
cluster, and every job is cancelled at the end. Results: ``bench/results/cli_sbatch.json``
(or ``--out``); ``syscalls`` there count the sbatch child too (``strace -f``). With
``--cold N``, N more interleaved rounds time a user's *first* ``dethpc sbatch job.sh``
(``dethpc_sbatch_cold``): no daemon running before it (stopped, untimed), so the command
starts one; after each call the bench waits (untimed) until the daemon holds its lock,
recording when that was (``cold_daemon_up_ms``, from the command's fork), and stops it.

``--before-commit REV`` extracts ``git archive REV`` of this repository into the run's
temporary directory and runs its console entry (``dethpc.surfaces.entry`` of that tree,
its children too through ``PYTHONPATH``) as ``--before``: before and after timed in the
same rounds, at one commit's figures each. ``--append`` adds this run to ``--out``'s
``runs`` (one file for a run under ``nice -n -20`` and one at normal priority).

``dethpc`` is the console script next to this Python, or ``--dethpc PATH``;
``--before PATH`` (another checkout's console script) adds each ``dethpc_*`` command run
by it, as ``*_before``, to the same rounds (before and after under the same load). The
home (``DETHPC_HOME``), cluster config (the local backend) and cache directory are
temporary; ``PYTHONDONTWRITEBYTECODE`` is dropped from the commands' environment, so the
warm-up calls leave bytecode as an installed dethpc has it. Medians, p90s, every sample and
the modules each Python command imports (``-X importtime``) go to
``bench/results/cli.json`` (or ``--out``), with the host, its load average before and
after, and the commit.

Usage: python bench/cli/run.py [--calls 15] [--experiments 1000] [--trials 100000]
[--dethpc PATH] [--before PATH | --before-commit REV] [--out FILE [--append]]
[--sbatch [--cold N]]
(on a shared host, ``nice -n -20 python bench/cli/run.py ...`` as root: the ``niceness``
field of the results says which)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def timed(argv: list[str], env: dict[str, str], *, fresh_cache: Path | None = None,
          fresh_home: Path | None = None, name: str = "") -> float:
    if fresh_cache is not None:
        shutil.rmtree(fresh_cache, ignore_errors=True)
        env = {**env, "XDG_CACHE_HOME": str(fresh_cache)}
    if fresh_home is not None:   # an empty home: the command creates its store
        shutil.rmtree(fresh_home, ignore_errors=True)
        fresh_home.mkdir()
        env = {**env, "DETHPC_HOME": str(fresh_home)}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}")
    CPU.setdefault(name or " ".join(argv), []).append(usage.ru_utime + usage.ru_stime)
    return elapsed


#: CPU seconds (user + sys) of each timed run, by variant name (the load on a shared host
#: inflates wall time more than CPU)
CPU: dict[str, list[float]] = {}


def syscalls(argv: list[str], env: dict[str, str]) -> int | None:
    """System calls of one run (``strace -c -f``'s total), or None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    done = subprocess.run([strace, "-c", "-f", "-o", "/dev/stderr", *argv], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    for line in done.stderr.splitlines()[::-1]:
        words = line.split()
        if words and words[-1] == "total":
            return int(words[3] if len(words) >= 5 else words[2])
    return None


def interpreter(path: str) -> str | None:
    """The Python a console script runs under (its ``#!`` line), or None."""
    try:
        with open(path, "rb") as f:
            first = f.readline().decode(errors="replace")
    except OSError:
        return None
    return first[2:].strip() if first.startswith("#!") and "python" in first else None


def modules_imported(argv: list[str], env: dict[str, str]) -> int | None:
    """Modules a Python command imports, the interpreter's own start-up included
    (``-X importtime`` lines); None for a command that is not Python."""
    if argv[0] == sys.executable:
        cmd = [sys.executable, "-X", "importtime", *argv[1:]]
    else:
        python = interpreter(argv[0])
        if python is None:
            return None
        cmd = [python, "-X", "importtime", *argv]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:"))


def record_store(env: dict[str, str], experiments: int, trials: int,
                 runs: Path) -> tuple[int, int]:
    """The store (``make_store.py``, written once); the last experiment's and trial's ids."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("make_store.py")),
                           str(experiments), str(trials), str(runs)], env=env, check=True,
                          capture_output=True, text=True)
    exp_id, trial_id = done.stdout.split()
    return int(exp_id), int(trial_id)


def before_tree(tmp: Path, rev: str) -> str:
    """``git archive REV`` of this repository under ``tmp``, and a console script that runs
    its entry (its own ``dethpc`` package first on the path, for its children too);
    returns the script's path."""
    tree = tmp / f"before-{rev}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    script = tree / "dethpc-before"      # beside the package: sys.path[0] is the tree
    script.write_text(f"#!{sys.executable}\nimport os, sys\n"
                      f"os.environ['PYTHONPATH'] = {str(tree)!r}\n"
                      "from dethpc.surfaces.entry import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return str(script)


def daemon_up(home: Path) -> bool:
    """Whether a daemon holds ``home``'s lock (``dethpc.control.service.running_pid``'s
    test, without importing dethpc here)."""
    lock = home / "daemon.lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def measure_cold(variants: dict[str, list[str]], env: dict[str, str], home: Path,
                 stop: list[str], rounds: int) -> tuple[dict[str, list[float]],
                                                        dict[str, list[float]]]:
    """``rounds`` interleaved rounds of each first-call variant: the daemon stopped
    (untimed), the command timed, then (untimed) the wait until the daemon holds its lock,
    whose time from the command's fork is the second result, and its stop."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    up: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, argv in variants.items():
            subprocess.run(stop, env=env, capture_output=True, check=True, timeout=120)
            assert not daemon_up(home)
            start = time.perf_counter()
            samples[name].append(timed(argv, env, name=name))
            deadline = start + 300
            while not daemon_up(home):
                if time.perf_counter() > deadline:
                    raise SystemExit(f"{name}: no daemon took the lock within 300 s")
                time.sleep(0.005)
            up[name].append(time.perf_counter() - start)
    subprocess.run(stop, env=env, capture_output=True, check=True, timeout=120)
    return samples, up


def sbatch_site(tmp: Path, env: dict[str, str],
                dethpc: str) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], str]:
    """``--sbatch``'s variants and homes: a home on the Slurm backend whose store is at
    head (made by a first command) and whose daemon runs, and a held job script; returns
    the variants, their homes' variables and the job name every job goes out under."""
    sbatch = shutil.which("sbatch")
    if sbatch is None or subprocess.run(["squeue"], capture_output=True, check=False,
                                        timeout=30).returncode != 0:
        raise SystemExit("--sbatch needs Slurm's sbatch on PATH and a cluster that answers")
    home = tmp / "sbatch-home"
    home.mkdir()
    (home / "cluster.yaml").write_text(f"backend: slurm\nruns_root: {home}/runs\n")
    name = f"dethpc-bench-{uuid.uuid4().hex[:8]}"
    work = tmp / "sbatch-work"
    work.mkdir()
    (work / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --hold\n#SBATCH --job-name={name}\n"
                                 "#SBATCH --output=/dev/null\n#SBATCH --time=1\ntrue\n")
    where = {"DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml"),
             "DETHPC_DETECT": "0"}
    timed([dethpc, "experiment", "list"], {**env, **where})   # the store, at head
    subprocess.run([dethpc, "daemon", "start"], env={**env, **where}, check=True,
                   capture_output=True, timeout=300)
    job = str(work / "job.sh")
    variants = {"python_pass": [sys.executable, "-c", "pass"], "sbatch": [sbatch, job],
                "dethpc_sbatch": [dethpc, "sbatch", job],
                "dethpc_sbatch_full": [dethpc, "sbatch", job]}
    homes = {"dethpc_sbatch": where, "dethpc_sbatch_full": {**where, "DETHPC_FAST_SBATCH": "0"}}
    return variants, homes, name


def measure(variants: dict[str, list[str]], env_of: Callable[[str], dict[str, str]],
            tmp: Path, rounds: int) -> tuple[dict[str, list[float]], dict[str, int | None],
                                             dict[str, int | None]]:
    """Warm-up calls, then ``rounds`` interleaved rounds of every variant; then the modules
    each imports and the system calls of one run of each."""
    for name, argv in variants.items():   # warm the page cache, the .pyc and --help
        timed(argv, env_of(name))
    first_cache = tmp / "first-cache"
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, argv in variants.items():
            fresh = first_cache if name.startswith("dethpc_help_first") else None
            home_dir = tmp / "fresh-home" if name.startswith("dethpc_fresh_home") else None
            samples[name].append(timed(argv, env_of(name), fresh_cache=fresh,
                                       fresh_home=home_dir, name=name))
    modules: dict[str, int | None] = {}
    calls: dict[str, int | None] = {}
    for n, (name, argv) in enumerate(variants.items()):
        counted = env_of(name)
        if name.startswith("dethpc_help_first"):
            counted["XDG_CACHE_HOME"] = str(tmp / f"count-cache-{n}")
        if name.startswith("dethpc_fresh_home"):
            (tmp / f"count-home-{n}").mkdir()
            counted["DETHPC_HOME"] = str(tmp / f"count-home-{n}")
        modules[name] = modules_imported(argv, counted)
        calls[name] = syscalls(argv, counted)
    return samples, modules, calls


def git_commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--dethpc", default=str(Path(sys.executable).parent / "dethpc"))
    parser.add_argument("--before", help="another checkout's console script, its dethpc "
                        "commands timed in the same rounds (``*_before``)")
    parser.add_argument("--before-commit", help="``git archive`` this commit of the "
                        "repository and time its console entry as ``--before``")
    parser.add_argument("--cold", type=int, default=0, help="with --sbatch: rounds of a "
                        "first `dethpc sbatch` with no daemon running (it starts one)")
    parser.add_argument("--append", action="store_true", help="add this run to --out's "
                        "``runs`` instead of replacing the file")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sbatch", action="store_true", help="time `dethpc sbatch` beside "
                        "`sbatch` instead (Slurm must answer)")
    args = parser.parse_args()
    args.out = args.out or REPO / "bench" / "results" / (
        "cli_sbatch.json" if args.sbatch else "cli.json")
    dethpc = args.dethpc
    det = shutil.which("det", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dethpc-bench-cli-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "cluster.yaml").write_text(f"backend: local\nruns_root: {home}/runs\n")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DETHPC_", "SLURM_", "XDG_"))}
        env.update({"DETHPC_HOME": str(home), "DETHPC_CLUSTER_CONFIG": str(home / "cluster.yaml"),
                    "XDG_CACHE_HOME": str(Path(tmp) / "cache"),
                    "XDG_CONFIG_HOME": str(Path(tmp) / "config")})
        env.pop("COLUMNS", None)
        # an installed CLI runs from its bytecode: with PYTHONDONTWRITEBYTECODE set (as on
        # the dev VM) every module changed since the last compile would be compiled again
        # on every call (~40 ms of CPU for a read command after an edit); the warm-up calls
        # write the .pyc files instead
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        first_ms: float | None = None
        job_name = ""
        variants: dict[str, list[str]]
        homes: dict[str, dict[str, str]]
        if args.before_commit:
            args.before = before_tree(Path(tmp), args.before_commit)
        if args.sbatch:
            variants, homes, job_name = sbatch_site(Path(tmp), env, dethpc)
            if args.before:
                homes.update({f"{name}_before": homes[name] for name in list(homes)})
                variants.update({f"{name}_before": [args.before, *argv[1:]]
                                 for name, argv in list(variants.items())
                                 if name.startswith("dethpc_")})
        else:
            variants = {
                "python_pass": [sys.executable, "-c", "pass"],
                "dethpc_version": [dethpc, "--version"],
                "dethpc_help": [dethpc, "--help"],
                "dethpc_help_first": [dethpc, "--help"],
            }
            squeue = shutil.which("squeue")
            if squeue and subprocess.run([squeue], capture_output=True, check=False,
                                         timeout=30).returncode == 0:
                variants["squeue"] = [squeue]
            if det:
                variants["det_version"] = [det, "--version"]
            # the store: its first command (a fresh home), timed once, then filled
            first_ms = round(timed([dethpc, "experiment", "list"], env) * 1000, 1)
            exp_id, trial_id = record_store(env, args.experiments, args.trials,
                                            Path(tmp) / "runs")
            variants.update({
                "dethpc_experiment_list": [dethpc, "experiment", "list"],
                "dethpc_experiment_describe": [dethpc, "experiment", "describe", str(exp_id)],
                "dethpc_trial_logs": [dethpc, "trial", "logs", str(trial_id), "--tail", "20"],
                "dethpc_fresh_home": [dethpc, "experiment", "list"],
            })
            # submit: its own home (its store at head, made by a first command), the example
            submit_home = Path(tmp) / "submit-home"
            submit_home.mkdir()
            (submit_home / "cluster.yaml").write_text(
                f"backend: local\nruns_root: {submit_home}/runs\n")
            homes = {"dethpc_submit": {"DETHPC_HOME": str(submit_home), "DETHPC_DETECT": "0",
                                       "DETHPC_CLUSTER_CONFIG": str(submit_home / "cluster.yaml")}}
            timed([dethpc, "experiment", "list"], {**env, **homes["dethpc_submit"]})
            digits = REPO / "examples" / "digits"
            variants["dethpc_submit"] = [dethpc, "submit", str(digits / "adaptive.yaml"),
                                         str(digits), "--no-daemon"]
            if args.before:
                homes.update({f"{name}_before": homes[name] for name in list(homes)})
                variants.update({f"{name}_before": [args.before, *argv[1:]]
                                 for name, argv in list(variants.items())
                                 if name.startswith("dethpc_")})

        def env_of(name: str) -> dict[str, str]:
            return {**env, **homes.get(name, {})}

        cold: dict[str, list[float]] = {}
        cold_up: dict[str, list[float]] = {}
        try:
            samples, modules, calls = measure(variants, env_of, Path(tmp), args.calls)
            if args.sbatch and args.cold:
                firsts = {"dethpc_sbatch_cold": variants["dethpc_sbatch"]}
                if args.before:
                    firsts["dethpc_sbatch_cold_before"] = variants["dethpc_sbatch_before"]
                cold, cold_up = measure_cold(
                    firsts, env_of("dethpc_sbatch"), Path(env_of("dethpc_sbatch")["DETHPC_HOME"]),
                    [dethpc, "daemon", "stop"], args.cold)
        finally:
            if args.sbatch:     # the daemon, and the held jobs of every variant
                subprocess.run([dethpc, "daemon", "stop"], env=env_of("dethpc_sbatch"),
                               capture_output=True, check=False, timeout=120)
                subprocess.run(["scancel", f"--name={job_name}"], check=False, timeout=60)
    median = {k: round(statistics.median(v) * 1000, 1) for k, v in samples.items()}
    result = {
        "what": "wall ms of one command (fork to exit), medians of interleaved rounds",
        "host": f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}",
        "regime": "the shared 2-core dev machine, other engineers' work running beside "
                  "it (see the load averages)",
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        # under ``nice -n -20`` other users' processes (nice 0) leave the commands the CPU:
        # the wall times approach a quiet machine's (slurmctld and the disk stay shared)
        "niceness": os.nice(0),
        "python": platform.python_version(),
        "commit": git_commit(),
        "dethpc": dethpc,
        "experiments_in_store": None if args.sbatch else args.experiments,
        "trials_in_store": None if args.sbatch else args.trials,
        "sbatch_job": "a held one-line script (#SBATCH --hold), the user's daemon running; "
                      "syscalls include the sbatch child" if args.sbatch else None,
        "first_command_fresh_home_ms": first_ms,
        "calls": args.calls,
        "median_ms": median,
        "p90_ms": {k: round(p90(v) * 1000, 1) for k, v in samples.items()},
        "modules_imported": modules,
        "syscalls_strace_c_f": calls,
        "median_cpu_ms": {k: round(statistics.median(CPU[k]) * 1000, 1)
                          for k in variants},
        "samples_ms": {k: [round(x * 1000, 1) for x in v] for k, v in samples.items()},
        "before": args.before_commit or args.before,
        "cold_rounds": args.cold if args.sbatch else None,
        "cold_median_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in cold.items()},
        "cold_median_cpu_ms": {k: round(statistics.median(CPU[k]) * 1000, 1) for k in cold},
        "cold_daemon_up_median_ms": {k: round(statistics.median(v) * 1000, 1)
                                     for k, v in cold_up.items()},
        "cold_samples_ms": {k: [round(x * 1000, 1) for x in v] for k, v in cold.items()},
        "cold_daemon_up_ms": {k: [round(x * 1000, 1) for x in v] for k, v in cold_up.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.append and args.out.exists():
        kept = json.loads(args.out.read_text())
        written = {"runs": [*kept.get("runs", [kept]), result]}
    elif args.append:
        written = {"runs": [result]}
    else:
        written = result
    args.out.write_text(json.dumps(written, indent=2) + "\n")
    width = max(map(len, variants))
    for name in variants:
        print(f"{name:<{width}}  median {median[name]:7.1f} ms  "
              f"cpu {result['median_cpu_ms'][name]:7.1f} ms  "  # type: ignore[index]
              f"p90 {result['p90_ms'][name]:7.1f} ms  modules {modules.get(name, '-')}  "
              f"syscalls {calls.get(name, '-')}")
    for name in cold:
        print(f"{name}  median {result['cold_median_ms'][name]:7.1f} ms  "  # type: ignore[index]
              f"daemon up at {result['cold_daemon_up_median_ms'][name]:7.1f} ms")  # type: ignore[index]
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
