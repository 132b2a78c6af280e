"""One daemon tick at scale: CPU, peak RSS, slurmctld commands/RPCs and database size at
1,000 / 10,000 / 50,000 trials (issue 16 item 5).

Two parts, each cell in its own fresh process so peak RSS is the tick's process only:

* ``synthetic`` — a store built through the real daemon (``Daemon.tick`` creates and
  submits every trial, writes every job script) against ``replay.ReplayRunner``: the
  real ``SlurmBackend`` parsing squeue lines in the dev cluster's format from a job
  table (64 RUNNING, a share COMPLETED and gone from the queue, the rest PENDING).
  Finished trials have a full metrics.jsonl (training + validation + checkpoint lines)
  and an exit record; running ones get new lines before every measured tick, so ingest
  does real work. Discovery commands go to the real dev cluster once.
* ``dev`` — N toy trials submitted through the daemon on the real dev cluster
  (``python -m dethpc.devcluster up``), short trials so running and finished mix; once
  the queue is steady, a fresh process ticks and is measured, with ``sdiag`` read around
  its ticks for client RPCs (``bench/rpc`` counting).

Usage: python bench/tick_scale/run.py [synthetic|dev|both] [--trials ...] [--dev-trials ...]
       [--profile N]   (cProfile one synthetic tick at N trials, print the top entries)
Writes bench/results/tick_scale.json (merging the part it ran into what is there).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
#: the dethpc a cell imports: this checkout, or (``--trees``, before/after in one run) a
#: ``git archive`` of another commit
TREE = Path(os.environ.get("TICK_TREE") or REPO)
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(TREE))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import Model, ReplayRunner  # noqa: E402
from sqlmodel import select  # noqa: E402

from bench.pgserver import pgserver  # noqa: E402
from dethpc.backends.slurm import SlurmBackend  # noqa: E402
from dethpc.common.paths import ExperimentPaths  # noqa: E402
from dethpc.common.runner import CommandRunner, RecordingRunner  # noqa: E402
from dethpc.config import load_experiment_config  # noqa: E402
from dethpc.config.model import ClusterConfig, ResourcePool  # noqa: E402
from dethpc.control import experiments  # noqa: E402
from dethpc.control.daemon import Daemon  # noqa: E402
from dethpc.store import Store  # noqa: E402
from dethpc.store.models import Experiment, ExperimentState, Job, Trial  # noqa: E402

PgServer = pgserver().PgServer   # tests/pg's server, by its path (bench/pgserver.py)
TOY = REPO / "tests" / "fixtures" / "toy"
OUT = REPO / "bench" / "results" / "tick_scale.json"
RUNNING = 64
FINISHED_SHARE = 0.3
GOAL = {"cpu_s_at_10000": 0.5, "rss_mb_at_10000": 300, "client_rpcs_per_tick": 3}


def cluster_at(work: Path) -> ClusterConfig:
    return ClusterConfig(backend="slurm", runs_root=work / "runs", pools={
        "default": ResourcePool(name="default", partition="debug", signal_grace_s=30)})


def store_at(work: Path) -> Store:
    """The cell's store: ``TICK_URL`` (a PostgreSQL database) or the SQLite file in
    ``work``."""
    return Store(os.environ.get("TICK_URL") or f"sqlite:///{work}/db.sqlite")


def experiment_yaml(n: int, *, length: int, step_time: float) -> dict[str, Any]:
    return {"name": f"tick-{n}", "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 6.0},
                                "step_time": step_time},
            "searcher": {"name": "random", "metric": "validation_loss", "max_trials": n,
                         "max_concurrent_trials": n, "max_length": {"batches": length}},
            "min_validation_period": {"batches": 5}}


def create(n: int, work: Path, *, length: int, step_time: float) -> int:
    path = work / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment_yaml(n, length=length, step_time=step_time)))
    return experiments.create_experiment(store_at(work), cluster_at(work),
                                         load_experiment_config(path), TOY,
                                         SlurmBackend(CommandRunner(timeout=120)))


def metric_lines(first: int, last: int, *, validate_every: int = 5) -> str:
    """What the toy trial writes for steps first..last (training every step, validation
    and a checkpoint every ``validate_every``)."""
    out = []
    now = time.time()
    for s in range(first, last + 1):
        out.append({"kind": "training", "steps": s, "metrics": {"loss": 1.0 / s}, "time": now})
        if s % validate_every == 0:
            out.append({"kind": "validation", "steps": s,
                        "metrics": {"validation_loss": 1.0 / s}, "time": now})
            out.append({"kind": "checkpoint", "steps": s,
                        "uuid": f"u{first}-{s}-{os.urandom(4).hex()}",
                        "metadata": {"steps_completed": s}, "time": now})
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in out)


def append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


# ------------------------------------------------------------------ synthetic
def synthetic_build(n: int, work: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    exp_id = create(n, work, length=10, step_time=0.01)
    runner = ReplayRunner(timeout=120)
    daemon = Daemon(store_at(work), cluster_at(work), SlurmBackend(runner))
    daemon.tick()   # creates every trial, writes every script, submits arrays of <= 1001
    store = store_at(work)
    with store.session() as s:
        jobs = sorted(s.exec(select(Job).where(Job.experiment_id == exp_id)),
                      key=lambda j: j.trial_id)
    paths = ExperimentPaths(Path(work / "runs"))
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
    finished = jobs[:int(n * FINISHED_SHARE)]
    running = jobs[len(finished):len(finished) + RUNNING]
    for job in finished:
        tp = paths.trial(job.trial_id)
        append(tp.metrics, metric_lines(1, 10))
        append(tp.exit_log, json.dumps({"job": job.ref, "reason": "completed", "code": 0,
                                        "restart": 0}) + "\n")
        runner.model.jobs[job.ref or ""][0] = "COMPLETED"
    for job in running:
        append(paths.trial(job.trial_id).metrics, metric_lines(1, 3))
        runner.model.jobs[job.ref or ""][0] = "RUNNING"
    if os.environ.get("TICK_PROFILE_BUILD"):   # the catch-up tick, profiled
        prof = cProfile.Profile()
        prof.enable()
        daemon.tick()
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    else:
        daemon.tick()   # ingests the finished trials, closes their jobs
    for job in finished:
        del runner.model.jobs[job.ref or ""]   # past MinJobAge: gone from squeue
    daemon.tick()
    runner.model.save(work / "model.json")
    (work / "running.json").write_text(json.dumps([j.trial_id for j in running]))
    # what the measure cells append to: cut back to these sizes before each cell
    (work / "sizes.json").write_text(json.dumps({
        str(paths.trial(j.trial_id).metrics): paths.trial(j.trial_id).metrics.stat().st_size
        for j in running}))
    return {"exp_id": exp_id, "build_s": round(time.monotonic() - t0, 1),
            "sbatch": runner.count("sbatch")}


def synthetic_measure(n: int, work: Path, profile: bool) -> dict[str, Any]:
    runner = ReplayRunner(timeout=120, model=Model.load(work / "model.json"))
    store = store_at(work)
    daemon = Daemon(store, cluster_at(work), SlurmBackend(runner))
    with store.session() as s:
        exp = s.exec(select(Experiment)).first()
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
    running = json.loads((work / "running.json").read_text())
    step = [4]

    def progress() -> bool:   # every running trial reports two more steps
        for tid in running:
            append(paths.trial(tid).metrics, metric_lines(step[0], step[0] + 1))
        step[0] += 2
        return (step[0] - 2) % 5 == 0 or (step[0] - 1) % 5 == 0   # a validation among them

    gc_mode = settle()   # as `dethpc daemon run` does before its first tick
    c0 = time.process_time()
    daemon.tick()   # a steady daemon has ticked before: imports and discovery are done
    warmup = round(time.process_time() - c0, 3)   # the first tick: the searcher restored
    ticks: list[dict[str, Any]] = []
    for _ in range(int(os.environ.get("TICK_TICKS", "6"))):
        validation = progress()
        before = len(runner.calls)
        c0, w0 = time.process_time(), time.monotonic()
        daemon.tick()
        ticks.append({"cpu_s": round(time.process_time() - c0, 3),
                      "wall_s": round(time.monotonic() - w0, 3), "validation": validation,
                      "commands": [c[0] for c in runner.calls[before:]]})
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    progress()
    tracemalloc.start()
    daemon.tick()
    heap_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    with store.session() as s:
        states: dict[str, int] = {}
        for t in s.exec(select(Trial)):
            states[t.state.value] = states.get(t.state.value, 0) + 1
        live = len(list(s.exec(select(Job.id).where(Job.live == True))))  # noqa: E712
    cpu = [t["cpu_s"] for t in ticks]
    out: dict[str, Any] = {
        "trials": n, "trial_states": states, "live_jobs": live,
        "running_jobs": RUNNING, "cpu_s_per_tick": round(statistics.median(cpu), 4),
        "cpu_s_min": min(cpu),
        "cpu_s_plain_median": statistics.median(
            [t["cpu_s"] for t in ticks if not t["validation"]]),
        "cpu_s_validation_median": statistics.median(
            [t["cpu_s"] for t in ticks if t["validation"]]),
        "cpu_s_ticks": cpu, "validation_ticks": [t["validation"] for t in ticks],
        "wall_s_ticks": [t["wall_s"] for t in ticks],
        "commands_per_tick": [len(t["commands"]) for t in ticks],
        "command_names": sorted({Path(c).name for t in ticks for c in t["commands"]}),
        "peak_rss_mb": round(rss_mb, 1), "tick_heap_peak_mb": round(heap_peak, 1),
        "gc": gc_mode, "cpu_s_warmup": warmup,
    }
    if (work / "db.sqlite").exists() and not os.environ.get("TICK_URL"):
        out["db_mb"] = round(os.path.getsize(work / "db.sqlite") / 2**20, 1)
    if profile:
        # the profiled tick: a plain one, or with TICK_PROFILE_TICK=validation the next
        # validation tick (the one the 1 s goal at 50,000 is missed by)
        want = os.environ.get("TICK_PROFILE_TICK", "plain") == "validation"
        while progress() != want:
            daemon.tick()
        prof = cProfile.Profile()
        prof.enable()
        daemon.tick()
        prof.disable()
        prof.dump_stats(str(work / "profile.prof"))   # the raw profile, for pstats
        buf = io.StringIO()
        order = os.environ.get("TICK_SORT", "cumulative")   # or tottime
        pstats.Stats(prof, stream=buf).sort_stats(order).print_stats(40)
        (work / "profile.txt").write_text(buf.getvalue())
        print(buf.getvalue(), file=sys.stderr)
    return out


def settle() -> str:
    """The daemon process's collector settings where the measured tree has them
    (``dethpc.control.daemon.heap``, from bcd771d), else the interpreter's defaults."""
    try:
        from dethpc.control.daemon import heap
    except ImportError:
        return "default"
    heap.settle()
    return "settled"


# ------------------------------------------------------------------ dev cluster
CLIENT_RPCS = {
    "REQUEST_FED_INFO", "REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO",
    "REQUEST_PARTITION_INFO", "REQUEST_NODE_INFO", "REQUEST_SUBMIT_BATCH_JOB",
    "REQUEST_KILL_JOB", "REQUEST_CANCEL_JOB", "REQUEST_UPDATE_JOB", "REQUEST_JOB_REQUEUE",
    "REQUEST_BUILD_INFO", "REQUEST_PING", "REQUEST_JOB_READY", "REQUEST_CONFIG",
}


def sdiag_counts() -> dict[str, int]:
    """slurmctld's RPC counts by message type (bench/rpc's ``sdiag`` parsing)."""
    spec = importlib.util.spec_from_file_location("rpc_bench", REPO / "bench" / "rpc" / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.sdiag()[0])


def dev_submit(n: int, work: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    exp_id = create(n, work, length=20, step_time=1.0)
    runner = RecordingRunner(timeout=120)
    Daemon(store_at(work), cluster_at(work), SlurmBackend(runner)).tick()
    return {"exp_id": exp_id, "submit_s": round(time.monotonic() - t0, 1),
            "sbatch": runner.count("sbatch")}


def dev_measure(n: int, work: Path, ticks: int = 3) -> dict[str, Any]:
    runner = RecordingRunner(timeout=120)
    store = store_at(work)
    daemon = Daemon(store, cluster_at(work), SlurmBackend(runner))
    daemon.tick()
    cpu, wall = [], []
    s0 = sdiag_counts()
    before = len(runner.calls)
    for _ in range(ticks):
        time.sleep(1)
        c0, w0 = time.process_time(), time.monotonic()
        daemon.tick()
        cpu.append(round(time.process_time() - c0, 3))
        wall.append(round(time.monotonic() - w0, 3))
    s1 = sdiag_counts()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rpcs = {k: v - s0.get(k, 0) for k, v in s1.items() if v - s0.get(k, 0)}
    with store.session() as s:
        states: dict[str, int] = {}
        for t in s.exec(select(Trial)):
            states[t.state.value] = states.get(t.state.value, 0) + 1
    return {"trials": n, "trial_states": states, "cpu_s_per_tick": min(cpu),
            "cpu_s_ticks": cpu, "wall_s_ticks": wall,
            "commands_per_tick": (len(runner.calls) - before) / ticks,
            "command_names": sorted({Path(c[0]).name for c in runner.calls[before:]}),
            "client_rpcs_per_tick": sum(v for k, v in rpcs.items() if k in CLIENT_RPCS) / ticks,
            "rpcs_by_type": rpcs, "peak_rss_mb": round(rss_mb, 1),
            "db_mb": round(os.path.getsize(work / "db.sqlite") / 2**20, 1),
            "note": "sdiag counts every client of slurmctld in the interval; other "
                    "sessions' tests share the dev cluster"}


def dev_kill(work: Path) -> None:
    store = store_at(work)
    daemon = Daemon(store, cluster_at(work), SlurmBackend(CommandRunner(timeout=120)))
    with store.session() as s:
        exp_id = s.exec(select(Experiment.id)).first()
    assert exp_id is not None
    experiments.request_state(store, exp_id, "kill")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        daemon.tick()
        if ExperimentState(experiments.get_experiment(store, exp_id).state).is_terminal:
            return
        time.sleep(1)


def running_count(work: Path) -> int:
    with store_at(work).session() as s:
        return len(list(s.exec(select(Trial).where(Trial.state == "RUNNING"))))


# ------------------------------------------------------------------ driver
def child(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script's ``_cell`` mode in a fresh process; its last stdout line is JSON."""
    res = subprocess.run([sys.executable, __file__, "_cell", *args], capture_output=True,
                         text=True, check=False, env={**os.environ, **(env or {})})
    if res.returncode != 0:
        raise SystemExit(f"cell {args} failed:\n{res.stderr[-4000:]}")
    if res.stderr.strip():
        print(res.stderr[-6000:], file=sys.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def cell(mode: str, n: int, work: Path, profile: bool) -> dict[str, Any]:
    if mode == "build":
        return synthetic_build(n, work)
    if mode == "measure":
        return synthetic_measure(n, work, profile)
    if mode == "dev_submit":
        return dev_submit(n, work)
    if mode == "dev_measure":
        return dev_measure(n, work)
    if mode == "dev_kill":
        dev_kill(work)
        return {}
    raise SystemExit(f"unknown cell mode {mode!r}")


def restore(work: Path, pg: Any, n: int) -> None:
    """The built store as the build left it: the database (a copy of the built one) and
    the running trials' metrics files cut back to their built sizes."""
    if pg is not None:
        pg.create("m", template=f"b{n}")
    else:
        for suffix in ("-wal", "-shm"):
            (work / f"db.sqlite{suffix}").unlink(missing_ok=True)
        shutil.copyfile(work / "db.built", work / "db.sqlite")
    for path, size in json.loads((work / "sizes.json").read_text()).items():
        os.truncate(path, size)


def run_synthetic(sizes: list[int], profile_at: int | None, *, backends: list[str],
                  trees: dict[str, Path], measures: int) -> list[dict[str, Any]]:
    """Per backend and size: one store built by the daemon, then ``measures`` rounds of
    one measure cell per tree (interleaved), each on the built store restored."""
    out = []
    for backend in backends:
        pg = PgServer() if backend == "postgres" else None
        if pg is not None:
            pg.start()
        try:
            for n in sizes:
                work = Path(tempfile.mkdtemp(prefix=f"dethpc-tick-{backend}-{n}-"))
                env = {}
                if pg is not None:
                    pg.create(f"b{n}")
                    env["TICK_URL"] = pg.url(f"b{n}")
                built = child("build", str(n), str(work), env=env)
                if pg is None:
                    shutil.copyfile(work / "db.sqlite", work / "db.built")
                for _ in range(measures):
                    for label, tree in trees.items():
                        restore(work, pg, n)
                        env = {"TICK_TREE": str(tree)}
                        if pg is not None:
                            env["TICK_URL"] = pg.url("m")
                        load = os.getloadavg()[0]
                        r = child("measure", str(n), str(work),
                                  "1" if n == profile_at else "0", env=env)
                        if pg is not None:
                            r["db_mb"] = pg.size_mb("m")
                        r.update(backend=backend, tree=label, load_before=round(load, 2),
                                 load_after=round(os.getloadavg()[0], 2), build=built)
                        print(json.dumps({k: r.get(k) for k in (
                            "backend", "trials", "tree", "cpu_s_per_tick",
                            "cpu_s_plain_median", "cpu_s_validation_median", "peak_rss_mb",
                            "load_before")}), flush=True)
                        out.append(r)
                shutil.rmtree(work, ignore_errors=True)
        finally:
            if pg is not None:
                pg.stop()
    return out


def summary(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over the cells of each (backend, trials, tree)."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["backend"], c["trials"], c["tree"]), []).append(c)
    med = statistics.median
    return [{"backend": b, "trials": n, "tree": t, "cells": len(cs),
             "cpu_s_per_tick_median": med(c["cpu_s_per_tick"] for c in cs),
             "cpu_s_plain_median": med(c["cpu_s_plain_median"] for c in cs),
             "cpu_s_validation_median": med(c["cpu_s_validation_median"] for c in cs),
             "cpu_s_all_ticks_median": med(x for c in cs for x in c["cpu_s_ticks"]),
             "peak_rss_mb_max": max(c["peak_rss_mb"] for c in cs),
             "tick_heap_peak_mb_max": max(c["tick_heap_peak_mb"] for c in cs),
             "db_mb": cs[-1].get("db_mb"),
             "load": [c["load_before"] for c in cs]}
            for (b, n, t), cs in sorted(groups.items())]


def run_dev(sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        work = Path(tempfile.mkdtemp(prefix=f"dethpc-tickdev-{n}-"))
        sub = child("dev_submit", str(n), str(work))
        # tick (as a daemon would) until the first trials have finished and others run
        store = store_at(work)
        daemon = Daemon(store, cluster_at(work), SlurmBackend(CommandRunner(timeout=120)))
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            daemon.tick()
            with store.session() as s:
                done = len(list(s.exec(select(Trial).where(Trial.state == "COMPLETED"))))
            if done >= RUNNING:
                break
            time.sleep(1)
        del daemon, store
        try:
            r = child("dev_measure", str(n), str(work))
        finally:
            child("dev_kill", str(n), str(work))
        r["submit"] = sub
        print(json.dumps({k: r[k] for k in ("trials", "trial_states", "cpu_s_per_tick",
                                             "peak_rss_mb", "client_rpcs_per_tick")}),
              flush=True)
        out.append(r)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_cell":
        mode, n, work = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
        profile = len(sys.argv) > 5 and sys.argv[5] == "1"
        print(json.dumps(cell(mode, n, work, profile)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("part", nargs="?", default="both", choices=["synthetic", "dev", "both"])
    ap.add_argument("--trials", type=int, nargs="+", default=[1000, 10000, 50000])
    ap.add_argument("--dev-trials", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--profile", type=int, default=None)
    ap.add_argument("--backends", nargs="+", default=["sqlite"],
                    choices=["sqlite", "postgres"])
    ap.add_argument("--trees", nargs="+", default=[], metavar="LABEL=PATH",
                    help="measure each built store with these dethpc trees (git "
                         "archives), interleaved; default: this checkout")
    ap.add_argument("--measures", type=int, default=1,
                    help="measure cells per tree on each built store")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    trees = {label: Path(path).resolve() for label, path in
             (t.split("=", 1) for t in args.trees)} or {"this": REPO}
    path = Path(args.out)
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    doc.update({"benchmark": "tick_scale", "host": platform.node(), "time": time.time(),
                "goal": GOAL, "python": platform.python_version()})
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if args.part in ("synthetic", "both"):
        doc["synthetic"] = run_synthetic(args.trials, args.profile, backends=args.backends,
                                         trees=trees, measures=args.measures)
        doc["synthetic_summary"] = summary(doc["synthetic"])
        doc["synthetic_commit"] = commit
        doc["synthetic_trees"] = {label: str(path) for label, path in trees.items()}
    if args.part in ("dev", "both"):
        doc["dev_cluster"] = run_dev(args.dev_trials)
        doc["dev_cluster_commit"] = commit
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
